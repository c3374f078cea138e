"""The marker of a run directory, ``.mlm-ppl``: its format, kind, run id and every file the run
writes (each recorded before it is written). A directory without it is never overwritten.

The names in the marker are what an overwrite removes, so they are checked each time the marker
is read, not only when they are written: each must be a plain name of a file in the directory
(:func:`is_plain_name`). A marker that lists anything else is refused whole, before anything is
removed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from .._files import load_json, temp_pattern, write_text_atomic
from .lock import LOCK, check_lock

__all__ = [
    "MARKER",
    "DIR_FORMAT",
    "RunExistsError",
    "kind_of",
    "is_plain_name",
    "load_marker",
    "read_marker",
    "write_marker",
    "has_marker",
    "owned",
]

MARKER = ".mlm-ppl"
"""The marker that makes a directory mlm-ppl's: its kind and the names of the files it wrote."""
DIR_FORMAT = "mlm-ppl-dir-1"

#: A file name a run records: letters, digits, ``_ . -``, not hidden. No separator, so no way out
#: of the directory or through a link to a folder; no ``..``; no glob characters.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,254}")

_HINTS = {
    "run": "resume it, overwrite it, or choose another directory",
    "other": "choose another directory, or remove it yourself",
    "foreign": "choose another directory",
}


class RunExistsError(ValueError):
    """A directory that already holds something, where a new run was to start.

    A :class:`ValueError`; its message is ``detail`` followed by a hint of what to do. The caller
    may say what to do in its own terms instead (the CLI names its flags): :meth:`remedy`.

    Parameters
    ----------
    path : pathlib.Path
        The directory.
    detail : str
        What is there.
    holds : {"run", "other", "foreign"}, optional
        ``"run"`` (the default), a run of the kind asked for (resume or overwrite it);
        ``"other"``, an mlm-ppl run of another kind (never replaced by this kind: go elsewhere or
        remove it); ``"foreign"``, files this library did not write (never overwritten).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.rundir import RunDirectory, RunExistsError
    >>> directory = Path(tempfile.mkdtemp())
    >>> _ = (directory / "mine.txt").write_text("a file of the user's")
    >>> try:
    ...     RunDirectory.create(directory, "sample")
    ... except RunExistsError as err:
    ...     print(err.holds)
    foreign
    """

    def __init__(self, path: Path, detail: str, *, holds: Literal["run", "other", "foreign"] = "run") -> None:
        super().__init__(f"{detail}; {_HINTS[holds]}")
        self.path = path
        self.detail = detail
        self.holds = holds

    def remedy(self, same_kind: str) -> str:
        """Give the message with what to do in the caller's terms.

        Another kind of run or a directory of someone else's is never replaced, so the remedy there
        is another ``--out``.

        Parameters
        ----------
        same_kind : str
            What to do about a run of the kind asked for (``holds == "run"``).

        Returns
        -------
        str
            ``detail``, then the remedy.

        Examples
        --------
        >>> from pathlib import Path
        >>> from mlm_ppl.rundir import RunExistsError
        >>> RunExistsError(Path("out"), "out holds a run").remedy("give --resume or --overwrite")
        'out holds a run; give --resume or --overwrite'
        """
        hints = {"run": same_kind, "other": "use another --out, or remove it yourself", "foreign": "use another --out"}
        return f"{self.detail}; {hints[self.holds]}"


def kind_of(directory: str | os.PathLike) -> str | None:
    """Read the kind of run in a directory from its marker.

    Parameters
    ----------
    directory : str or path
        The directory.

    Returns
    -------
    str or None
        ``"sample"``, ``"batch"`` or ``"pairs"``; None for anything else (no directory, no
        marker, an unreadable one).

    Examples
    --------
    >>> import tempfile
    >>> from mlm_ppl.rundir import RunDirectory, kind_of
    >>> directory = tempfile.mkdtemp()
    >>> kind_of(directory) is None
    True
    >>> RunDirectory.create(directory, "pairs").close()
    >>> kind_of(directory)
    'pairs'
    """
    try:
        marker = load_json(Path(directory) / MARKER, "marker")
        return str(marker["kind"]) if isinstance(marker, dict) else None
    except (OSError, ValueError, KeyError):
        return None


def is_plain_name(name: object) -> bool:
    """Whether ``name`` may be recorded in a marker: a plain file name inside the directory."""
    return isinstance(name, str) and _PLAIN_NAME.fullmatch(name) is not None


def load_marker(path: Path) -> dict[str, Any] | None:
    """The marker in ``path``, any kind; None if there is none. ValueError for a damaged marker
    or one that lists a name outside the directory (nothing may be removed by it)."""
    file = path / MARKER
    try:
        marker = load_json(file, "marker")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise ValueError(f"{file} is damaged; remove the directory by hand if it is yours") from None
    if not isinstance(marker, dict) or marker.get("format") != DIR_FORMAT or not isinstance(marker.get("files"), list):
        raise ValueError(f"{file} is not an mlm-ppl marker")
    for name in marker["files"]:
        if not is_plain_name(name):
            raise ValueError(
                f"{file} lists {name!r}, which is not a plain file name in the run directory; it was edited or "
                "damaged, and nothing was removed: remove the run's files by hand"
            )
    return marker


def read_marker(path: Path, kind: str) -> dict[str, Any] | None:
    """The marker of a run of ``kind`` in ``path`` (see :func:`load_marker`); None if there is
    none; RunExistsError for another kind."""
    marker = load_marker(path)
    if marker is not None and marker.get("kind") != kind:
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
    a lock file an mlm-ppl process left, and the temporary file of a marker being written: another
    process creating a run there at this instant, which the lock then refuses, naming it), the old
    run's marker if ``overwrite`` may replace it; RunExistsError otherwise."""
    if not path.is_dir():
        return None
    marker = None
    names = [p.name for p in path.iterdir()]  # one listing: what a process starting there may have made
    if any(name != LOCK and not fnmatch.fnmatchcase(name, temp_pattern(MARKER)) for name in names):
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
