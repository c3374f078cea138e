"""Files written whole or not at all, and never through a link planted at their name.

Every file the library writes goes through :func:`atomic_path`: a temporary file created
exclusively (``O_EXCL``: an existing file or symbolic link at that name is never opened) with a
unique name in the target's directory, filled, flushed to disk, then renamed over the target
(a rename replaces a link at the target's name; it does not follow it). A reader sees the old
file or the new one, never half of one; a crash leaves at most a ``.NAME.*.tmp`` file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "RECORD_LIMIT",
    "LINE_LIMIT",
    "check_regular",
    "load_json",
    "atomic_path",
    "write_bytes_atomic",
    "write_text_atomic",
    "save_figure",
    "temp_pattern",
    "read_toml",
    "split_lines",
]


def _process_umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: done once, at import
    os.umask(mask)
    return mask


#: Permissions of every file written: what ``open(path, "w")`` would give (``mkstemp`` alone gives 0600).
FILE_MODE = 0o666 & ~_process_umask()


def temp_pattern(name: str) -> str:
    """The glob pattern of the temporary files :func:`atomic_path` makes for ``name``."""
    return f".{name}.*.tmp"


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[tuple[int, Path]]:
    """``(fd, path)`` of a new temporary file beside ``target``, renamed over it on success."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        # the descriptor is closed in one place, once: an interrupt (Ctrl-C) that lands just after
        # the close must not close it again (EBADF, which would replace the KeyboardInterrupt, or
        # worse, close a descriptor another thread has meanwhile been given)
        try:
            yield fd, Path(tmp)
            os.fsync(fd)  # on disk before the rename makes it visible
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A fresh temporary path beside ``path``; renamed over ``path`` if the block succeeds.

    The temporary file exists (empty) when the block starts; write it by name (for libraries
    that only take a file name). On an exception it is removed and ``path`` is untouched.
    """
    with _temporary(Path(path)) as (_, tmp):
        yield tmp


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`), through the descriptor
    the temporary file was created with."""
    with _temporary(Path(path)) as (fd, _), os.fdopen(fd, "wb", closefd=False) as fh:
        fh.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"))


def save_figure(fig: Any, path: str | os.PathLike, **savefig_kwargs: Any) -> str:
    """Save a matplotlib figure as PNG to ``path`` atomically; returns the path."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", **savefig_kwargs)
    write_bytes_atomic(path, buffer.getvalue())
    return str(path)


RECORD_LIMIT = 64 << 20
"""Bytes a record (``config.json``, a marker, a batch's record, a spec or job file) may hold."""
LINE_LIMIT = 1 << 20
"""Characters a line of a templates or sequences file may hold (checked before anything is tokenised)."""


def check_regular(path: str | os.PathLike, what: str, limit: int | None = None) -> None:
    """A one-line ValueError for ``path`` that is not a regular file (a FIFO, which would block the
    reader, a device such as ``/dev/zero``, a socket) or, with ``limit``, holds more bytes: before
    it is opened. A missing file is left to the reader (FileNotFoundError)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a FIFO, a device or a socket): give the {what} as a file")
    if limit is not None and info.st_size > limit:
        raise ValueError(f"{path} holds {info.st_size} bytes, more than the {limit} a {what} may hold")


def load_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON in ``path`` (a regular file of at most :data:`RECORD_LIMIT` bytes); nesting deeper than
    Python can parse is a ValueError, as any other damage is (json.JSONDecodeError is one)."""
    check_regular(path, what, RECORD_LIMIT)
    try:
        return json.loads(Path(path).read_text())
    except RecursionError:
        raise ValueError(f"{path}: the {what} is nested too deeply to be one mlm-ppl wrote") from None


def read_toml(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The TOML file ``path`` as a dict; a file that cannot be read, is not UTF-8 or is not TOML is a
    one-line ValueError naming the file and saying what it should hold (``what``: "constraint spec")."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    path = Path(path)
    try:
        check_regular(path, what, RECORD_LIMIT)
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ValueError(f"{path}: the {what} is nested too deeply") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read the {what}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); save the {what} as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML: {err}") from None


def split_lines(source: str, what: str) -> list[str]:
    """The lines of a UTF-8 file (or stdin for ``-``), split at ``\\n`` only, ``\\r\\n`` as
    ``\\n``; a clear error for a missing file, a directory, another encoding, or a ``\\r``
    inside a line (the lines become rows of tab-separated output, and many readers of that take
    a lone ``\\r`` for a line break). ``what`` says what the file should hold."""
    name = "stdin" if source == "-" else f"input file {source!r}"
    try:
        if source == "-":  # the bytes, so that no reader's newline translation turns a \r into a line break
            stdin = getattr(sys.stdin, "buffer", None)
            text = stdin.read().decode("utf-8") if stdin is not None else sys.stdin.read()
        else:
            if os.path.isdir(source):
                raise IsADirectoryError(source)
            check_regular(source, f"input ({what})", LIST_FILE_LIMIT)
            with open(source, encoding="utf-8", newline="") as fh:
                text = fh.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"input file {source!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"input {source!r} is a directory; give a file with {what}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not UTF-8 text: {err}") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    for i, line in enumerate(lines, 1):
        if len(line) > LINE_LIMIT:
            raise ValueError(
                f"{name}, line {i} holds {len(line)} characters, more than {LINE_LIMIT}; give {what}, each shorter"
            )
        if "\r" in line:
            raise ValueError(
                f"{name}, line {i} holds a carriage return (\\r) inside it, which readers of the tab-separated "
                "output take for a line break; remove it (lines end at \\n; a \\r\\n ending is fine)"
            )
    return lines


LIST_FILE_LIMIT = 64 << 20
"""Bytes a list file (one entry per line) may hold: read whole, so a device or a giant is refused first."""


def read_list_file(path: str | os.PathLike, what: str) -> list[str]:
    """The entries of a plain UTF-8 file, one per line, stripped; blank lines and ``#`` comments
    skipped. A one-line ValueError for a missing file, one that is not a regular file (a FIFO, a
    device) or larger than 64 MiB, or not UTF-8; ``what`` says what it should hold."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file; give a file of {what}")
        if info.st_size > LIST_FILE_LIMIT:
            raise ValueError(f"{path} holds {info.st_size} bytes, more than {LIST_FILE_LIMIT}: too large for {what}")
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"{path}: cannot read the {what}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason}); save the {what} as UTF-8") from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
