"""The lock of a run directory: an ``flock`` on ``.mlm-ppl.lock``, held by the process working there.

The lock file is never followed through a link; it holds the holder's pid and host, so that a
refused process can say who holds it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

__all__ = ["LOCK", "RunLockedError", "take_lock", "release_lock"]

LOCK = ".mlm-ppl.lock"


class RunLockedError(OSError):
    """Another process holds the directory's lock (it is running, resuming or plotting there)."""


def take_lock(path: Path) -> int:
    """Take the directory's lock without waiting; RunLockedError naming the holder otherwise.

    The lock file is never removed by a process that was refused; one that holds it may remove
    it (:meth:`RunDirectory.discard`), so a lock taken on a file that has meanwhile left its
    name is let go and taken again on the file now there.
    """
    lock = path / LOCK
    for _ in range(5):
        existed = os.path.lexists(lock)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ValueError(f"{lock} is a symbolic link; mlm-ppl does not write through links") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            who = f"process {holder[0]} on {holder[1]}" if len(holder) >= 2 else "another process"
            raise RunLockedError(
                errno.EWOULDBLOCK,
                f"{str(path)!r} is in use by {who} (a run, a resume or a plot); wait for it to finish",
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)  # the holder, for a refused process
        except OSError:  # a full disk
            release_lock(path, fd, remove=not existed)
            raise
        return fd
    raise RunLockedError(errno.EWOULDBLOCK, f"{str(path)!r}: its lock file keeps changing; try again")


def release_lock(path: Path, fd: int, *, remove: bool) -> None:
    if remove:
        (path / LOCK).unlink(missing_ok=True)
    os.close(fd)  # closing the descriptor releases the flock
