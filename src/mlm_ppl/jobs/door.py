"""The one way to run a sampling job: :func:`sample` (keyword arguments), :func:`run_job` (a
:class:`~mlm_ppl.jobs.JobSpec`, a job file's or the command line's) and :func:`resume`.

Each decides here what a run is: a run in memory, a run directory (owned, locked, checkpointed,
with the summary, plots and draws the command line writes), or a batch of runs (templates, or the
strata of a variable gap); the target is built by one function
(:func:`mlm_ppl.campaign.build_target`) for every case. Every argument is checked before any model
loads, and the run's cost is estimated before any step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import campaign, rundir
from .._checks import check_count
from ..inference.annealing import annealing_note, format_anneal, parse_anneal
from ..inference.distributed import WorkersLostError
from ..inference.estimate import LongRunWarning, estimate_run
from ..inference.runner import Checkpoint, Run
from ..inference.spec import KernelBase
from ..models.constraints import trusting_code
from ..models.masked_lm import MaskedLM
from ..rundir import RunDirectory
from ..settings import MAX_CHAINS, RunSettings, option_flags
from .results import BatchRun, SampledRun
from .spec import JOB_KEYS, JobSpec, constraint_spec

__all__ = ["sample", "run_job", "resume"]

Notes = Callable[[str], None]
"""Where a job's notes go (its estimate when it is big, an annealed run's caveat); the command
line prints them on stderr. Without one, the estimate is a :class:`LongRunWarning`."""


def sample(
    model: MaskedLM | str,
    template: str | None = None,
    *,
    kernel: str | None = None,
    kernel_options: Mapping[str, Any] | None = None,
    constraints: Any = None,
    log_factor: Callable[[Tensor], Tensor] | None = None,
    num_chains: int = 4,
    num_samples: int = 100,
    warmup_steps: int = 0,
    init: str | Tensor | None = None,
    progress: bool = False,
    trust_code: bool = False,
    backend: str | None = None,
    **keys: Any,
) -> SampledRun | BatchRun:
    """Run a sampling job: chains on the masked positions of a template, in memory or in a run directory.

    With ``out=DIR`` the job runs in a run directory the command line can resume, diagnose and pick
    designs from; a run there continues with :func:`resume` after an interruption, exactly. Every
    argument is checked before any model loads, and the run's cost is estimated before any step.

    Parameters
    ----------
    model : MaskedLM or str
        A :class:`~mlm_ppl.MaskedLM`, or a name or path :func:`~mlm_ppl.load_mlm` loads. A run
        directory records the model by its name and loads it again on resume: give it a model
        :func:`~mlm_ppl.load_mlm` can load (``"antiberty"``, a saved model's directory).
    template : str or None, optional
        Mask tokens at the positions to sample (text, not token ids); a variable gap ``MASK{a,b}``
        gives loops of several lengths. None where ``length`` or ``templates`` is given instead.
    kernel : str or None, optional
        A name of :data:`~mlm_ppl.inference.KERNELS` (default ``"mh"``), with its options in
        ``kernel_options`` or as further keyword arguments.
    kernel_options : mapping of str to object or None, optional
        The kernel's own options.
    constraints : ConstraintSpec or str or None, optional
        A :class:`~mlm_ppl.ConstraintSpec` or a spec file (rules and experts, exact:
        docs/constraints.md).
    log_factor : callable or None, optional
        A function ``tokens (N, L) -> (N,)`` of extra log-density terms (a run in memory only: a
        directory records its target, and code only as a spec's expert).
    num_chains : int, optional
        Chains, advanced together (default 4).
    num_samples : int, optional
        Draws kept per chain (default 100).
    warmup_steps : int, optional
        Steps discarded before the first draw (default 0).
    init : str or torch.Tensor or None, optional
        How the masks are first filled (a name of :data:`~mlm_ppl.inference.INITS`), or the
        ``(C, L)`` tokens to start from (a run in memory only).
    progress : bool, optional
        Whether to show a progress bar.
    trust_code : bool, optional
        Allow spec experts that name Python code.
    backend : str or None, optional
        Deprecated: ``"local"`` or ``"ray"``; ``workers=N`` alone runs the chains on N Ray workers.
    **keys
        Every other key of a job (:class:`~mlm_ppl.JobSpec`): ``templates`` (a batch), ``length`` (a
        whole sequence), ``length_mode`` and ``length_prior`` (a variable gap: ``"jump"``, one run
        whose chains move between lengths, or ``"strata"``, one run per length), ``energy``,
        ``temperature``, ``thin``, ``seed``, ``anneal``, ``until_converged``, ``starts_from``,
        ``workers`` (Ray), ``out``, ``overwrite``, ``force``, ``checkpoint_seconds``, ``threads``
        (torch's threads while the job runs; default: one per core), ``dtype``, ``device``. A batch
        (``templates``, or ``length_mode="strata"``) needs ``out``. The other keys are the kernel's
        own options, as Pyro's kernels take them.

    Returns
    -------
    SampledRun or BatchRun
        The draws, with ``inference_data()``, ``summary()`` and ``designs()``
        (:class:`~mlm_ppl.SampledRun`), or for a batch a :class:`~mlm_ppl.BatchRun`.

    Raises
    ------
    TypeError
        Where ``template`` is token ids, or a key has the wrong type.
    ValueError
        Where a key is unknown or bad, keys do not go together (``log_factor``, ``init`` tokens or
        Python kernel options with ``out``; a batch without ``out``; an unknown ``backend``), a
        directory is in the way (the message says how to resume or replace it), or the run's
        estimate is past half of the machine's memory or past a day without ``force``.
    WorkersLostError
        Where Ray workers died more often than Ray restarts them
        (``mlm_ppl.inference.distributed.WorkersLostError``); the message says what was kept.

    Warns
    -----
    LongRunWarning
        For a big run (:class:`~mlm_ppl.inference.LongRunWarning`): its estimate.
    DeprecationWarning
        For ``backend``.

    See Also
    --------
    mlm_ppl.resume : Continue a run directory's run or batch.
    mlm_ppl.load_run : Read a run or batch back from its directory.
    mlm_ppl.JobSpec : Every key of a job.

    Examples
    --------
    >>> import mlm_ppl
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)  # mlm_ppl.load_mlm("antiberty") for the real model
    >>> run = mlm_ppl.sample(mlm, "AC[MASK][MASK]E", num_chains=2, num_samples=10, seed=0)
    >>> run.tokens.shape  # (chains, draws, tokens with [CLS] and [SEP])
    torch.Size([2, 10, 7])

    A run directory records a model it can load again: here the tiny model, saved.

    >>> model = save_tiny(mlm, "model")
    >>> run = mlm_ppl.sample("model", "AC[MASK][MASK]E", num_chains=2, num_samples=10, out="run")
    >>> run.directory.name, (run.directory / "run.nc").is_file()
    ('run', True)
    """
    if backend is not None:
        warnings.warn(
            "backend= is deprecated: workers=N alone runs the chains on N Ray workers", DeprecationWarning, stacklevel=2
        )
        if backend not in ("local", "ray"):
            raise ValueError(f"unknown backend {backend!r}; give workers=N for Ray, nothing for this process")
        if backend == "ray" and keys.get("workers") is None:
            raise ValueError("workers must be an integer >= 1 for Ray: give workers=N")
        if backend == "local" and keys.get("workers") is not None:
            raise ValueError("workers applies to Ray (workers=N alone runs the chains there)")
    options = dict(kernel_options or {})
    job_keys = {k: keys.pop(k) for k in list(keys) if k in _JOB_ONLY}
    options.update(keys)  # the rest: the kernel's own options, as Pyro's kernels take them
    mlm = model if isinstance(model, MaskedLM) else None
    values: dict[str, Any] = dict(
        job_keys,
        model=model if mlm is None else mlm.name,
        kernel=kernel,
        kernel_options=options,
        constraints=constraints,
        num_chains=num_chains,
        num_samples=num_samples,
        warmup_steps=warmup_steps,
        init=init if isinstance(init, str) else None,
    )
    if isinstance(template, Tensor):
        raise TypeError("template must be text (mask tokens at the positions to sample), not token ids")
    if template is not None:
        values["template"] = template
    with trusting_code(trust_code):
        job = JobSpec.from_mapping(values)
        tokens = init if isinstance(init, Tensor) else None
        return run_job(job, mlm=mlm, log_factor=log_factor, init=tokens, progress=progress, notes=None)


_JOB_ONLY = frozenset(JOB_KEYS) - set(inspect.signature(sample).parameters)
"""The job keys :func:`sample` takes through ``**keys`` (the rest of ``**keys``: kernel options)."""


def run_job(
    job: JobSpec,
    *,
    mlm: MaskedLM | None = None,
    log_factor: Callable[[Tensor], Tensor] | None = None,
    init: Tensor | None = None,
    progress: bool = False,
    notes: Notes | None = None,
) -> SampledRun | BatchRun:
    """Run a job: in memory, in its run directory ``job.out``, or as a batch there.

    Parameters
    ----------
    job : JobSpec
        The job (:class:`~mlm_ppl.JobSpec`).
    mlm : MaskedLM or None, optional
        The model already in memory (its name is the job's model); None: loaded from the job's
        ``model``.
    log_factor : callable or None, optional
        A function ``tokens (N, L) -> (N,)`` of extra log-density terms (a run in memory only).
    init : torch.Tensor or None, optional
        ``(C, L)`` tokens to start from (a run in memory only).
    progress : bool, optional
        Whether to show a progress bar.
    notes : callable or None, optional
        Where the job's notes go, one line each (torch's threads, its estimate when it is big, an
        annealed run's caveat); the command line prints them on stderr. None: the estimate is a
        :class:`~mlm_ppl.inference.LongRunWarning`.

    Returns
    -------
    SampledRun or BatchRun
        The run (:class:`~mlm_ppl.SampledRun`), or for a batch a :class:`~mlm_ppl.BatchRun`.

    Raises
    ------
    ValueError
        Where ``log_factor``, ``init`` tokens or Python kernel options come with ``job.out`` (no
        record holds them), ``job.out`` is where the run it starts from is, a batch has no
        ``job.out``, a directory is in the way, or the run's estimate is refused; and the errors of
        building the model, target and kernel (:func:`~mlm_ppl.campaign.build`).
    WorkersLostError
        Where Ray workers died more often than Ray restarts them
        (``mlm_ppl.inference.distributed.WorkersLostError``).

    Notes
    -----
    Code experts of the job's spec were read with the caller's consent
    (:func:`~mlm_ppl.models.constraints.trusting_code`).

    Examples
    --------
    >>> from mlm_ppl import JobSpec, run_job
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> job = JobSpec(template="AC[MASK][MASK]E", num_chains=2, num_samples=10)
    >>> run = run_job(job, mlm=tiny_residue_bert("ACDE", seed=1))
    >>> run.tokens.shape, run.directory is None
    (torch.Size([2, 10, 7]), True)
    """
    with torch_threads(job.threads, notes):
        return _run_job(job, mlm, log_factor, init, progress, notes)


@contextlib.contextmanager
def torch_threads(threads: int | None, notes: Notes | None) -> Iterator[None]:
    """Run with ``threads`` torch intra-op threads (None: torch's own, one per core), torch's
    setting restored after; says how many, once, as the run starts. Beside another busy process
    one thread is faster than two on two cores (docs/performance.md, "Threads")."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    if notes is not None:
        how = "set by threads / --threads" if threads is not None else "torch's default; threads / --threads N sets it"
        notes(f"threads: {torch.get_num_threads()} of {os.cpu_count()} CPUs ({how})")
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_job(
    job: JobSpec,
    mlm: MaskedLM | None,
    log_factor: Callable[[Tensor], Tensor] | None,
    init: Tensor | None,
    progress: bool,
    notes: Notes | None,
) -> SampledRun | BatchRun:
    settings = job.settings
    if settings.workers is not None:  # Ray installed (it says how to install it), and RAY_ADDRESS answers
        from ..inference.distributed import check_address, import_ray

        import_ray()
        check_address()
    if mlm is not None:
        settings = dataclasses.replace(
            settings,
            model=mlm.name,
            dtype=None if str(mlm.dtype) == "torch.float32" else str(mlm.dtype).removeprefix("torch."),
            device=None if mlm.device.type == "cpu" else str(mlm.device),
        )
    if job.out is not None:
        if job.python_options:
            raise ValueError(
                f"kernel_options: {', '.join(job.python_options)} (a Python object) cannot be recorded with a run "
                "directory; give anneal='FROM:TO' (tau geometrically from FROM to TO over the run), or run without out="
            )
        if log_factor is not None:
            raise ValueError(
                "log_factor cannot be recorded with a run directory: give it as an expert of a constraint spec "
                "(constraints=, kind = 'module:function'), or run without out="
            )
        if init is not None:
            raise ValueError("init tokens cannot be recorded with a run directory: give starts_from=RUN, or no out=")
    if job.out is not None and job.starts_from is not None and _within(job.starts_from, job.out):
        raise ValueError(
            f"out {str(job.out)!r} is where the run this one starts from is (starts_from {job.starts_from!r}): "
            "writing there would replace the states it starts from; give another out (--out)"
        )
    if job.batch is not None:
        if job.out is None:
            raise ValueError(
                "a batch (templates, or length_mode='strata': one run per template) writes one run directory per "
                "template: give out=DIR (--out)"
            )
        return _start_batch(job, settings, progress, notes)
    if job.out is not None:
        settings = settings.with_model_files()  # what a run directory records of its model
    if job.starts_from is not None:
        settings = campaign.starts_record(settings, job.starts_from)  # before the model loads
    if job.out is None:
        mlm, target, kernel = campaign.build(settings, mlm, log_factor, job.python_options)
        check_size(settings, kernel, job.force, notes)
        campaign.connect_workers(settings)
        result, _, _ = campaign.execute(None, settings, None, mlm, kernel, progress=progress, init=init)
        recorded = settings.kernel_options.to_dict()  # the options given, as a record holds them
        result.attrs["kernel_options"] = {k: v for k, v in job.kernel_options.items() if k in recorded}
        return _sampled(result, mlm, kernel)
    try:
        RunDirectory.check_new(job.out, "sample", overwrite=job.overwrite, names=rundir.OUTPUT_NAMES)
        mlm, _, kernel = campaign.build(settings, mlm)  # checks template, constraints and options
        check_size(settings, kernel, job.force, notes)
        campaign.connect_workers(settings)  # Ray answers before the directory is made (or nothing is left)
        run_dir = rundir.start_run(job.out, settings, overwrite=job.overwrite)
    except rundir.RunExistsError as err:
        raise _exists(err) from None
    with run_dir:
        return _finish(run_dir, settings, None, mlm, kernel, progress, job.checkpoint_seconds, notes)


def resume(
    directory: str | Path,
    num_samples: int | None = None,
    *,
    progress: bool = False,
    checkpoint_seconds: float = 30.0,
    trust_code: bool = False,
    expect: Mapping[str, Any] | None = None,
    notes: Notes | None = None,
    threads: int | None = None,
    force: bool = False,
) -> SampledRun | BatchRun:
    """Continue the run or batch in a directory exactly: the draws of the run uninterrupted.

    A new cap, and a run whose ``config.json`` has no checkpoint to agree with, are held to a new
    run's limits (its size and time estimate, at most :data:`~mlm_ppl.settings.MAX_CHAINS` chains)
    unless ``force``, before anything is written; so are a batch's runs with no checkpoint yet.

    Parameters
    ----------
    directory : str or pathlib.Path
        The run or batch directory.
    num_samples : int or None, optional
        A cap higher than the run's raises it and the run goes on to it (refused for an annealed run,
        a run on Ray workers, and a batch); None: the run's own.
    progress : bool, optional
        Whether to show a progress bar.
    checkpoint_seconds : float, optional
        Seconds between two checkpoints (default 30).
    trust_code : bool, optional
        Consent to code experts in the run's record.
    expect : mapping of str to object or None, optional
        Job keys the caller expects the run to have (the command line's flags given with
        ``--resume``); a difference is refused, naming each.
    notes : callable or None, optional
        Where the job's notes go, as for :func:`run_job`.
    threads : int or None, optional
        Torch's threads while it runs (the run's draws do not depend on them: docs/performance.md,
        "Threads"); None: torch's default.
    force : bool, optional
        Run past the size limits.

    Returns
    -------
    SampledRun or BatchRun
        The run, finished (:class:`~mlm_ppl.SampledRun`), or for a batch a :class:`~mlm_ppl.BatchRun`.

    Raises
    ------
    ValueError
        Where the directory holds no run or batch to resume, its files differ from its record,
        ``expect`` differs from the run's settings or holds keys that start a new run, the new cap is
        refused, or the run is past the size limits without ``force``.
    RunLockedError
        While another process holds the run (:class:`~mlm_ppl.rundir.RunLockedError`).
    WorkersLostError
        Where Ray workers died more often than Ray restarts them
        (``mlm_ppl.inference.distributed.WorkersLostError``).

    Examples
    --------
    >>> import mlm_ppl
    >>> from mlm_ppl.testing import save_tiny, tiny_residue_bert
    >>> model = save_tiny(tiny_residue_bert("ACDE", seed=1), "model")
    >>> _ = mlm_ppl.sample("model", "AC[MASK][MASK]E", num_chains=2, num_samples=10, out="run")
    >>> run = mlm_ppl.resume("run", num_samples=20)  # continue it exactly, to a higher cap
    >>> run.tokens.shape
    torch.Size([2, 20, 7])
    """
    if threads is not None:
        check_count(threads, "threads", 1)
    with trusting_code(trust_code), torch_threads(threads, notes):
        expect = dict(expect or {})
        _check_resume_keys(expect, directory)
        if rundir.kind_of(directory) == "batch":
            if num_samples is not None:
                expect["num_samples"] = num_samples
            with campaign.resume_batch(directory) as batch:
                _check_same(expect, batch.settings, directory)
                _check_batch_left(batch, directory, force, notes)
                return _run_batch(batch, progress, checkpoint_seconds, notes)
        run_dir, settings, checkpoint = rundir.resume_run(directory)
        with run_dir:
            capped = num_samples is not None and num_samples != settings.num_samples
            wanted = rundir.check_cap(settings, checkpoint, num_samples) if capped else settings  # type: ignore[arg-type]
            _check_same(expect, wanted, directory)
            # held to a new run's limits where its record is not what a checked start wrote: a new cap (now, or
            # raised since its checkpoint's arrays were made), or a config.json without a checkpoint to agree with
            fresh = capped or checkpoint is None or checkpoint.draws.shape[1] != wanted.num_samples
            if fresh and wanted.num_chains > MAX_CHAINS and not force:
                raise ValueError(
                    f"{directory}: the run has {wanted.num_chains} chains, more than {MAX_CHAINS}; resume with "
                    "force (--force), or start a run of fewer chains"
                )
            mlm, _, kernel = campaign.build(wanted)
            if fresh:  # the steps left, and all the draws, estimated before a new cap is written
                check_size(wanted, kernel, force, notes, done=0 if checkpoint is None else checkpoint.step)
            if capped:  # a higher cap (or one lowered back to what the run can hold): the run goes on to it
                settings = rundir.raise_cap(run_dir, checkpoint, wanted)
            return _finish(run_dir, settings, checkpoint, mlm, kernel, progress, checkpoint_seconds, notes)


def _check_batch_left(batch: campaign.Batch, directory: str | Path, force: bool, notes: Notes | None) -> None:
    """The runs a batch has not checkpointed yet (not started, or cut off before their first) are
    held to a new batch's limits (at most MAX_CHAINS chains, its size and time estimate for those
    runs) unless ``force``: their size is the record's alone, which may have been edited since the
    batch's start checked it (a checkpointed run was checked against its arrays as it was opened)."""
    paths = {name: batch.directory.path / name for name, _ in batch.templates}
    left = [(n, t) for n, t in batch.templates if not (paths[n].is_dir() and rundir.checkpoint_files(paths[n]))]
    if not left:
        return
    settings = batch.settings
    if settings.num_chains > MAX_CHAINS and not force:
        raise ValueError(
            f"{directory}: the batch has {settings.num_chains} chains per template, more than {MAX_CHAINS}; "
            "resume with force (--force), or start a batch of fewer chains"
        )
    _, _, kernel = campaign.build(settings.for_template(left[0][1]))
    check_size(settings, kernel, force, notes, runs=len(left))


def _check_resume_keys(expect: Mapping[str, Any], directory: str | Path) -> None:
    """Keys that start a new run have no place beside a resume."""
    if expect.get("length_mode") is not None or expect.get("length_prior") is not None:
        raise ValueError(
            "--resume continues a run or a batch of strata with its own lengths and length prior; "
            "give --resume DIR without --length-mode and --length-prior"
        )
    out = expect.get("out")
    if out is not None and Path(out).absolute() != Path(directory).absolute():
        raise ValueError("--out and --resume name different directories; give only --resume DIR")
    if expect.get("templates") is not None:
        raise ValueError("--resume continues a batch with its own templates; give only --resume DIR")
    if expect.get("starts_from") is not None:
        raise ValueError(
            "--resume continues a run from its own checkpoint; --starts-from starts a new run (give --out)"
        )


_COMPARED = tuple(
    f.name
    for f in dataclasses.fields(RunSettings)
    if f.name not in ("kernel_options", "model_files", "constraints", "length_prior", "starts")
)
"""The settings a resume compares with what its caller expects (the rest: recorded, not given)."""


def _without_digests(record: Mapping[str, Any] | None) -> Any:
    """A constraint spec's record without its experts' ``code_digest`` (a record of an earlier version
    holds another form, or none for a classifier; the digest is checked against the code as it is read)."""
    if record is None:
        return None
    experts = [{k: v for k, v in e.items() if k != "code_digest"} for e in record.get("experts", [])]
    return {**record, "experts": experts}


def _within(path: str | Path, directory: str | Path) -> bool:
    """Whether ``path`` is ``directory`` or inside it, links resolved (a directory not made yet: neither)."""
    inner, outer = Path(path).resolve(), Path(directory).resolve()
    return inner == outer or outer in inner.parents


def _check_same(expect: Mapping[str, Any], settings: RunSettings, directory: str | Path) -> None:
    """Every key in ``expect`` must be the run's own setting: a ValueError names each that differs."""
    if expect.get("workers") is not None and settings.workers is None:
        raise ValueError(f"--resume {directory}: the run ran in one process; resume it without --ray")
    if expect.get("workers") == 0:  # --ray alone: the run's own workers
        expect = {k: v for k, v in expect.items() if k != "workers"}
    record = settings.to_dict()
    have = {**{k: v for k, v in record.items() if k != "kernel_options"}, **record["kernel_options"]}
    given = {k: v for k, v in expect.items() if k in _COMPARED and v is not None}
    given.update({k: v for k, v in (expect.get("kernel_options") or {}).items() if k in option_flags()})
    if "anneal" in given:  # as the record keeps it: 1:0.05 and 1.0:0.050 are the same schedule
        given["anneal"] = format_anneal(*parse_anneal(given["anneal"], "--anneal"))
    details = [f"--{k.replace('_', '-')} {v!r} (run has {have.get(k)!r})" for k, v in given.items() if have.get(k) != v]
    spec = expect.get("constraints")
    if spec is not None:
        spec = constraint_spec(spec)
        mine = dataclasses.replace(settings, constraints=None if spec is None else spec.to_dict()).constraints
        if _without_digests(mine) != _without_digests(settings.constraints):  # digests: checked as code is read
            details.append(f"--constraints/--forbid/--liabilities {mine!r} (run has {settings.constraints!r})")
    if details:
        raise ValueError(
            f"--resume {directory}: settings differ from the run's: {', '.join(details)}; "
            "resume with the run's own settings, or start a new run"
        )


def check_size(
    settings: RunSettings, kernel: KernelBase, force: bool, notes: Notes | None, runs: int = 1, done: int = 0
) -> None:
    """The run's estimate (``runs``: a batch's runs of these settings, one after another; ``done``:
    steps a resumed run has behind it): a run past half of the machine's memory or past a day
    refused unless ``force``; a big one noted."""
    steps = max(0, settings.total_steps - done)
    estimate = estimate_run(kernel, settings.num_chains, steps, settings.num_samples, runs)
    estimate.check(force, "force=True (--force)")
    if estimate.big:
        if notes is None:
            warnings.warn(LongRunWarning(f"estimate: {estimate}"), stacklevel=4)
        else:
            notes(f"estimate: {estimate}")


def _note_annealing(record: dict | None, notes: Notes | None) -> None:
    """The note of an annealed run (its kernel's, or its settings' :meth:`~RunSettings.annealing`
    record), once, as it starts: its draws are not samples of the target."""
    if record is not None and notes is not None:
        notes(f"note: {annealing_note(record)}")


def _finish(
    run_dir: RunDirectory,
    settings: RunSettings,
    checkpoint: Checkpoint | None,
    mlm: MaskedLM,
    kernel: KernelBase,
    progress: bool,
    checkpoint_seconds: float,
    notes: Notes | None,
) -> SampledRun:
    """Run (or finish) the chains in the locked ``run_dir`` and write its outputs."""
    _note_annealing(kernel.annealing(), notes)  # with where it stops cooling, measured here (surrogate-MH)
    if checkpoint is not None and checkpoint.step == settings.total_steps and notes is not None:
        notes(f"run in {run_dir.path} is already complete; writing its outputs")
    try:
        result, report, paths = campaign.execute(
            run_dir, settings, checkpoint, mlm, kernel, progress=progress, checkpoint_seconds=checkpoint_seconds
        )
    except WorkersLostError as err:
        kept = run_dir.path.is_dir() and bool(rundir.checkpoint_files(run_dir.path))
        raise _kept(err, run_dir.path, kept) from None
    return _sampled(result, mlm, kernel, directory=run_dir.path, report=report, written=tuple(paths))


def _sampled(result: Run, mlm: MaskedLM, kernel: KernelBase, **where: Any) -> SampledRun:
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(Run)}
    return SampledRun(**fields, mlm=mlm, constraints=campaign.constraints_of(kernel.target), **where)


def _start_batch(job: JobSpec, settings: RunSettings, progress: bool, notes: Notes | None) -> BatchRun:
    """A new batch: every template and setting checked (the model loads once), then one run per template."""
    assert job.batch is not None and job.out is not None
    settings = settings.with_model_files()
    templates = list(job.batch)
    try:  # each template's folder: absent, or the old batch's
        RunDirectory.check_new(job.out, "batch", overwrite=job.overwrite, names=[n for n, _ in templates])
        batch = campaign.start_batch(
            job.out,
            settings,
            templates,
            overwrite=job.overwrite,
            lengths=job.lengths,
            check_size=lambda kernel: check_size(settings, kernel, job.force, notes, runs=len(templates)),
        )  # checks (the size too), then creates
    except rundir.RunExistsError as err:
        raise _exists(err) from None
    with batch:
        return _run_batch(batch, progress, job.checkpoint_seconds, notes)


def _run_batch(batch: campaign.Batch, progress: bool, checkpoint_seconds: float, notes: Notes | None) -> BatchRun:
    import sys

    from tqdm.auto import tqdm

    _note_annealing(batch.settings.annealing(), notes)
    n = len(batch.templates)
    with tqdm(total=n, unit=" template", desc="templates", disable=not progress, file=sys.stderr) as bar:
        try:
            text = campaign.run_batch(batch, checkpoint_seconds=checkpoint_seconds, on_done=lambda: bar.update(1))
        except WorkersLostError as err:  # each template's run keeps its own checkpoints
            raise _kept(err, batch.directory.path, kept=True) from None
    return BatchRun(batch.directory.path, list(batch.templates), text)


def _exists(err: rundir.RunExistsError) -> ValueError:
    """A directory in the way: what to do, in Python's and the command line's words."""
    return ValueError(
        err.remedy(
            f"use --resume {err.path} (mlm_ppl.resume) to continue it, --overwrite (overwrite=True) to replace it, "
            "or another --out"
        )
    )


def _kept(err: WorkersLostError, path: Any, kept: bool) -> WorkersLostError:
    """The error with what stays of the run in ``path`` and how to continue it."""
    if kept:
        return WorkersLostError(
            f"{err}; the checkpoints are kept: continue with mlm-ppl sample --resume {path} (mlm_ppl.resume)"
        )
    return WorkersLostError(f"{err}; nothing had been checkpointed, so nothing is kept: run the command again")
