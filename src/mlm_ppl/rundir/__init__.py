"""Run directories: owned, locked, written atomically; a checkpoint that is the run's record.

* :mod:`.directory`: the owner (marker, lock, atomic writes) of any run directory;
* :mod:`.checkpoint`: the checkpoint format of a sampling run;
* :mod:`.outputs`: what a finished sampling run writes.

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
    """Create and lock ``directory`` for a new sampling run and write its ``config.json``.

    ``settings`` must record the model's files (:meth:`RunSettings.with_model_files`): a resume
    refuses a model whose files changed."""
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
    """Lock the run in ``directory`` and read it: ``(run directory, settings, checkpoint or None)``.

    The checkpoint is the record of the run: ``config.json`` must hold the settings the checkpoint
    was made with, else a ValueError names every setting that differs.
    A run on Ray workers keeps one checkpoint per group of chains (``checkpoint-g0.pt`` ...):
    each is checked the same way, and the returned checkpoint is None (the workers read theirs).
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
    """The settings of the run with its cap set to ``num_samples``, checked (nothing written): more
    than it has, or, for a run whose cap was raised past what it could ever finish (by a version
    before the size check ran on resume), lowered back to no fewer than the draws its checkpoint
    holds. Refused for an annealed run (its schedule spans the run's steps) and a run on Ray workers."""
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
    """Record the cap of ``settings`` (:func:`check_cap`'s) in the checkpoint of the run in the locked
    ``run_dir`` (its draws so far unchanged) and then in ``config.json``; the run then continues to
    the new cap with the draws of an uninterrupted run of that many (:func:`~mlm_ppl.inference.run_chains`)."""
    if checkpoint is not None:
        save_checkpoint(run_dir, checkpoint, settings.to_dict())
    _write_config(run_dir, settings)
    return settings


def chain_states(directory: str | os.PathLike) -> tuple[Tensor, RunSettings]:
    """Where the chains of the sampling run in ``directory`` are, ``(C, L)`` tokens, and its settings.

    Read from its checkpoint (:func:`run_checkpoint`: the state after its last step, finished or
    not; a run still going may be read), or, for a run on Ray workers, from its groups' checkpoints
    in chain order."""
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
    """The checkpoint of the sampling run in ``directory`` (``checkpoint.pt``: its draws and state
    after its last step, finished or not; a run still going may be read, no lock is taken) and its
    settings; the checkpoint's record must agree with ``config.json`` as on resume. A ValueError
    says what is missing: a directory that is not a sampling run, a run without a checkpoint yet,
    a run on Ray workers (one checkpoint per group of chains)."""
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
    # an old run resumed once has checkpoints in today's form beside its old config.json
    detail = differences(RunSettings.completed(config), RunSettings.completed(recorded or {}), CONFIG, name)
    if detail:
        raise ValueError(
            f"{path / CONFIG} differs from the settings the run's checkpoint was made with: "
            f"{detail}; restore {CONFIG}, or start a new run with the new settings"
        )
    return checkpoint


def states_digest(tokens: Tensor) -> str:
    """The sha256 of chain states ``(C, L)`` (their shape and token ids): what a run started from
    them records (``RunSettings.starts``)."""
    ids = tokens.detach().to("cpu", torch.int64).contiguous()
    digest = hashlib.sha256(repr(tuple(ids.shape)).encode())
    digest.update(ids.numpy().tobytes())
    return digest.hexdigest()


def _write_config(run_dir: RunDirectory, settings: RunSettings) -> None:
    run_dir.write_text(CONFIG, json.dumps({"format": FORMAT, **settings.to_dict()}, indent=1, sort_keys=True))


def flat_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A settings record with nested records as ``KEY.NAME`` keys (the kernel's options as
    ``kernel_options.scan``, the model's files as ``model_files.model.safetensors``): to name what differs."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def differences(mine: Mapping[str, Any], theirs: Mapping[str, Any], where_mine: str, where_theirs: str) -> str:
    """Every setting that differs between two records, named with both values and where each is:
    ``seed (8 in config.json, 7 in checkpoint.pt), ...``; empty if they agree."""
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
