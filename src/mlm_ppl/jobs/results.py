"""What a sampling job gives back: :class:`SampledRun` (one run's draws, and its directory's
summary and designs at hand) and :class:`BatchRun` (a batch directory); :func:`load_run` reads
either from its directory."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..campaign import batch_templates
from ..campaign.current import read_current
from ..designs import Designs, pick_designs
from ..diagnostics import read_run, summary, to_inference_data
from ..inference.runner import Run
from ..rundir import CHECKPOINT, CONFIG, kind_of

__all__ = ["SampledRun", "BatchRun", "load_run"]


@dataclass
class SampledRun(Run):
    """The draws of a sampling job (a :class:`~mlm_ppl.Run`: ``tokens``, ``stats``, ``attrs``,
    ``initial``) with what a user reads next: :meth:`inference_data`, :meth:`summary` and, for a
    run in a directory (``directory``; ``written``: the files its end wrote), :meth:`designs`."""

    directory: Path | None = None
    report: Any = None
    written: tuple[str, ...] = ()
    mlm: Any = field(default=None, repr=False)
    constraints: Any = field(default=None, repr=False)
    source: str = ""
    idata: Any = field(default=None, repr=False)

    def inference_data(self) -> Any:
        """The run as ArviZ InferenceData (with the constraints' columns of a constrained run): as
        :func:`load_run` read it, the directory's ``run.nc``, or converted from the draws of a run
        in memory."""
        if self.idata is None:
            if self.directory is not None:
                self.idata = read_run(str(self.directory))
            else:
                self.idata = to_inference_data(self, mlm=self.mlm, constraints=self.constraints)
        return self.idata

    def summary(self) -> Any:
        """R-hat, ESS and a verdict per chain (:func:`mlm_ppl.summary`); a directory's as it was written."""
        if self.report is None:
            self.report = summary(self.inference_data())
        return self.report

    def designs(self, top: int = 10, min_hamming: int = 1, **filters: Any) -> Designs:
        """The best distinct designs of the run (:func:`mlm_ppl.designs.pick_designs`, as ``mlm-ppl
        designs``; ``filters``: its ``exclude_memorized``, ``novel_from``, ``min_distance``,
        ``reference``)."""
        if self.directory is None:
            raise ValueError("designs are picked from a run directory: run the job with out=DIR")
        return pick_designs(self.directory, top=top, min_hamming=min_hamming, **filters)


@dataclass
class BatchRun:
    """A batch of runs in ``directory``, one per template (``templates``: name, template), and its
    ``summary`` (the text of its ``summary.txt``: one line per template)."""

    directory: Path
    templates: list[tuple[str, str]]
    summary: str

    def run(self, name: str) -> SampledRun:
        """The run of the template ``name``."""
        if name not in dict(self.templates):
            raise ValueError(f"the batch has no template {name!r}; its templates are {[n for n, _ in self.templates]}")
        run = load_run(self.directory / name)
        assert isinstance(run, SampledRun)  # a template's folder holds a sampling run (load_run checks its kind)
        return run

    def designs(self, top: int = 10, min_hamming: int = 1, **filters: Any) -> Designs:
        """The best distinct designs of every template (``mlm-ppl designs``; ``filters`` as
        :meth:`SampledRun.designs`)."""
        return pick_designs(self.directory, top=top, min_hamming=min_hamming, **filters)


def load_run(directory: str | os.PathLike, *, trust_code: bool = False) -> SampledRun | BatchRun:
    """A run (its ``run.nc``: draws, statistics and record) or batch, read from its directory
    without a lock; a ValueError says what is missing. A run still going, cut off, or resumed since
    its ``run.nc`` was written is read from its checkpoint, its draws so far
    (:func:`~mlm_ppl.campaign.current.read_current`: the model is loaded); ``source`` says which was
    read. ``trust_code``: consent to code experts in the record of a run read from its checkpoint."""
    path = Path(directory)
    kind = kind_of(path)
    if kind == "batch":
        templates = batch_templates(path)
        text = path / "summary.txt"
        if not text.is_file():
            raise ValueError(f"the batch in {str(path)!r} is not finished (no summary.txt): resume it first")
        return BatchRun(path, templates, text.read_text())
    if kind != "sample":
        raise ValueError(f"{str(path)!r} is not an mlm-ppl run or batch directory (no {CONFIG} of one)")
    if not (path / "run.nc").is_file() and not (path / CHECKPOINT).is_file():
        raise ValueError(f"the run in {str(path)!r} has no draws yet (no run.nc, no checkpoint): resume it first")
    current = read_current(path, trust_code=trust_code)
    idata = current.idata
    post, stats = idata.posterior, idata.sample_stats
    return SampledRun(
        tokens=torch.as_tensor(post["tokens"].values).long(),
        stats={name: torch.as_tensor(stats[name].values) for name in stats.data_vars},
        attrs=dict(idata.attrs),
        directory=path,
        mlm=current.mlm,
        constraints=current.constraints,
        source=current.source,
        idata=idata,
    )
