"""A run directory as it stands now: its finished outputs (``run.nc``), or, for a run still going or
cut off, the draws its checkpoint holds so far (:func:`read_current`, what ``mlm-ppl diagnose``,
``mlm-ppl designs`` and :func:`~mlm_ppl.load_run` read), and those draws written out as the
run's current outputs (:func:`write_current`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from ..diagnostics import SITE_COPY_BUDGET, read_run, to_inference_data
from ..inference.runner import Run
from ..models.constraints import trusting_code
from .run import build, constraints_of, run_so_far

__all__ = ["CurrentRun", "read_current", "write_current"]


@dataclass
class CurrentRun:
    """What :func:`read_current` read of a run directory as it stands now.

    Parameters
    ----------
    idata : arviz.InferenceData
        The run's draws, statistics and record.
    source : str
        One line: which file was read, and why.
    run : Run or None, optional
        Read from a checkpoint: the run so far (:class:`~mlm_ppl.Run`); None for ``run.nc``.
    mlm : MaskedLM or None, optional
        Read from a checkpoint: the model, loaded; None for ``run.nc``, which needs no model.
    constraints : object, optional
        Read from a checkpoint: the run's constraint spec bound to its target
        (:func:`~mlm_ppl.campaign.constraints_of`); None for ``run.nc`` or a run without constraints.
    """

    idata: Any
    source: str
    run: Run | None = None
    mlm: Any = None
    constraints: Any = None

    @property
    def from_checkpoint(self) -> bool:
        """Whether the draws were read from the run's checkpoint (not from its ``run.nc``)."""
        return self.run is not None


def read_current(path: str | os.PathLike, *, trust_code: bool = False, progress: bool = False) -> CurrentRun:
    """Read the draws of a run (a ``run.nc``, or a run directory) as they stand now.

    A run directory whose checkpoint holds the draws of its ``run.nc`` (a finished run) is read from
    ``run.nc``, with no model. One whose checkpoint holds other draws (a run still going, or cut off,
    or resumed since: ``run.nc`` is older) or that has no ``run.nc`` yet is read from its checkpoint:
    the model is loaded and the draws are converted as the finished run's would be
    (:func:`~mlm_ppl.campaign.run_so_far`; the designed positions scored per distinct state, within
    :data:`~mlm_ppl.diagnostics.SITE_COPY_BUDGET`, those of an older ``run.nc`` reused), and
    ``source`` says so. This is what ``mlm-ppl diagnose``, ``mlm-ppl designs`` and
    :func:`~mlm_ppl.load_run` read.

    Parameters
    ----------
    path : str or os.PathLike
        A ``run.nc`` file, or a run directory.
    trust_code : bool, optional
        Consent to code experts named in the run's record (read from a checkpoint).
    progress : bool, optional
        Whether to show a progress bar while the states are scored.

    Returns
    -------
    CurrentRun
        The draws as InferenceData, which file was read and why, and, read from a checkpoint, the
        run so far with its model and constraints.

    Raises
    ------
    FileNotFoundError
        Where there is no such file, or a directory holds neither a checkpoint nor a ``run.nc``.
    ValueError
        Where the file or checkpoint holds no readable run (:func:`~mlm_ppl.diagnostics.read_run`
        and the checkpoint's readers), or the run's record names code experts without
        ``trust_code``.
    """
    path = Path(path)
    if not path.is_dir() or rundir.kind_of(path) != "sample" or not (path / rundir.CHECKPOINT).is_file():
        return CurrentRun(read_run(str(path)), f"read {path / 'run.nc' if path.is_dir() else path}")
    finished = path / "run.nc"
    idata = None
    if finished.is_file():  # no settings built yet: a finished run's record is not read (its code experts)
        idata = read_run(str(path))
        tokens = idata.posterior["tokens"].values
        checkpoint = rundir.load_checkpoint(path)
        drawn = None if checkpoint is None else int(checkpoint.stats["lp"].shape[1])
        if checkpoint is None or (
            tokens.shape[1] == drawn and np.array_equal(tokens, checkpoint.draws[:, :drawn].numpy())
        ):
            return CurrentRun(idata, f"read {finished}")
        why = f"{finished} holds {tokens.shape[1]} draws, an older state of the run"
    else:
        why = f"{finished} is not written yet"
    with trusting_code(trust_code):
        checkpoint, settings = rundir.run_checkpoint(path)
        drawn = int(checkpoint.stats["lp"].shape[1])
        mlm, target, kernel = build(settings)
    run = run_so_far(settings, checkpoint, mlm, kernel)
    constraints = constraints_of(target)
    # the older run.nc's scores of the states it holds are the same: only the new states are read
    idata = to_inference_data(
        run, mlm=mlm, constraints=constraints, sites=True, progress=progress, known=idata, site_budget=SITE_COPY_BUDGET
    )
    source = (
        f"read {path / rundir.CHECKPOINT}: the {drawn} draws of {settings.num_samples} the run has taken so far ({why})"
    )
    return CurrentRun(idata, source, run, mlm, constraints)


def write_current(path: str | os.PathLike, current: CurrentRun) -> list[str]:
    """Write the current outputs of a run read from its checkpoint, for its draws so far.

    ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots, as the run's end would write them
    for the draws so far, under the run's lock. Resuming the run later replaces them.

    Parameters
    ----------
    path : str or os.PathLike
        The run directory.
    current : CurrentRun
        What :func:`read_current` read of it, from its checkpoint.

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    ValueError
        Where ``current`` was read from ``run.nc``: its outputs are already written.
    RunLockedError
        While the run is going on (:class:`~mlm_ppl.rundir.RunLockedError`).
    """
    if current.run is None:
        raise ValueError("the run was read from its run.nc: its outputs are already written")
    with rundir.RunDirectory.open(path, "sample") as run_dir:
        _, paths = rundir.write_outputs(run_dir, current.run, current.mlm, current.constraints, current.idata)
    return paths
