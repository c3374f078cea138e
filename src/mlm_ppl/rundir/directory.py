"""The owner of a run directory: creating, opening, writing and removing its files.

A run directory holds ``.mlm-ppl`` (the marker, :mod:`.marker`: format, kind, run id and every
file name the run writes, each recorded before it is written) and ``.mlm-ppl.lock`` (the lock,
:mod:`.lock`, held by the process working in the directory); every file is written through a
temporary file and a rename (:mod:`mlm_ppl._files`). What the files hold is the business of :mod:`.checkpoint` and
:mod:`.outputs`. See ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .._files import atomic_path, temp_pattern, write_bytes_atomic
from .lock import LOCK, RunLockedError, release_lock, take_lock
from .marker import (
    DIR_FORMAT,
    MARKER,
    RunExistsError,
    has_marker,
    is_plain_name,
    kind_of,
    load_marker,
    owned,
    read_marker,
    write_marker,
)

__all__ = ["CONFIG", "MARKER", "LOCK", "RunDirectory", "kind_of", "RunExistsError", "RunLockedError"]

CONFIG = "config.json"
"""A run's settings, as JSON, in its directory (compared with its checkpoint on resume)."""


class RunDirectory:
    """A directory owned by one run and locked by this process while it is open.

    Open one with :meth:`create` (a new run) or :meth:`open` (continue or read a run); use it as a
    context manager, or call :meth:`close`, to release the lock. Files are written with
    :meth:`write_bytes`, :meth:`write_text` or :meth:`atomic`, which record the name in the
    marker first: ``overwrite`` and :meth:`discard` remove exactly the recorded files.

    Parameters
    ----------
    path : pathlib.Path
        The directory.
    kind : str
        ``"sample"``, ``"batch"`` or ``"pairs"``: a directory of one kind is never taken for
        another.
    lock_fd : int
        The file descriptor of the lock this process holds on the directory.
    marker : dict
        The record of the directory's marker (format, kind, run id, the files written).
    made : tuple of pathlib.Path
        The folders this process made for the run, outermost first: the directory and any missing
        parents (:meth:`discard` removes them, if empty); none for a directory that was there.

    Attributes
    ----------
    run_id : str
        Random hex id of the run, written in the marker at creation.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.rundir import RunDirectory, kind_of
    >>> directory = Path(tempfile.mkdtemp()) / "run"
    >>> with RunDirectory.create(directory, "pairs") as run_dir:
    ...     written = run_dir.write_text("notes.txt", "hello")
    >>> written.read_text(), kind_of(directory)
    ('hello', 'pairs')
    """

    def __init__(self, path: Path, kind: str, lock_fd: int, marker: dict[str, Any], made: tuple[Path, ...]) -> None:
        self.path = path
        self.kind = kind
        self.made = made
        self._lock_fd = lock_fd
        self._marker = marker

    @property
    def run_id(self) -> str:
        """Random hex id of the run, written in the marker at creation."""
        return str(self._marker["run_id"])

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(
        cls, directory: str | os.PathLike, kind: str, *, overwrite: bool = False, names: Sequence[str] = ()
    ) -> RunDirectory:
        """Start a new run in a directory, locked: created if absent, taken if empty, or replaced.

        A directory holding a run of the same kind is replaced with ``overwrite`` (only its
        recorded files are removed). Nothing is created before every check has passed.

        Parameters
        ----------
        directory : str or path
            The run directory; missing parents are made too.
        kind : str
            The kind of run (``"sample"``, ``"batch"``, ``"pairs"``).
        overwrite : bool, optional
            Replace a run of the same kind there (default False).
        names : sequence of str, optional
            What the new run will write there (a batch's template folders): each must be absent, or
            a file the old run wrote (:meth:`check_new`).

        Returns
        -------
        RunDirectory
            The new run's directory, locked by this process, its marker written.

        Raises
        ------
        RunExistsError
            For a directory with anything else in it, or with a run and no ``overwrite``.
        RunLockedError
            While another process holds the directory's lock.
        ValueError
            When one of ``names`` exists and the old run did not write it, ``directory`` is a file
            or a link to nothing, or a lock file there is not mlm-ppl's.
        """
        path = Path(directory)
        _check_dir_path(path)
        _check_names(path, owned(path, kind, overwrite), names)  # refuse before creating anything
        made = _make_dirs(path)
        try:
            fd = take_lock(path)
        except BaseException:
            _unmake(made)
            raise
        try:
            marker = owned(path, kind, overwrite)  # again, under the lock: another process may have started
            if marker is not None:
                _remove(_recorded(path, marker["files"]))  # every name checked before anything is removed
            marker = {
                "format": DIR_FORMAT,
                "kind": kind,
                "run_id": uuid.uuid4().hex,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": socket.gethostname(),
                "files": [],
            }
            write_marker(path, marker)
        except BaseException:
            release_lock(path, fd, remove=bool(made) or not has_marker(path))
            _unmake(made)
            raise
        return cls(path, kind, fd, marker, made)

    @staticmethod
    def check_new(
        directory: str | os.PathLike, kind: str, *, overwrite: bool = False, names: Sequence[str] = ()
    ) -> None:
        """Run the checks of :meth:`create` without creating or locking anything (to fail before work).

        Each of ``names`` that the new run will write must be absent, or a file the old run wrote
        (which the overwrite removes); a folder of the user's with that name is refused, naming it.

        Parameters
        ----------
        directory : str or path
            The run directory.
        kind : str
            The kind of run (``"sample"``, ``"batch"``, ``"pairs"``).
        overwrite : bool, optional
            Whether a run of the same kind there would be replaced (default False).
        names : sequence of str, optional
            What the new run will write there.

        Raises
        ------
        RunExistsError
            For a directory with anything else in it, or with a run and no ``overwrite``.
        ValueError
            When one of ``names`` exists and the old run did not write it, ``directory`` is a file
            or a link to nothing, or a lock file there is not mlm-ppl's.
        """
        path = Path(directory)
        _check_dir_path(path)
        _check_names(path, owned(path, kind, overwrite), names)

    @classmethod
    def open(cls, directory: str | os.PathLike, kind: str) -> RunDirectory:
        """Open the existing run of ``kind`` in ``directory``, locked.

        Temporary files of writes cut off by a kill are removed once the lock is held.

        Parameters
        ----------
        directory : str or path
            The run directory.
        kind : str
            The kind of run it must hold (``"sample"``, ``"batch"``, ``"pairs"``).

        Returns
        -------
        RunDirectory
            The run's directory, locked by this process.

        Raises
        ------
        ValueError
            If the directory does not exist or is not a run directory (no marker), or its marker
            is damaged.
        RunExistsError
            If it holds a run of another kind.
        RunLockedError
            If another process holds its lock.
        """
        path = Path(directory)
        if not path.is_dir():
            raise ValueError(f"run directory {str(path)!r} does not exist")
        if read_marker(path, kind) is None:
            raise ValueError(f"{str(path)!r} is not an mlm-ppl {kind} run directory (no {MARKER} marker)")
        fd = take_lock(path)
        try:
            marker = read_marker(path, kind)
            if marker is None:
                raise ValueError(f"{str(path)!r} is not an mlm-ppl {kind} run directory (no {MARKER} marker)")
            _remove(_temporaries(path, marker["files"]))  # of writes cut off by a kill (we hold the lock)
        except BaseException:
            release_lock(path, fd, remove=False)
            raise
        return cls(path, kind, fd, marker, ())

    # ------------------------------------------------------------------ writing
    def check_names(self, names: Sequence[str]) -> None:
        """Refuse names this run would write over a file of the user's (checked before work).

        Parameters
        ----------
        names : sequence of str
            What this run will write.

        Raises
        ------
        ValueError
            Naming the first of ``names`` that exists here and that the run did not write: a file
            of the user's is never replaced.
        """
        _check_names(self.path, self._marker, names)

    def record(self, name: str) -> Path:
        """Record a file name in the marker, before the file is written.

        Parameters
        ----------
        name : str
            A plain file name in the directory (letters, digits, ``_ . -``, not hidden).

        Returns
        -------
        pathlib.Path
            The file's path.

        Raises
        ------
        ValueError
            If ``name`` is not a plain name, the directory is closed, or ``name`` exists and the run
            did not write it (a file of the user's is never replaced).
        """
        if not is_plain_name(name):
            raise ValueError(f"run files are plain names in the directory, got {name!r}")
        if self._lock_fd < 0:
            raise ValueError(f"run directory {str(self.path)!r} is closed")
        if name not in self._marker["files"]:
            _check_names(self.path, self._marker, [name])
            self._marker["files"].append(name)
            write_marker(self.path, self._marker)
        return self.path / name

    def record_all(self, names: Sequence[str]) -> None:
        """Run :meth:`record` on every one of ``names``, with one write of the marker.

        For a batch's thousands of template folders: linear, not quadratic, in their number.

        Parameters
        ----------
        names : sequence of str
            Plain file names in the directory.

        Raises
        ------
        ValueError
            If a name is not a plain name, the directory is closed, or a name exists and the run
            did not write it.
        """
        new = [name for name in dict.fromkeys(names) if name not in self._marker["files"]]
        for name in new:
            if not is_plain_name(name):
                raise ValueError(f"run files are plain names in the directory, got {name!r}")
        if self._lock_fd < 0:
            raise ValueError(f"run directory {str(self.path)!r} is closed")
        if new:
            _check_names(self.path, self._marker, new)
            self._marker["files"].extend(new)
            write_marker(self.path, self._marker)

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write a file of the run atomically, its name recorded first (:meth:`record`).

        Parameters
        ----------
        name : str
            A plain file name in the directory.
        data : bytes
            The file's contents.

        Returns
        -------
        pathlib.Path
            The file's path.

        Raises
        ------
        ValueError
            As :meth:`record`.
        """
        path = self.record(name)
        write_bytes_atomic(path, data)
        return path

    def write_text(self, name: str, text: str) -> Path:
        """Write a text file of the run atomically, in UTF-8 (see :meth:`write_bytes`).

        Parameters
        ----------
        name : str
            A plain file name in the directory.
        text : str
            The file's contents.

        Returns
        -------
        pathlib.Path
            The file's path.

        Raises
        ------
        ValueError
            As :meth:`record`.
        """
        return self.write_bytes(name, text.encode("utf-8"))

    @contextlib.contextmanager
    def atomic(self, name: str) -> Iterator[Path]:
        """Give a temporary path to write a file of the run through (for writers that take a file name).

        The name is recorded first (:meth:`record`); the temporary file is renamed over ``name``
        if the block succeeds, and removed otherwise.

        Parameters
        ----------
        name : str
            A plain file name in the directory.

        Yields
        ------
        pathlib.Path
            The temporary file, beside ``name``, empty.

        Raises
        ------
        ValueError
            As :meth:`record`.
        """
        with atomic_path(self.record(name)) as tmp:
            yield tmp

    # ------------------------------------------------------------------ closing
    def discard(self) -> None:
        """Remove everything the run wrote and release the lock.

        The folders this process made for it go too, if empty: for a run that failed before it had
        anything worth keeping.
        """
        _remove(_recorded(self.path, [*self._marker["files"], MARKER]))
        release_lock(self.path, self._lock_fd, remove=True)
        self._lock_fd = -1
        _unmake(self.made)

    def close(self) -> None:
        """Release the lock (the directory and its files stay)."""
        if self._lock_fd >= 0:
            release_lock(self.path, self._lock_fd, remove=False)
            self._lock_fd = -1

    def __enter__(self) -> RunDirectory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r}, kind={self.kind!r}, run_id={self.run_id!r})"


def _check_dir_path(path: Path) -> None:
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{str(path)!r} is a symbolic link to nothing ({os.readlink(path)}); give a directory")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{str(path)!r} is a file; give a directory")


def _make_dirs(path: Path) -> tuple[Path, ...]:
    """Make ``path`` and its missing parents; the folders made, outermost first."""
    missing = []
    for folder in (path, *path.parents):
        if os.path.lexists(folder):
            break
        missing.append(folder)
    made: list[Path] = []
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # made meanwhile by another process: not ours to remove
                if not folder.is_dir():
                    raise ValueError(f"{str(folder)!r} exists and is not a directory") from None
                continue
            made.append(folder)
    except BaseException:
        _unmake(tuple(made))
        raise
    return tuple(made)


def _unmake(made: tuple[Path, ...]) -> None:
    """Remove the folders :func:`_make_dirs` made, innermost first, each only if it is empty."""
    for folder in reversed(made):
        with contextlib.suppress(OSError):
            folder.rmdir()


def _recorded(path: Path, names: list[str]) -> list[Path]:
    """What removing the recorded ``names`` of ``path`` removes: each file with the temporary
    files of an interrupted write of it, and a folder only if it is an mlm-ppl run directory (a
    batch's template runs), then only what that run recorded, and the folder after its files
    (anyone else's files in it stay, and so does the folder). Every marker read on the way is
    checked (:func:`~.marker.load_marker`) before anything is removed."""
    out: list[Path] = []
    for name in names:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            marker = load_marker(target)
            if marker is not None:
                out += _recorded(target, [*marker["files"], MARKER, LOCK])
                out.append(target)
        else:
            out += [target, *_temporaries(path, [name])]
    return out


def _temporaries(path: Path, names: list[str]) -> list[Path]:
    """The temporary files interrupted atomic writes of ``names`` left in ``path``."""
    return [tmp for name in names for tmp in path.glob(temp_pattern(name))]


def _remove(paths: list[Path]) -> None:
    """Remove ``paths`` (from :func:`_recorded`): files, and folders once empty."""
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            with contextlib.suppress(OSError):
                p.rmdir()
        else:
            p.unlink(missing_ok=True)


def first_unclaimed(path: Path, names: Sequence[str], listed: set[str]) -> str | None:
    """The first of ``names`` that exists in ``path`` (a link too) and is not in ``listed`` (what mlm-ppl
    wrote there): a file of the user's, never replaced; None if there is none."""
    return next((n for n in names if ((path / n).exists() or (path / n).is_symlink()) and n not in listed), None)


def _check_names(path: Path, marker: dict[str, Any] | None, names: Sequence[str]) -> None:
    """A ValueError naming the first of ``names`` that exists in ``path`` and that the run being
    replaced (``marker``: None for a new directory) did not write: it is the user's, and a new run
    neither adopts nor removes it."""
    name = first_unclaimed(path, names, set(marker["files"]) if marker is not None else set())
    if name is not None:
        entry = path / name
        raise ValueError(
            f"{str(entry)!r} exists and was not written by the run in {str(path)!r}: it is never adopted, "
            "replaced or removed; move it away (or, for a batch's template, give the template another name)"
        )
