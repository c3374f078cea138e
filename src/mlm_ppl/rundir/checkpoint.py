"""The checkpoint format: what a sampling run writes as it goes, so that it resumes exactly.

``checkpoint.pt`` (or one ``checkpoint-gK.pt`` per group of chains on Ray workers) holds the
run's settings (:meth:`~mlm_ppl.settings.RunSettings.to_dict`), the kernel's name, its State
(the fields of the registered kernel's ``State``, nested states as tagged dicts), every chain's
random stream, the draws and the kernel's statistics so far. It is read with
``torch.load(weights_only=True)``: plain tensors, numbers and dicts, no classes.
"""

from __future__ import annotations

import functools
import io
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._files import check_regular, write_bytes_atomic
from ..inference.distributed import GroupCheckpoints
from ..inference.registry import KERNELS
from ..inference.runner import Checkpoint
from .directory import RunDirectory

__all__ = [
    "CHECKPOINT",
    "FORMAT",
    "save_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "group_checkpoints",
    "group_name",
    "checkpoint_files",
]

CHECKPOINT = "checkpoint.pt"
"""A run's checkpoint in its directory: its chains' states, random streams and draws so far."""
FORMAT = "mlm-ppl-run-2"  # config.json and checkpoint.pt of a sampling run (2: typed settings, kernel named)
_OLD_FORMATS = {"mlm-ppl-run-1": "mlm-ppl 0.2 or earlier"}


def save_checkpoint(run_dir: RunDirectory, cp: Checkpoint, settings: Mapping[str, Any]) -> None:
    """Write a run's ``checkpoint.pt`` atomically, with the run's settings.

    Parameters
    ----------
    run_dir : RunDirectory
        The run's directory, locked by this process.
    cp : Checkpoint
        The checkpoint (:class:`~mlm_ppl.inference.Checkpoint`), as
        :func:`~mlm_ppl.run_chains` hands it to ``on_checkpoint``.
    settings : mapping
        The run's settings as recorded (:meth:`~mlm_ppl.settings.RunSettings.to_dict`); a resume
        compares them with ``config.json``.

    Raises
    ------
    ValueError
        When the checkpoint's state is of no registered kernel, or ``run_dir`` is closed or holds
        a ``checkpoint.pt`` of the user's.

    Examples
    --------
    >>> import tempfile
    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.rundir import RunDirectory, load_checkpoint, save_checkpoint
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C"))
    >>> with RunDirectory.create(tempfile.mkdtemp(), "sample") as run_dir:
    ...     run = run_chains(kernel, 2, 3, on_checkpoint=lambda cp: save_checkpoint(run_dir, cp, {}))
    >>> load_checkpoint(run_dir.path).draws.equal(run.tokens)
    True
    """
    run_dir.write_bytes(CHECKPOINT, _checkpoint_bytes(cp, settings))


def group_name(group: int) -> str:
    """Name the checkpoint file of a group of chains of a run on Ray workers.

    Parameters
    ----------
    group : int
        The group's index.

    Returns
    -------
    str
        The file name, in the run directory.

    Examples
    --------
    >>> from mlm_ppl.rundir import group_name
    >>> group_name(3)
    'checkpoint-g3.pt'
    """
    return f"checkpoint-g{group}.pt"


def checkpoint_files(directory: str | Path) -> list[str]:
    """List the names of the checkpoints in a run directory: ``checkpoint.pt``, or one per group.

    Parameters
    ----------
    directory : str or path
        The run directory (it must exist).

    Returns
    -------
    list of str
        The names, sorted as strings (``checkpoint-g10.pt`` before ``checkpoint-g2.pt``).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.rundir import checkpoint_files
    >>> directory = Path(tempfile.mkdtemp())
    >>> for name in ("checkpoint-g1.pt", "checkpoint-g0.pt", "config.json"):
    ...     _ = (directory / name).write_bytes(b"")
    >>> checkpoint_files(directory)
    ['checkpoint-g0.pt', 'checkpoint-g1.pt']
    """
    return sorted(
        p.name for p in Path(directory).iterdir() if re.fullmatch(r"checkpoint(-g\d+)?\.pt", p.name, re.ASCII)
    )


def group_checkpoints(run_dir: RunDirectory, settings: Mapping[str, Any], groups: int) -> GroupCheckpoints:
    """Keep the checkpoints of the groups of chains of a run on Ray workers in its directory.

    The names (:func:`group_name`) are recorded in the marker now; the workers write and read the
    files themselves, through picklable functions.

    Parameters
    ----------
    run_dir : RunDirectory
        The run's directory, locked by this process.
    settings : mapping
        The run's settings as recorded (:meth:`~mlm_ppl.settings.RunSettings.to_dict`), written
        into each checkpoint.
    groups : int
        Number of groups of chains.

    Returns
    -------
    GroupCheckpoints
        The pair of functions ``save(group, checkpoint)`` and ``load(group)`` the workers call
        (``load`` gives None for a group without a checkpoint).

    Raises
    ------
    ValueError
        When ``run_dir`` is closed, or a group's file name is taken by a file of the user's.
    """
    for k in range(groups):
        run_dir.record(group_name(k))
    path = str(run_dir.path)
    return GroupCheckpoints(functools.partial(_save_group, path, dict(settings)), functools.partial(_load_group, path))


def _save_group(directory: str, settings: dict[str, Any], group: int, cp: Checkpoint) -> None:
    write_bytes_atomic(Path(directory) / group_name(group), _checkpoint_bytes(cp, settings))


def _load_group(directory: str, group: int) -> Checkpoint | None:
    return read_checkpoint(Path(directory) / group_name(group))[0]


def _kernel_of(state: Any) -> str:
    """The registered kernel whose State ``state`` is."""
    for name, cls in KERNELS.items():
        if type(state) is cls.State:
            return name
    raise ValueError(f"no registered kernel has the state {type(state).__name__}")


def _checkpoint_bytes(cp: Checkpoint, settings: Mapping[str, Any]) -> bytes:
    payload = {
        "format": FORMAT,
        "settings": dict(settings),
        "kernel": _kernel_of(cp.state),
        "step": cp.step,
        "state": _pack_state(cp.state),
        "streams": cp.streams,
        "draws": cp.draws,
        "stats": cp.stats,
        "initial": cp.initial,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def _pack_state(state: Any) -> dict[str, Any]:
    """A kernel state as a plain dict of tensors and numbers; a nested state (surrogate-MH's inner
    chain) becomes a dict of its own, tagged with its class's name (an inner chain may be one of
    several kernels: MH, or gap-jump on a variable gap)."""
    return {
        k: {"nested": _pack_state(v), "state": type(v).__name__} if hasattr(v, "_asdict") else v
        for k, v in state._asdict().items()
    }


def _nested_class(annotated: type, name: str | None) -> type:
    """The class of a nested state: the registered kernel State of that name, or (a checkpoint
    written before states were named) the field's annotation, the first of a union (what those
    versions wrote)."""
    if name is None:
        arms = typing.get_args(annotated)
        return arms[0] if arms else annotated
    for kernel in KERNELS.values():
        if kernel.State.__name__ == name:
            return kernel.State
    raise ValueError(f"kernel state {name} is not one of this version's kernels")


def _unpack_state(cls: type, fields: dict[str, Any]) -> Any:
    """``cls(**fields)``, nested states rebuilt as the class they name (or ``cls``'s field annotations)."""
    hints = typing.get_type_hints(cls)
    values = {
        k: _unpack_state(_nested_class(hints[k], v.get("state")), v["nested"])
        if isinstance(v, dict) and "nested" in v
        else v
        for k, v in fields.items()
    }
    try:
        return cls(**values)
    except TypeError as err:  # fields of another version or another kernel
        raise ValueError(f"kernel state {cls.__name__} does not match this version ({err})") from None


def load_checkpoint(directory: str | Path) -> Checkpoint | None:
    """Read the checkpoint in a run directory, or None if the run never wrote one.

    No lock is taken, and the checkpoint is not compared with ``config.json`` (see
    :func:`run_checkpoint`).

    Parameters
    ----------
    directory : str or path
        The run directory.

    Returns
    -------
    Checkpoint or None
        The :class:`~mlm_ppl.inference.Checkpoint` of ``checkpoint.pt``.

    Raises
    ------
    ValueError
        When ``checkpoint.pt`` is not a regular file, is damaged, is not an mlm-ppl checkpoint,
        or was written by an older version.

    Examples
    --------
    >>> import tempfile
    >>> from mlm_ppl.rundir import load_checkpoint
    >>> load_checkpoint(tempfile.mkdtemp()) is None
    True
    """
    return read_checkpoint(Path(directory) / CHECKPOINT)[0]


def read_checkpoint(file: Path) -> tuple[Checkpoint | None, dict[str, Any] | None]:
    """``(checkpoint, the settings it was made with)``; ``(None, None)`` if there is none."""
    if not file.exists():
        return None, None
    check_regular(file, "checkpoint")  # a FIFO would block torch.load
    try:
        payload = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a damaged or foreign file; every one means the same here
        raise ValueError(
            f"{file} is corrupt or not an mlm-ppl checkpoint ({type(err).__name__}); "
            "start the run again, overwriting it"
        ) from None
    fmt = payload.get("format") if isinstance(payload, dict) else None
    if fmt in _OLD_FORMATS:
        raise ValueError(
            f"{file} was written by {_OLD_FORMATS[fmt]}, whose checkpoints this version does not read: finish the "
            "run with that version, or start it again"
        )
    if fmt != FORMAT or payload.get("kernel") not in KERNELS:
        raise ValueError(f"{file} is not an mlm-ppl checkpoint (or its kernel {payload.get('kernel')!r} is unknown)")
    try:
        kernel = KERNELS[payload["kernel"]]
        state = _unpack_state(kernel.State, payload["state"])
        stats = dict(payload["stats"])
        if set(stats) != set(kernel.stat_names()):
            raise ValueError(f"statistics {sorted(stats)}, {payload['kernel']} reports {sorted(kernel.stat_names())}")
        fields = (payload["step"], payload["streams"], payload["draws"], payload["initial"], *stats.values())
        if not isinstance(fields[0], int) or not all(isinstance(t, torch.Tensor) for t in fields[1:]):
            raise ValueError("a field of the wrong type")
        settings = payload["settings"]
        if not isinstance(settings, dict):
            raise ValueError("settings of the wrong type")
    except (KeyError, AttributeError, TypeError, ValueError) as err:
        raise ValueError(f"{file} is not an mlm-ppl checkpoint or is damaged ({err})") from None
    cp = Checkpoint(payload["step"], state, payload["streams"], payload["draws"], stats, payload["initial"])
    return cp, settings
