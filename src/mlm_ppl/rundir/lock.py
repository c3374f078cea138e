"""The lock of a run directory: an ``flock`` on ``.mlm-ppl.lock``, held by the process working there.

The lock file holds the holder's pid and host, so that a refused process can say who holds it.
It is written only when it is mlm-ppl's own: a file this process created, or a regular file with
no other name (no hard link) that holds such a record (or nothing, as one cut off before its
record was written). A link, a hard link, a FIFO or a user's file of that name is refused and
left as it is.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import stat
from pathlib import Path

__all__ = ["LOCK", "RunLockedError", "take_lock", "release_lock", "check_lock"]

LOCK = ".mlm-ppl.lock"
"""The lock file one process at a time holds in a directory it works in (with its pid and host)."""

#: What :func:`take_lock` writes (``PID HOST``), or nothing (a holder killed before writing it).
_RECORD = re.compile(rb"(\d+ \S*\n)?")

#: Never through a link; a FIFO or a device planted there neither blocks the open nor becomes a terminal.
_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY


class RunLockedError(OSError):
    """Another process holds the directory's lock (it is running, resuming or plotting there)."""


def take_lock(path: Path) -> int:
    """Take the directory's lock without waiting; RunLockedError naming the holder otherwise,
    ValueError for a lock file that is not mlm-ppl's to write (see the module's docstring).

    The lock file is never removed by a process that was refused; one that holds it may remove
    it (:meth:`RunDirectory.discard`), so a lock taken on a file that has meanwhile left its
    name is let go and taken again on the file now there.
    """
    lock = path / LOCK
    for _ in range(5):
        try:
            fd, created = _open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL), True
        except FileExistsError:
            try:
                fd, created = _open(lock, os.O_RDWR), False
            except FileNotFoundError:  # removed meanwhile by the process that held it
                continue
        held = False
        try:
            _check(lock, fd, record=False)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
                who = f"process {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
                raise RunLockedError(
                    errno.EWOULDBLOCK,
                    f"{str(path)!r} is in use by {who} (a run, a resume or a plot); wait for it to finish",
                ) from None
            held = True
            try:
                same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if same:
                _check(lock, fd, record=True)  # under the lock: no mlm-ppl process is writing it
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)  # for a refused process
        except BaseException:
            release_lock(path, fd, remove=created and held)
            raise
        if same:
            return fd
        os.close(fd)
    raise RunLockedError(errno.EWOULDBLOCK, f"{str(path)!r}: its lock file keeps changing; try again")


def check_lock(path: Path) -> None:
    """Refuse, without taking it, a lock file in ``path`` that :func:`take_lock` would refuse
    (for a new run: before any work)."""
    lock = path / LOCK
    try:
        fd = _open(lock, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        _check(lock, fd, record=True)
    finally:
        os.close(fd)


def release_lock(path: Path, fd: int, *, remove: bool) -> None:
    if remove:
        (path / LOCK).unlink(missing_ok=True)
    os.close(fd)  # closing the descriptor releases the flock


def _open(lock: Path, flags: int) -> int:
    try:
        return os.open(lock, flags | _OPEN, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(f"{lock} is a symbolic link; mlm-ppl does not write through links") from None
        if err.errno == errno.EISDIR:
            raise ValueError(f"{lock} is not a regular file; remove it, or choose another directory") from None
        raise


def _check(lock: Path, fd: int, *, record: bool) -> None:
    """ValueError unless ``fd`` is a regular file with one name (and, with ``record``, holds a lock record)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{lock} is not a regular file; remove it, or choose another directory")
    if info.st_nlink > 1:
        raise ValueError(
            f"{lock} is a hard link (its file has {info.st_nlink} names); mlm-ppl does not write through links: "
            "remove it"
        )
    if record and not _RECORD.fullmatch(os.pread(fd, 256, 0)):
        raise ValueError(
            f"{lock} exists and was not written by mlm-ppl (it holds no lock record); it is never written over: "
            "move it away, or choose another directory"
        )
