"""The marker of a run directory, ``.mlm-ppl``: its format, kind, run id and every file the run
writes (each recorded before it is written). A directory without it is never overwritten."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from .._files import write_text_atomic
from .lock import LOCK, check_lock

__all__ = ["MARKER", "DIR_FORMAT", "RunExistsError", "kind_of", "read_marker", "write_marker", "has_marker", "owned"]

MARKER = ".mlm-ppl"
DIR_FORMAT = "mlm-ppl-dir-1"


_HINTS = {
    "run": "resume it, overwrite it, or choose another directory",
    "other": "choose another directory, or remove it yourself",
    "foreign": "choose another directory",
}


class RunExistsError(ValueError):
    """A directory that already holds something, where a new run was to start.

    ``detail`` says what is there; the caller adds what to do in its own terms (the CLI names its
    flags), by ``holds``: ``"run"``, a run of the kind asked for (resume or overwrite it);
    ``"other"``, an mlm-ppl run of another kind (never replaced by this kind: go elsewhere or
    remove it); ``"foreign"``, files this library did not write (never overwritten).
    """

    def __init__(self, path: Path, detail: str, *, holds: Literal["run", "other", "foreign"] = "run") -> None:
        super().__init__(f"{detail}; {_HINTS[holds]}")
        self.path = path
        self.detail = detail
        self.holds = holds


def kind_of(directory: str | os.PathLike) -> str | None:
    """The kind of run in ``directory`` (``"sample"``, ``"batch"``, ``"pairs"``) from its marker,
    None for anything else."""
    try:
        marker = json.loads((Path(directory) / MARKER).read_text())
        return str(marker["kind"]) if isinstance(marker, dict) else None
    except (OSError, ValueError, KeyError):
        return None


def read_marker(path: Path, kind: str) -> dict[str, Any] | None:
    """The marker of a run of ``kind`` in ``path``; None if there is none; ValueError for another kind."""
    try:
        marker = json.loads((path / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise ValueError(f"{path / MARKER} is damaged; remove the directory by hand if it is yours") from None
    if not isinstance(marker, dict) or marker.get("format") != DIR_FORMAT or not isinstance(marker.get("files"), list):
        raise ValueError(f"{path / MARKER} is not an mlm-ppl marker")
    if marker.get("kind") != kind:
        raise RunExistsError(
            path, f"{str(path)!r} holds an mlm-ppl {marker.get('kind')} run, not a {kind} run", holds="other"
        )
    return marker


def write_marker(path: Path, marker: dict[str, Any]) -> None:
    write_text_atomic(path / MARKER, json.dumps(marker, indent=1))


def has_marker(path: Path) -> bool:
    return (path / MARKER).is_file()


def owned(path: Path, kind: str, overwrite: bool) -> dict[str, Any] | None:
    """Whether a new run of ``kind`` may start in ``path``: None if it is absent or empty (but for
    a lock file an mlm-ppl process left), the old run's marker if ``overwrite`` may replace it;
    RunExistsError otherwise."""
    if not path.is_dir():
        return None
    marker = None
    if any(p.name != LOCK for p in path.iterdir()):
        marker = read_marker(path, kind)
        if marker is None:
            raise RunExistsError(
                path,
                f"{str(path)!r} is not empty and is not an mlm-ppl {kind} run directory "
                f"(no {MARKER} marker); it is never overwritten",
                holds="foreign",
            )
        if not overwrite:
            raise RunExistsError(path, f"run directory {str(path)!r} exists and is not empty")
    check_lock(path)  # a lock file there must be one an mlm-ppl process left
    return marker
