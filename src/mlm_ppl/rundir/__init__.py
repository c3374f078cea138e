"""Run directories: owned, locked, written atomically; a checkpoint that is the run's record.

* ``directory``: the owner (marker, lock, atomic writes) of any run directory;
* ``checkpoint``: the checkpoint format of a sampling run;
* ``outputs``: what a finished sampling run writes.

Here: a sampling run's directory from start to resume. ``config.json`` holds its
:class:`~mlm_ppl.settings.RunSettings`; the checkpoint holds them again, and a resume refuses a
``config.json`` that differs from them. Resuming gives exactly the draws of an uninterrupted
run. See ``docs/reliability.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .._files import load_json
from ..inference.runner import Checkpoint
from ..settings import RunSettings
from .checkpoint import (
    CHECKPOINT,
    FORMAT,
    checkpoint_files,
    group_checkpoints,
    group_name,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from .directory import CONFIG, LOCK, MARKER, RunDirectory, RunExistsError, RunLockedError, kind_of
from .outputs import OUTPUT_NAMES, OUTPUTS, PLOTS, PLOTS_RECORD, plots_directory, plots_of, write_outputs

__all__ = [
    "CONFIG",
    "CHECKPOINT",
    "MARKER",
    "LOCK",
    "OUTPUTS",
    "OUTPUT_NAMES",
    "PLOTS",
    "plots_of",
    "plots_directory",
    "PLOTS_RECORD",
    "RunDirectory",
    "kind_of",
    "RunExistsError",
    "RunLockedError",
    "start_run",
    "resume_run",
    "check_cap",
    "raise_cap",
    "chain_states",
    "run_checkpoint",
    "states_digest",
    "save_checkpoint",
    "load_checkpoint",
    "group_checkpoints",
    "group_name",
    "checkpoint_files",
    "write_outputs",
    "flat_record",
    "differences",
]


def start_run(directory: str | os.PathLike, settings: RunSettings, *, overwrite: bool = False) -> RunDirectory:
    """Create and lock a directory for a new sampling run and write its ``config.json``.

    ``settings`` must record the model's files
    (:meth:`~mlm_ppl.settings.RunSettings.with_model_files`): a resume refuses a model whose files
    changed. The directory is left as it was if writing the configuration fails.

    Parameters
    ----------
    directory : str or path
        The run directory (made if missing).
    settings : RunSettings
        The run's settings, with ``model_files``.
    overwrite : bool, optional
        Replace a sampling run already there (default False; see
        :meth:`RunDirectory.create`).

    Returns
    -------
    RunDirectory
        The run's directory, locked by this process: close it, or use it as a context manager.

    Raises
    ------
    ValueError
        When ``settings`` has no ``model_files``, or a file of the user's there bears the name of
        an output.
    RunExistsError
        When the directory holds anything else, or a run and no ``overwrite``.
    RunLockedError
        While another process holds the directory's lock.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), tempfile.mkdtemp())
    >>> settings = RunSettings(model=str(model), template="A[MASK]C", num_chains=2, num_samples=3).with_model_files()
    >>> directory = Path(tempfile.mkdtemp()) / "run"
    >>> from mlm_ppl.rundir import start_run
    >>> with start_run(directory, settings) as run_dir:
    ...     sorted(path.name for path in directory.iterdir())
    ['.mlm-ppl', '.mlm-ppl.lock', 'config.json']
    """
    if settings.model_files is None:
        raise ValueError("a run directory records its model's files: give settings.with_model_files()")
    run_dir = RunDirectory.create(directory, "sample", overwrite=overwrite, names=OUTPUT_NAMES)
    try:
        _write_config(run_dir, settings)
    except BaseException:
        run_dir.discard()
        raise
    return run_dir


def resume_run(directory: str | os.PathLike) -> tuple[RunDirectory, RunSettings, Checkpoint | None]:
    """Lock the sampling run in a directory and read its settings and checkpoint.

    The checkpoint is the record of the run: ``config.json`` must hold the settings the checkpoint
    was made with, else a ValueError names every setting that differs.
    A run on Ray workers keeps one checkpoint per group of chains (``checkpoint-g0.pt`` ...):
    each is checked the same way, and the returned checkpoint is None (the workers read theirs).
    On an error the lock is released.

    Parameters
    ----------
    directory : str or path
        The run directory.

    Returns
    -------
    run_dir : RunDirectory
        The run's directory, locked by this process.
    settings : RunSettings
        The settings of ``config.json``.
    checkpoint : Checkpoint or None
        The run's :class:`~mlm_ppl.inference.Checkpoint`; None for a run that has written none yet,
        or a run on Ray workers.

    Raises
    ------
    ValueError
        When the directory is not a sampling run (no directory, no marker, no ``config.json``),
        its ``config.json`` or a checkpoint is damaged or of an older format, the two disagree, or
        a file of the user's bears the name of an output.
    RunExistsError
        When the directory holds a run of another kind.
    RunLockedError
        While another process holds the directory's lock.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), tempfile.mkdtemp())
    >>> settings = RunSettings(model=str(model), template="A[MASK]C", num_chains=2, num_samples=3).with_model_files()
    >>> directory = Path(tempfile.mkdtemp()) / "run"
    >>> from mlm_ppl.rundir import resume_run, start_run
    >>> start_run(directory, settings).close()
    >>> run_dir, recorded, checkpoint = resume_run(directory)
    >>> run_dir.close()
    >>> recorded == settings, checkpoint is None  # stopped before its first checkpoint
    (True, True)
    """
    run_dir = RunDirectory.open(directory, "sample")
    try:
        run_dir.check_names(OUTPUT_NAMES)  # a run killed before its outputs: a file of the user's by their name
        config = _read_config(run_dir.path)
        checkpoint = None
        for name in checkpoint_files(run_dir.path):
            cp = _read_agreeing_checkpoint(run_dir.path, config, name)
            if name == CHECKPOINT:
                checkpoint = cp
        settings = RunSettings.from_dict(config, str(run_dir.path / CONFIG))
    except BaseException:
        run_dir.close()
        raise
    return run_dir, settings, checkpoint


def check_cap(settings: RunSettings, checkpoint: Checkpoint | None, num_samples: int) -> RunSettings:
    """Check a new cap of draws for a run being resumed; nothing is written.

    The cap may be more than the run has, or, for a run whose cap was raised past what it could
    ever finish (by a version before the size check ran on resume), lowered back to no fewer than
    the draws its checkpoint holds. Refused for an annealed run (its schedule spans the run's
    steps) and a run on Ray workers. :func:`raise_cap` records it.

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    checkpoint : Checkpoint or None
        The run's checkpoint (:class:`~mlm_ppl.inference.Checkpoint`), None if it has none.
    num_samples : int
        The new cap of draws per chain: at least 1 and at least the draws the checkpoint has room
        for.

    Returns
    -------
    RunSettings
        A copy of ``settings`` with ``num_samples``.

    Raises
    ------
    ValueError
        When ``num_samples`` is not an integer or is below the checkpoint's draws (or 1), or the
        run anneals or ran on Ray workers.

    Examples
    --------
    >>> from mlm_ppl.rundir import check_cap
    >>> from mlm_ppl.settings import RunSettings
    >>> check_cap(RunSettings(template="A[MASK]C", num_samples=100), None, 500).num_samples
    500
    """
    held = 0 if checkpoint is None else int(checkpoint.draws.shape[1])  # the draws its arrays hold
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < max(1, held):
        raise ValueError(
            f"num_samples {num_samples} (--num-samples) on resume: the run's checkpoint has room for {held} draws "
            f"(its cap when checkpointed; the run's is {settings.num_samples}); give at least {max(1, held)}, or leave "
            "it out"
        )
    if settings.anneal is not None:
        raise ValueError(
            f"the run anneals over its {settings.total_steps} steps ({settings.anneal}); its cap cannot be changed: "
            "resume it with its own num_samples, or start a new run"
        )
    if settings.workers is not None:
        raise ValueError(
            "the run's chains ran on Ray workers, whose checkpoints keep their own caps: resume it with its own "
            "num_samples, or start a new run"
        )
    return dataclasses.replace(settings, num_samples=num_samples)


def raise_cap(run_dir: RunDirectory, checkpoint: Checkpoint | None, settings: RunSettings) -> RunSettings:
    """Record a run's new cap of draws in its checkpoint and then in its ``config.json``.

    The checkpoint's draws so far are unchanged; the run then continues to the new cap with the
    draws of an uninterrupted run of that many (:func:`~mlm_ppl.run_chains`).

    Parameters
    ----------
    run_dir : RunDirectory
        The run's directory, locked by this process (as :func:`resume_run` gives it).
    checkpoint : Checkpoint or None
        The run's checkpoint (:class:`~mlm_ppl.inference.Checkpoint`); None if it has none (only
        ``config.json`` is written).
    settings : RunSettings
        The settings with the new cap, as :func:`check_cap` gives them.

    Returns
    -------
    RunSettings
        ``settings``.
    """
    if checkpoint is not None:
        save_checkpoint(run_dir, checkpoint, settings.to_dict())
    _write_config(run_dir, settings)
    return settings


def chain_states(directory: str | os.PathLike) -> tuple[Tensor, RunSettings]:
    """Read where the chains of the sampling run in a directory are, and its settings.

    Read from its checkpoint (:func:`run_checkpoint`: the state after its last step, finished or
    not; a run still going may be read), or, for a run on Ray workers, from its groups' checkpoints
    in chain order.

    Parameters
    ----------
    directory : str or path
        The run directory.

    Returns
    -------
    tokens : torch.Tensor
        Shape ``(C, L)``, the chains' current states.
    settings : RunSettings
        The run's settings.

    Raises
    ------
    ValueError
        When the directory is not a sampling run or has no checkpoint yet, a run on Ray workers
        lacks a group's checkpoint, or a checkpoint disagrees with ``config.json`` (as
        :func:`run_checkpoint`).

    See Also
    --------
    run_checkpoint : The whole checkpoint.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), tempfile.mkdtemp())
    >>> settings = RunSettings(model=str(model), template="A[MASK]C", num_chains=2, num_samples=3).with_model_files()
    >>> directory = Path(tempfile.mkdtemp()) / "run"
    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.rundir import chain_states, save_checkpoint, start_run
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C"))
    >>> with start_run(directory, settings) as run_dir:
    ...     run = run_chains(kernel, 2, 3, on_checkpoint=lambda cp: save_checkpoint(run_dir, cp, settings.to_dict()))
    >>> tokens, _ = chain_states(directory)
    >>> tokens.equal(run.tokens[:, -1])  # where the chains ended
    True
    """
    path = Path(directory)
    groups = sorted((n for n in checkpoint_files(path) if n != CHECKPOINT), key=lambda n: int(n[12:-3]))
    if kind_of(path) == "sample" and groups and not (path / CHECKPOINT).exists():  # a run on Ray workers
        config = _read_config(path)
        parts = [_read_agreeing_checkpoint(path, config, name) for name in groups]  # contiguous groups, in order
        if any(cp is None for cp in parts):
            raise ValueError(f"the run in {str(path)!r} on Ray workers lacks a group's checkpoint")
        return torch.cat([cp.state.tokens for cp in parts if cp is not None]), RunSettings.from_dict(config)
    checkpoint, settings = run_checkpoint(directory)
    return checkpoint.state.tokens.clone(), settings


def run_checkpoint(directory: str | os.PathLike) -> tuple[Checkpoint, RunSettings]:
    """Read the checkpoint of the sampling run in a directory, and its settings.

    ``checkpoint.pt`` holds its draws and state after its last step, finished or not; a run still
    going may be read (no lock is taken). The checkpoint's record must agree with ``config.json``
    as on resume.

    Parameters
    ----------
    directory : str or path
        The run directory.

    Returns
    -------
    checkpoint : Checkpoint
        The run's :class:`~mlm_ppl.inference.Checkpoint`.
    settings : RunSettings
        The run's settings.

    Raises
    ------
    ValueError
        Saying what is missing: a directory that is not a sampling run, a run without a
        checkpoint yet, a run on Ray workers (one checkpoint per group of chains); or a
        ``config.json`` or checkpoint that is damaged or disagrees with the other.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), tempfile.mkdtemp())
    >>> settings = RunSettings(model=str(model), template="A[MASK]C", num_chains=2, num_samples=3).with_model_files()
    >>> directory = Path(tempfile.mkdtemp()) / "run"
    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.rundir import run_checkpoint, save_checkpoint, start_run
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C"))
    >>> with start_run(directory, settings) as run_dir:
    ...     run = run_chains(kernel, 2, 3, on_checkpoint=lambda cp: save_checkpoint(run_dir, cp, settings.to_dict()))
    >>> checkpoint, recorded = run_checkpoint(directory)
    >>> checkpoint.draws.shape, recorded == settings
    (torch.Size([2, 3, 5]), True)
    """
    path = Path(directory)
    if kind_of(path) != "sample":
        raise ValueError(f"{str(path)!r} is not an mlm-ppl sampling run directory (no run started there)")
    config = _read_config(path)
    checkpoint = _read_agreeing_checkpoint(path, config, CHECKPOINT)
    if checkpoint is None:
        groups = [name for name in checkpoint_files(path) if name != CHECKPOINT]
        why = "its chains ran on Ray workers, one checkpoint per group" if groups else "it has no checkpoint yet"
        raise ValueError(f"the run in {str(path)!r} has no {CHECKPOINT} to read ({why})")
    return checkpoint, RunSettings.from_dict(config, str(path / CONFIG))


def _read_agreeing_checkpoint(path: Path, config: Mapping[str, Any], name: str) -> Checkpoint | None:
    """The checkpoint ``name`` in ``path`` (None if there is none), whose recorded settings must be
    ``config``'s (``config.json`` as read): a ValueError names every setting that differs."""
    checkpoint, recorded = read_checkpoint(path / name)
    if checkpoint is None:  # no such file: nothing to disagree with (the caller says what is missing)
        return None
    # an old run resumed once has checkpoints in today's form beside its old config.json
    detail = differences(RunSettings.completed(config), RunSettings.completed(recorded or {}), CONFIG, name)
    if detail:
        raise ValueError(
            f"{path / CONFIG} differs from the settings the run's checkpoint was made with: "
            f"{detail}; restore {CONFIG}, or start a new run with the new settings"
        )
    return checkpoint


def states_digest(tokens: Tensor) -> str:
    """Hash chain states: the sha256 of their shape and token ids.

    It is what a run started from them records (``RunSettings.starts``).

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, L)``, token ids (any integer dtype and device).

    Returns
    -------
    str
        The hex digest, 64 characters.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.rundir import states_digest
    >>> states = torch.tensor([[5, 6, 7], [5, 7, 7]])
    >>> len(states_digest(states)), states_digest(states) == states_digest(states.int())
    (64, True)
    """
    ids = tokens.detach().to("cpu", torch.int64).contiguous()
    digest = hashlib.sha256(repr(tuple(ids.shape)).encode())
    digest.update(ids.numpy().tobytes())
    return digest.hexdigest()


def _write_config(run_dir: RunDirectory, settings: RunSettings) -> None:
    run_dir.write_text(CONFIG, json.dumps({"format": FORMAT, **settings.to_dict()}, indent=1, sort_keys=True))


def flat_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten a settings record: nested records become ``KEY.NAME`` keys.

    The kernel's options become ``kernel_options.scan``, the model's files
    ``model_files.model.safetensors``: to name what differs. One level is flattened.

    Parameters
    ----------
    record : mapping
        A settings record (:meth:`~mlm_ppl.settings.RunSettings.to_dict`).

    Returns
    -------
    dict
        The record with every mapping value replaced by its entries.

    Examples
    --------
    >>> from mlm_ppl.rundir import flat_record
    >>> flat_record({"seed": 0, "kernel_options": {"scan": "random"}})
    {'seed': 0, 'kernel_options.scan': 'random'}
    """
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def differences(mine: Mapping[str, Any], theirs: Mapping[str, Any], where_mine: str, where_theirs: str) -> str:
    """Name every setting that differs between two records, with both values and where each is.

    The records are compared flat (:func:`flat_record`); a setting in one record only is
    ``missing`` in the other.

    Parameters
    ----------
    mine, theirs : mapping
        The two settings records.
    where_mine, where_theirs : str
        Where each record is from (a file name).

    Returns
    -------
    str
        ``seed (8 in config.json, 7 in checkpoint.pt), ...``, settings in sorted order; empty if
        they agree.

    Examples
    --------
    >>> from mlm_ppl.rundir import differences
    >>> differences({"seed": 8, "thin": 1}, {"seed": 7, "thin": 1}, "config.json", "checkpoint.pt")
    'seed (8 in config.json, 7 in checkpoint.pt)'
    """
    a, b = flat_record(mine), flat_record(theirs)

    def shown(record: dict, key: str) -> str:
        return repr(record[key]) if key in record else "missing"

    keys = sorted(k for k in set(a) | set(b) if shown(a, k) != shown(b, k))
    return ", ".join(f"{k} ({shown(a, k)} in {where_mine}, {shown(b, k)} in {where_theirs})" for k in keys)


def _read_config(path: Path) -> dict:
    """``config.json`` of a sampling run as written (format checked), before its settings are."""
    if not path.is_dir():
        raise ValueError(f"run directory {str(path)!r} does not exist")
    file = path / CONFIG
    try:
        config = load_json(file, "run configuration")
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} is not an mlm-ppl run directory (no {CONFIG})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{file} is corrupt ({err}); it was not written by mlm-ppl or was damaged") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        found = config.get("format") if isinstance(config, dict) else None
        raise ValueError(
            f"{file} is not an mlm-ppl run configuration (format {FORMAT!r} expected, found {found!r}"
            + ("; it was written by mlm-ppl 0.2 or earlier: finish the run with that version" if found else "")
            + ")"
        )
    config = dict(config)
    config.pop("format")
    return config
