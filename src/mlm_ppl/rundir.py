"""Run directories: settings, checkpoints and outputs of a sampling run on disk.

A run directory holds ``config.json`` (every setting of the run), ``checkpoint.pt`` (written
as the run goes, atomically: kernel state, RNG state and the draws so far), and at the end
``run.nc`` (InferenceData), ``samples.txt``, ``summary.txt`` and the diagnostic plots.
Resuming from the checkpoint gives exactly the draws of an uninterrupted run with the same
settings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from .inference.mask_predict import MaskPredictState
from .inference.mh import MHState
from .inference.pseudo_gibbs import PseudoGibbsState
from .inference.runner import EXTRA_STAT_NAMES, STAT_NAMES, Checkpoint
from .inference.surrogate_mh import SurrogateState

__all__ = [
    "CONFIG",
    "CHECKPOINT",
    "OUTPUTS",
    "RunExistsError",
    "prepare",
    "read_config",
    "save_checkpoint",
    "load_checkpoint",
    "write_outputs",
    "write_text_atomic",
]

CONFIG, CHECKPOINT = "config.json", "checkpoint.pt"
OUTPUTS = (
    "run.nc",
    "samples.txt",
    "summary.txt",
    "trace_lp.png",
    "rank_lp.png",
    "acceptance.png",
    "token_frequency.png",
)
_FORMAT = "mlm-ppl-run-1"
_STATES = {cls.__name__: cls for cls in (MHState, PseudoGibbsState, MaskPredictState, SurrogateState)}


class RunExistsError(ValueError):
    """A directory that already holds something, where a new run was to start.

    ``detail`` says what is there; the caller adds how to resume, overwrite or go elsewhere in
    its own terms (the CLI names its flags).
    """

    def __init__(self, path: Path, detail: str, *, ours: bool = True) -> None:
        hint = "resume it, overwrite it, or choose another directory" if ours else "choose another directory"
        super().__init__(f"{detail}; {hint}")
        self.path = path
        self.detail = detail
        self.ours = ours  # False: the directory holds something this library did not write


def prepare(directory: str | os.PathLike, config: dict[str, Any], *, overwrite: bool = False) -> Path:
    """Create ``directory`` for a new run and write its ``config.json``.

    An existing run directory is never overwritten without ``overwrite=True`` (else
    :class:`RunExistsError`); then only this library's own files in it are removed.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{str(path)!r} is a file; give a directory")
    ours = [CONFIG, CHECKPOINT, *OUTPUTS]
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise RunExistsError(path, f"run directory {str(path)!r} exists and is not empty")
        for name in ours:
            (path / name).unlink(missing_ok=True)
    path.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path / CONFIG, json.dumps({"format": _FORMAT, **config}, indent=1, sort_keys=True))
    return path


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The settings of the run in ``directory``; a clear error if it is not an mlm-ppl run."""
    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"run directory {str(path)!r} does not exist")
    try:
        config = json.loads((path / CONFIG).read_text())
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} is not an mlm-ppl run directory (no {CONFIG})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path / CONFIG} is corrupt ({err}); it was not written by mlm-ppl or was damaged") from None
    if not isinstance(config, dict) or config.get("format") != _FORMAT:
        raise ValueError(f"{path / CONFIG} is not an mlm-ppl run configuration (format {_FORMAT!r} expected)")
    config = dict(config)
    config.pop("format")
    return config


def save_checkpoint(directory: str | os.PathLike, cp: Checkpoint) -> None:
    """Write ``checkpoint.pt`` atomically (a temporary file, then a rename)."""
    state = cp.state
    payload = {
        "format": _FORMAT,
        "step": cp.step,
        "state_type": type(state).__name__,
        "state": _pack_state(state),
        "generator": cp.generator,
        "draws": cp.draws,
        "stats": cp.stats,
        "initial": cp.initial,
    }
    path = Path(directory) / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _pack_state(state: Any) -> dict[str, Any]:
    """A kernel state as plain dicts of tensors and numbers (``torch.load(weights_only=True)``
    reads no classes); a nested state (surrogate-MH's inner chain) becomes a tagged dict."""
    out: dict[str, Any] = {}
    for k, v in state._asdict().items():
        out[k] = {"state_type": type(v).__name__, "state": _pack_state(v)} if hasattr(v, "_asdict") else v
    return out


def _unpack_state(state_type: str, fields: dict[str, Any]) -> Any:
    if state_type not in _STATES:
        raise ValueError(f"unknown kernel state {state_type!r}")
    values = {
        k: _unpack_state(v["state_type"], v["state"]) if isinstance(v, dict) and "state_type" in v else v
        for k, v in fields.items()
    }
    try:
        return _STATES[state_type](**values)
    except TypeError as err:  # fields of another version or another kernel
        raise ValueError(f"kernel state {state_type!r} does not match this version ({err})") from None


def load_checkpoint(directory: str | os.PathLike) -> Checkpoint | None:
    """The checkpoint in ``directory``, or None if the run never wrote one."""
    path = Path(directory) / CHECKPOINT
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(
            f"{path} is corrupt or not an mlm-ppl checkpoint ({type(err).__name__}); "
            "start the run again, overwriting it"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT or payload.get("state_type") not in _STATES:
        raise ValueError(f"{path} is not an mlm-ppl checkpoint")
    state = _unpack_state(payload["state_type"], payload["state"])
    stats = dict(payload["stats"])
    if "n_moves" not in stats and "n_changed" in stats:  # written by 0.1.0, whose kernels moved n_changed sites
        stats["n_moves"] = stats["n_changed"].clone()
    if not set(STAT_NAMES) <= set(stats) <= set(STAT_NAMES) | set(EXTRA_STAT_NAMES):
        raise ValueError(f"{path} is not an mlm-ppl checkpoint (statistics {sorted(stats)})")
    return Checkpoint(payload["step"], state, payload["generator"], payload["draws"], stats, payload["initial"])


def write_outputs(directory: str | os.PathLike, run, mlm) -> tuple[str, list[str]]:
    """Write ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots of a finished run.

    Returns the summary text and the paths written (``run.nc`` first).
    """
    from .diagnostics import plot_diagnostics, summary, to_inference_data

    path = Path(directory)
    idata = to_inference_data(run, mlm=mlm)
    nc = path / "run.nc"
    idata.to_netcdf(str(nc) + ".tmp")
    os.replace(str(nc) + ".tmp", nc)
    lp = run.stats["lp"]
    lines = ["chain\tdraw\tlp\tsequence"]
    for c in range(run.num_chains):
        for d, seq in enumerate(mlm.decode(run.tokens[c])):
            lines.append(f"{c}\t{d}\t{float(lp[c, d]):.4f}\t{seq}")
    write_text_atomic(path / "samples.txt", "\n".join(lines) + "\n")
    report = str(summary(idata))
    write_text_atomic(path / "summary.txt", report + "\n")
    plots = plot_diagnostics(idata, str(path), mlm=mlm)
    return report, [str(nc), str(path / "samples.txt"), str(path / "summary.txt"), *plots]


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: never half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
