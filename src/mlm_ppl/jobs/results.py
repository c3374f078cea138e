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
    """The draws of a sampling job, with what a user reads next: its InferenceData, summary and designs.

    A :class:`~mlm_ppl.Run` (``tokens``, ``stats``, ``attrs``, ``initial``) with
    :meth:`inference_data`, :meth:`summary` and, for a run in a directory, :meth:`designs`. What
    :func:`~mlm_ppl.sample`, :func:`~mlm_ppl.run_job`, :func:`~mlm_ppl.resume` and
    :func:`~mlm_ppl.load_run` return for one run.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, D, L)``, long: the token ids of the draws.
    stats : dict of str to torch.Tensor
        Per-draw statistics, each of shape ``(C, D)`` (``lp``, ``is_accepted``, ...).
    attrs : dict, optional
        The run's attributes (kernel, model, settings ...).
    initial : torch.Tensor or None, optional
        Shape ``(C, L)``: the chains' starting states; None where unknown.
    directory : pathlib.Path or None, optional
        The run directory; None for a run in memory.
    report : Summary or None, optional
        The run's summary, as its end wrote it (None: computed by :meth:`summary` when asked).
    written : tuple of str, optional
        The files the run's end wrote.
    mlm : MaskedLM or None, optional
        The model (None where the run was read without it).
    constraints : object, optional
        The run's constraint spec bound to its target, or None.
    source : str, optional
        For a run read by :func:`~mlm_ppl.load_run`: which file was read, and why.
    idata : arviz.InferenceData or None, optional
        The run as InferenceData, once read or converted (None: made by :meth:`inference_data`).

    Examples
    --------
    >>> import mlm_ppl
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> run = mlm_ppl.sample(mlm, "AC[MASK][MASK]E", num_chains=2, num_samples=10, seed=0)
    >>> run.inference_data().posterior["tokens"].shape  # (chains, draws, tokens)
    (2, 10, 7)
    >>> len(run.summary().chains)  # a verdict per chain
    2
    """

    directory: Path | None = None
    report: Any = None
    written: tuple[str, ...] = ()
    mlm: Any = field(default=None, repr=False)
    constraints: Any = field(default=None, repr=False)
    source: str = ""
    idata: Any = field(default=None, repr=False)

    def inference_data(self) -> Any:
        """The run as ArviZ InferenceData, with the constraints' columns of a constrained run.

        Returns
        -------
        arviz.InferenceData
            As :func:`~mlm_ppl.load_run` read it, the directory's ``run.nc``, or converted from the draws
            of a run in memory (:func:`~mlm_ppl.to_inference_data`); kept for the next call.
        """
        if self.idata is None:
            if self.directory is not None:
                self.idata = read_run(str(self.directory))
            else:
                self.idata = to_inference_data(self, mlm=self.mlm, constraints=self.constraints)
        return self.idata

    def summary(self) -> Any:
        """The run's R-hat, ESS and a verdict per chain (:func:`mlm_ppl.summary`).

        Returns
        -------
        Summary
            The summary (:class:`~mlm_ppl.diagnostics.Summary`): for a run just run in a directory, the
            one its end wrote; otherwise computed from :meth:`inference_data`, and kept.
        """
        if self.report is None:
            self.report = summary(self.inference_data())
        return self.report

    def designs(self, top: int = 10, min_hamming: int = 1, **filters: Any) -> Designs:
        """Pick the best distinct designs of the run, as ``mlm-ppl designs`` does.

        Parameters
        ----------
        top : int, optional
            The most designs to pick (default 10).
        min_hamming : int, optional
            The least Hamming distance between two designs (default 1).
        **filters
            The other arguments of :func:`~mlm_ppl.designs.pick_designs`: ``exclude_memorized``,
            ``novel_from``, ``min_distance``, ``reference``, ``where``, ``trust_code``.

        Returns
        -------
        Designs
            The designs (:class:`~mlm_ppl.designs.Designs`).

        Raises
        ------
        ValueError
            Where the run is in memory (designs are picked from a run directory: run the job with
            ``out=DIR``), and where :func:`~mlm_ppl.designs.pick_designs` refuses.
        """
        if self.directory is None:
            raise ValueError("designs are picked from a run directory: run the job with out=DIR")
        return pick_designs(self.directory, top=top, min_hamming=min_hamming, **filters)


@dataclass
class BatchRun:
    """A batch of runs in a directory, one per template, and its summary.

    What :func:`~mlm_ppl.sample`, :func:`~mlm_ppl.run_job`, :func:`~mlm_ppl.resume` and
    :func:`~mlm_ppl.load_run` return for a batch.

    Parameters
    ----------
    directory : pathlib.Path
        The batch directory.
    templates : list of tuple of (str, str)
        The ``(name, template)`` pairs; each template's run is in ``directory / name``.
    summary : str
        The text of the batch's ``summary.txt``: one line per template.

    Examples
    --------
    >>> import mlm_ppl
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), "model")
    >>> templates = [("short", "AC[MASK]E"), ("long", "AC[MASK][MASK]E")]
    >>> batch = mlm_ppl.sample("model", templates=templates, num_chains=2, num_samples=10, out="batch")
    >>> [name for name, _ in batch.templates]
    ['short', 'long']
    >>> batch.run("long").tokens.shape
    torch.Size([2, 10, 7])
    >>> batch.designs(top=1).found  # designs per template
    {'short': 1, 'long': 1}
    """

    directory: Path
    templates: list[tuple[str, str]]
    summary: str

    def run(self, name: str) -> SampledRun:
        """The run of one template of the batch.

        Parameters
        ----------
        name : str
            The template's name.

        Returns
        -------
        SampledRun
            Its run, read by :func:`load_run`.

        Raises
        ------
        ValueError
            Where the batch has no template ``name`` (the message lists its templates), and where
            :func:`load_run` refuses the template's run.
        """
        if name not in dict(self.templates):
            raise ValueError(f"the batch has no template {name!r}; its templates are {[n for n, _ in self.templates]}")
        run = load_run(self.directory / name)
        assert isinstance(run, SampledRun)  # a template's folder holds a sampling run (load_run checks its kind)
        return run

    def designs(self, top: int = 10, min_hamming: int = 1, **filters: Any) -> Designs:
        """Pick the best distinct designs of every template of the batch, as ``mlm-ppl designs`` does.

        Parameters
        ----------
        top : int, optional
            The most designs to pick per template (default 10).
        min_hamming : int, optional
            The least Hamming distance between two designs of a template (default 1).
        **filters
            The other arguments of :func:`~mlm_ppl.designs.pick_designs`, as :meth:`SampledRun.designs
            <mlm_ppl.SampledRun.designs>`.

        Returns
        -------
        Designs
            The designs, template by template (:class:`~mlm_ppl.designs.Designs`).

        Raises
        ------
        ValueError
            Where :func:`~mlm_ppl.designs.pick_designs` refuses (a template's run with no draws yet,
            nothing feasible to pick).
        """
        return pick_designs(self.directory, top=top, min_hamming=min_hamming, **filters)


def load_run(directory: str | os.PathLike, *, trust_code: bool = False) -> SampledRun | BatchRun:
    """Read a run or a batch back from its directory, without a lock.

    A run is read from its ``run.nc`` (draws, statistics and record). A run still going, cut off, or
    resumed since its ``run.nc`` was written is read from its checkpoint, its draws so far
    (:func:`~mlm_ppl.jobs.read_current`: the model is loaded); ``source`` says which was read.

    Parameters
    ----------
    directory : str or os.PathLike
        The run or batch directory.
    trust_code : bool, optional
        Consent to code experts in the record of a run read from its checkpoint.

    Returns
    -------
    SampledRun or BatchRun
        The run (its ``directory`` and ``source`` set), or for a batch its templates and summary.

    Raises
    ------
    ValueError
        Where the directory is not an mlm-ppl run or batch directory, the run has no draws yet (no
        ``run.nc``, no checkpoint), or the batch is not finished (no ``summary.txt``); the message
        says what is missing.

    Examples
    --------
    >>> import mlm_ppl
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), "model")
    >>> _ = mlm_ppl.sample("model", "AC[MASK][MASK]E", num_chains=2, num_samples=10, out="run")
    >>> run = mlm_ppl.load_run("run")
    >>> run.tokens.shape, run.directory.name
    (torch.Size([2, 10, 7]), 'run')
    >>> mlm_ppl.load_run("model")
    Traceback (most recent call last):
    ...
    ValueError: 'model' is not an mlm-ppl run or batch directory (no config.json of one)
    """
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
