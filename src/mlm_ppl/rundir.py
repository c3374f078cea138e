"""Run directories: owned, locked, written atomically; a checkpoint that is the run's record.

A run directory holds ``.mlm-ppl`` (the marker: format, kind, run id and every file name the run
writes, each recorded before it is written), ``.mlm-ppl.lock`` (the lock, held by the process
working in the directory), ``config.json`` (every setting), ``checkpoint.pt`` (written as the
run goes: the settings again, kernel state, RNG state and the draws so far), and at the end
``run.nc`` (InferenceData), ``samples.txt``, ``summary.txt`` and the plots. Every file is written
through a temporary file and a rename (:mod:`mlm_ppl._files`). Resuming from the checkpoint gives
exactly the draws of an uninterrupted run, and only with the settings the checkpoint was made
with. See ``docs/reliability.md``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import io
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ._files import atomic_path, temp_pattern, write_bytes_atomic, write_text_atomic
from .inference.distributed import GroupCheckpoints
from .inference.mask_predict import MaskPredictState
from .inference.mh import MHState
from .inference.pseudo_gibbs import PseudoGibbsState
from .inference.runner import EXTRA_STAT_NAMES, STAT_NAMES, Checkpoint
from .inference.surrogate_mh import SurrogateState

__all__ = [
    "CONFIG",
    "CHECKPOINT",
    "MARKER",
    "LOCK",
    "OUTPUTS",
    "PLOTS",
    "RunDirectory",
    "kind_of",
    "RunExistsError",
    "RunLockedError",
    "start_run",
    "resume_run",
    "read_config",
    "save_checkpoint",
    "load_checkpoint",
    "group_checkpoints",
    "group_name",
    "checkpoint_files",
    "write_outputs",
    "write_text_atomic",
]

CONFIG, CHECKPOINT = "config.json", "checkpoint.pt"
MARKER, LOCK = ".mlm-ppl", ".mlm-ppl.lock"
PLOTS = ("trace_lp.png", "rank_lp.png", "acceptance.png", "token_frequency.png")
OUTPUTS = ("run.nc", "samples.txt", "summary.txt", *PLOTS)
_FORMAT = "mlm-ppl-run-1"  # config.json and checkpoint.pt of a sampling run
_DIR_FORMAT = "mlm-ppl-dir-1"  # the marker
_LEGACY = {  # directories of 0.1.0 had no marker: their config format and the files they wrote
    "sample": (_FORMAT, (CONFIG, CHECKPOINT, *OUTPUTS)),
    "pairs": ("mlm-ppl-pairs-1", (CONFIG, "pairs.csv", "summary.csv", "summary.txt", "pairs.png")),
}
_STATES = {cls.__name__: cls for cls in (MHState, PseudoGibbsState, MaskPredictState, SurrogateState)}


class RunExistsError(ValueError):
    """A directory that already holds something, where a new run was to start.

    ``detail`` says what is there; the caller adds how to resume, overwrite or go elsewhere in
    its own terms (the CLI names its flags). ``ours`` is False for a directory that holds files
    this library did not write (it is never overwritten).
    """

    def __init__(self, path: Path, detail: str, *, ours: bool = True) -> None:
        hint = "resume it, overwrite it, or choose another directory" if ours else "choose another directory"
        super().__init__(f"{detail}; {hint}")
        self.path = path
        self.detail = detail
        self.ours = ours


def kind_of(directory: str | os.PathLike) -> str | None:
    """The kind of run in ``directory`` (``"sample"``, ``"batch"``, ``"pairs"``) from its marker,
    ``"sample"`` for a 0.1.0 sampling directory, None for anything else."""
    path = Path(directory)
    try:
        marker = json.loads((path / MARKER).read_text())
        return str(marker["kind"]) if isinstance(marker, dict) else None
    except (OSError, ValueError, KeyError):
        return "sample" if path.is_dir() and _legacy_files(path, "sample") is not None else None


class RunLockedError(OSError):
    """Another process holds the directory's lock (it is running, resuming or plotting there)."""


class RunDirectory:
    """A directory owned by one run and locked by this process while it is open.

    Open one with :meth:`create` (a new run) or :meth:`open` (continue or read a run); use it as a
    context manager, or call :meth:`close`, to release the lock. Files are written with
    :meth:`write_bytes`, :meth:`write_text` or :meth:`atomic`, which record the name in the
    marker first: ``overwrite`` and :meth:`discard` remove exactly the recorded files.

    Attributes
    ----------
    path : Path
    kind : str
        ``"sample"`` or ``"pairs"``: a directory of one kind is never taken for the other.
    run_id : str
        Random hex id of the run, written in the marker at creation.
    created : bool
        True when this process made the directory itself (then :meth:`discard` removes it).
    """

    def __init__(self, path: Path, kind: str, lock_fd: int, marker: dict[str, Any], created: bool) -> None:
        self.path = path
        self.kind = kind
        self.created = created
        self._lock_fd = lock_fd
        self._marker = marker

    @property
    def run_id(self) -> str:
        return str(self._marker["run_id"])

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(cls, directory: str | os.PathLike, kind: str, *, overwrite: bool = False) -> RunDirectory:
        """A new run in ``directory``: created if absent, taken if empty, replaced if it holds a run
        of the same kind and ``overwrite`` (only its recorded files are removed).

        Raises :class:`RunExistsError` for a directory with anything else in it, or with a run and
        no ``overwrite``; :class:`RunLockedError` while another process holds it.
        """
        path = Path(directory)
        _check_dir_path(path)
        _owned(path, kind, overwrite)  # refuse before creating anything
        created = not path.exists()
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ValueError(f"{str(path)!r} exists and is not a directory") from None
        try:
            fd = _lock(path)
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        try:
            marker = _owned(path, kind, overwrite)  # again, under the lock: another process may have started
            if marker is not None:
                for name in marker["files"]:
                    _remove(path, name)
            marker = {
                "format": _DIR_FORMAT,
                "kind": kind,
                "run_id": uuid.uuid4().hex,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": socket.gethostname(),
                "files": [],
            }
            _write_marker(path, marker)
        except BaseException:
            _unlock(path, fd, remove=created or not _has_marker(path))
            if created:
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
        return cls(path, kind, fd, marker, created)

    @staticmethod
    def check_new(directory: str | os.PathLike, kind: str, *, overwrite: bool = False) -> None:
        """The checks of :meth:`create`, without creating or locking anything (to fail before work)."""
        path = Path(directory)
        _check_dir_path(path)
        _owned(path, kind, overwrite)

    @classmethod
    def open(cls, directory: str | os.PathLike, kind: str) -> RunDirectory:
        """The existing run of ``kind`` in ``directory``, locked (a 0.1.0 directory gets its marker
        now). Raises ValueError if it is not one, :class:`RunLockedError` if another process holds it.
        """
        path = Path(directory)
        if not path.is_dir():
            raise ValueError(f"run directory {str(path)!r} does not exist")
        if _read_marker(path, kind) is None and _legacy_files(path, kind) is None:
            raise ValueError(f"{str(path)!r} is not an mlm-ppl {kind} run directory (no {MARKER} marker)")
        fd = _lock(path)
        try:
            marker = _read_marker(path, kind)
            if marker is None:  # adopt a directory of 0.1.0, recording the files it wrote
                files = _legacy_files(path, kind)
                if files is None:
                    raise ValueError(f"{str(path)!r} is not an mlm-ppl {kind} run directory")
                marker = {"format": _DIR_FORMAT, "kind": kind, "run_id": uuid.uuid4().hex, "files": files}
                _write_marker(path, marker)
            for name in marker["files"]:  # temporary files of writes cut off by a kill (we hold the lock)
                _remove_temporaries(path, name)
        except BaseException:
            _unlock(path, fd, remove=False)
            raise
        return cls(path, kind, fd, marker, False)

    # ------------------------------------------------------------------ writing
    def record(self, name: str) -> Path:
        """Record ``name`` in the marker (before it is written); returns its path."""
        if os.sep in name or name.startswith("."):
            raise ValueError(f"run files are plain names in the directory, got {name!r}")
        if self._lock_fd < 0:
            raise ValueError(f"run directory {str(self.path)!r} is closed")
        if name not in self._marker["files"]:
            self._marker["files"].append(name)
            _write_marker(self.path, self._marker)
        return self.path / name

    def write_bytes(self, name: str, data: bytes) -> Path:
        """Write ``name`` atomically; returns its path."""
        path = self.record(name)
        write_bytes_atomic(path, data)
        return path

    def write_text(self, name: str, text: str) -> Path:
        return self.write_bytes(name, text.encode("utf-8"))

    @contextlib.contextmanager
    def atomic(self, name: str) -> Iterator[Path]:
        """A temporary path to write ``name`` through (for writers that take a file name)."""
        with atomic_path(self.record(name)) as tmp:
            yield tmp

    # ------------------------------------------------------------------ closing
    def discard(self) -> None:
        """Remove everything the run wrote (and the directory, if this process created it), and
        release the lock: for a run that failed before it had anything worth keeping."""
        for name in self._marker["files"]:
            _remove(self.path, name)
        _remove(self.path, MARKER)
        _unlock(self.path, self._lock_fd, remove=True)
        self._lock_fd = -1
        if self.created:
            with contextlib.suppress(OSError):
                self.path.rmdir()

    def close(self) -> None:
        """Release the lock (the directory and its files stay)."""
        if self._lock_fd >= 0:
            _unlock(self.path, self._lock_fd, remove=False)
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


def _read_marker(path: Path, kind: str) -> dict[str, Any] | None:
    """The marker of a run of ``kind`` in ``path``; None if there is none; ValueError for another kind."""
    try:
        marker = json.loads((path / MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        raise ValueError(f"{path / MARKER} is damaged; remove the directory by hand if it is yours") from None
    if not isinstance(marker, dict) or marker.get("format") != _DIR_FORMAT or not isinstance(marker.get("files"), list):
        raise ValueError(f"{path / MARKER} is not an mlm-ppl marker")
    if marker.get("kind") != kind:
        raise RunExistsError(path, f"{str(path)!r} holds an mlm-ppl {marker.get('kind')} run, not a {kind} run")
    return marker


def _write_marker(path: Path, marker: dict[str, Any]) -> None:
    write_text_atomic(path / MARKER, json.dumps(marker, indent=1))


def _has_marker(path: Path) -> bool:
    return (path / MARKER).is_file()


def _legacy_files(path: Path, kind: str) -> list[str] | None:
    """The files of a 0.1.0 run directory of ``kind`` (no marker), or None if it is not one."""
    if kind not in _LEGACY:
        return None
    fmt, names = _LEGACY[kind]
    try:
        config = json.loads((path / CONFIG).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("format") != fmt:
        return None
    present = [p.name for p in path.iterdir() if p.name != LOCK]
    if not set(present) <= set(names):
        return None
    return present


def _owned(path: Path, kind: str, overwrite: bool) -> dict[str, Any] | None:
    """Whether a new run of ``kind`` may start in ``path``: None if it is absent or empty, the
    old run's marker if ``overwrite`` may replace it; RunExistsError otherwise."""
    if not path.is_dir():
        return None
    others = [p.name for p in path.iterdir() if p.name != LOCK]
    if not others:
        return None
    marker = _read_marker(path, kind)
    if marker is None:
        files = _legacy_files(path, kind)
        if files is None:
            raise RunExistsError(
                path,
                f"{str(path)!r} is not empty and is not an mlm-ppl {kind} run directory "
                f"(no {MARKER} marker); it is never overwritten",
                ours=False,
            )
        marker = {"files": files}
    if not overwrite:
        raise RunExistsError(path, f"run directory {str(path)!r} exists and is not empty")
    return marker


def _lock(path: Path) -> int:
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
            _unlock(path, fd, remove=not existed)
            raise
        return fd
    raise RunLockedError(errno.EWOULDBLOCK, f"{str(path)!r}: its lock file keeps changing; try again")


def _unlock(path: Path, fd: int, *, remove: bool) -> None:
    if remove:
        _remove(path, LOCK)
    os.close(fd)  # closing the descriptor releases the flock


def _remove(path: Path, name: str) -> None:
    """Remove ``name`` and any temporary files of it left by an interrupted write; a directory
    only if it is an mlm-ppl run directory (a batch's template runs), and then only what that run
    recorded (files of anyone else in it stay, and so does the directory)."""
    target = path / name
    if target.is_dir() and not target.is_symlink():
        try:
            files = json.loads((target / MARKER).read_text()).get("files", [])
        except (OSError, ValueError, AttributeError):
            return
        for inner in [*files, MARKER, LOCK]:
            _remove(target, str(inner))
        with contextlib.suppress(OSError):
            target.rmdir()
        return
    target.unlink(missing_ok=True)
    _remove_temporaries(path, name)


def _remove_temporaries(path: Path, name: str) -> None:
    """Remove the temporary files an interrupted atomic write of ``name`` left in ``path``."""
    for tmp in path.glob(temp_pattern(name)):
        tmp.unlink(missing_ok=True)


def start_run(directory: str | os.PathLike, config: dict[str, Any], *, overwrite: bool = False) -> RunDirectory:
    """Create and lock ``directory`` for a new sampling run and write its ``config.json``."""
    run_dir = RunDirectory.create(directory, "sample", overwrite=overwrite)
    try:
        run_dir.write_text(CONFIG, json.dumps({"format": _FORMAT, **config}, indent=1, sort_keys=True))
    except BaseException:
        run_dir.discard()
        raise
    return run_dir


def resume_run(directory: str | os.PathLike) -> tuple[RunDirectory, dict[str, Any], Checkpoint | None]:
    """Lock the run in ``directory`` and read it: ``(run directory, settings, checkpoint or None)``.

    The checkpoint is the record of the run: ``config.json`` must hold the settings the checkpoint
    was made with, else a ValueError names every key that differs.
    A run on Ray workers keeps one checkpoint per group of chains (``checkpoint-g0.pt`` ...):
    each is checked the same way, and the returned checkpoint is None (the workers read theirs).
    """
    run_dir = RunDirectory.open(directory, "sample")
    try:
        config = read_config(run_dir.path)
        checkpoint = None
        for name in checkpoint_files(run_dir.path):
            cp, settings = _read_checkpoint(run_dir.path / name)
            if name == CHECKPOINT:
                checkpoint = cp
            if settings is not None and settings != config:
                keys = sorted(k for k in set(config) | set(settings) if _shown(config, k) != _shown(settings, k))
                detail = ", ".join(
                    f"{k} ({_shown(config, k)} in {CONFIG}, {_shown(settings, k)} in {name})" for k in keys
                )
                raise ValueError(
                    f"{run_dir.path / CONFIG} differs from the settings the run's checkpoint was made with: "
                    f"{detail}; restore {CONFIG}, or start a new run with the new settings"
                )
    except BaseException:
        run_dir.close()
        raise
    return run_dir, config, checkpoint


def _shown(config: dict[str, Any], key: str) -> str:
    return repr(config[key]) if key in config else "missing"


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


def save_checkpoint(run_dir: RunDirectory, cp: Checkpoint, config: dict[str, Any]) -> None:
    """Write ``checkpoint.pt`` atomically, with the settings ``config`` it belongs to."""
    run_dir.write_bytes(CHECKPOINT, _checkpoint_bytes(cp, config))


def group_name(group: int) -> str:
    """The checkpoint file of group ``group`` of a run on Ray workers."""
    return f"checkpoint-g{group}.pt"


def checkpoint_files(directory: str | os.PathLike) -> list[str]:
    """The names of the checkpoints in a run directory: ``checkpoint.pt``, or one per group."""
    names = [p.name for p in Path(directory).iterdir() if re.fullmatch(r"checkpoint(-g\d+)?\.pt", p.name)]
    return sorted(names)


def group_checkpoints(run_dir: RunDirectory, config: dict[str, Any], groups: int) -> GroupCheckpoints:
    """Checkpoints of the groups of a run on Ray workers, kept in ``run_dir`` (names recorded now;
    the workers write and read the files themselves, through picklable functions)."""
    for k in range(groups):
        run_dir.record(group_name(k))
    path = str(run_dir.path)
    return GroupCheckpoints(functools.partial(_save_group, path, config), functools.partial(_load_group, path))


def _save_group(directory: str, config: dict[str, Any], group: int, cp: Checkpoint) -> None:
    write_bytes_atomic(Path(directory) / group_name(group), _checkpoint_bytes(cp, config))


def _load_group(directory: str, group: int) -> Checkpoint | None:
    return _read_checkpoint(Path(directory) / group_name(group))[0]


def _checkpoint_bytes(cp: Checkpoint, config: dict[str, Any]) -> bytes:
    payload = {
        "format": _FORMAT,
        "config": config,
        "step": cp.step,
        "state_type": type(cp.state).__name__,
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
    return _read_checkpoint(Path(directory) / CHECKPOINT)[0]


def _read_checkpoint(file: Path) -> tuple[Checkpoint | None, dict[str, Any] | None]:
    """``(checkpoint, the settings it was made with)``; ``(None, None)`` if there is none; the
    settings are None in a checkpoint of 0.1.0, which did not store them."""
    if not file.exists():
        return None, None
    try:
        payload = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many kinds for a damaged or foreign file; every one means the same here
        raise ValueError(
            f"{file} is corrupt or not an mlm-ppl checkpoint ({type(err).__name__}); "
            "start the run again, overwriting it"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT or payload.get("state_type") not in _STATES:
        raise ValueError(f"{file} is not an mlm-ppl checkpoint")
    if "generator" in payload and "streams" not in payload:
        raise ValueError(
            f"{file} was written by mlm-ppl 0.1, whose chains shared one random stream; this version gives "
            "each chain its own, so the run cannot continue exactly: finish it with mlm-ppl 0.1, or start it again"
        )
    try:
        state = _unpack_state(payload["state_type"], payload["state"])
        stats = dict(payload["stats"])
        if "n_moves" not in stats and "n_changed" in stats:  # written by 0.1.0, whose kernels moved n_changed sites
            stats["n_moves"] = stats["n_changed"].clone()
        if not set(STAT_NAMES) <= set(stats) <= set(STAT_NAMES) | set(EXTRA_STAT_NAMES):
            raise ValueError(f"statistics {sorted(stats)}")
        fields = (payload["step"], payload["streams"], payload["draws"], payload["initial"], *stats.values())
        if not isinstance(fields[0], int) or not all(isinstance(t, torch.Tensor) for t in fields[1:]):
            raise ValueError("a field of the wrong type")
        settings = payload.get("config")
        if settings is not None and not isinstance(settings, dict):
            raise ValueError("settings of the wrong type")
    except (KeyError, AttributeError, TypeError, ValueError) as err:
        raise ValueError(f"{file} is not an mlm-ppl checkpoint or is damaged ({err})") from None
    cp = Checkpoint(payload["step"], state, payload["streams"], payload["draws"], stats, payload["initial"])
    return cp, settings


def write_outputs(run_dir: RunDirectory, run, mlm) -> tuple[Any, list[str]]:
    """Write ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots of a finished run.

    Returns the :class:`~mlm_ppl.diagnostics.Summary` (``str()`` of it is ``summary.txt``) and
    the paths written (``run.nc`` first).
    """
    from .diagnostics import plot_diagnostics, summary, to_inference_data

    idata = to_inference_data(run, mlm=mlm)
    with run_dir.atomic("run.nc") as tmp:
        idata.to_netcdf(str(tmp))
    lp = run.stats["lp"]
    lines = ["chain\tdraw\tlp\tsequence"]
    for c in range(run.num_chains):
        for d, seq in enumerate(mlm.decode(run.tokens[c])):
            lines.append(f"{c}\t{d}\t{float(lp[c, d]):.4f}\t{seq}")
    run_dir.write_text("samples.txt", "\n".join(lines) + "\n")
    report = summary(idata)
    run_dir.write_text("summary.txt", str(report) + "\n")
    for name in PLOTS:  # recorded before plot_diagnostics writes them
        run_dir.record(name)
    plots = plot_diagnostics(idata, str(run_dir.path), mlm=mlm)
    return report, [str(run_dir.path / name) for name in ("run.nc", "samples.txt", "summary.txt")] + plots
