"""One sampling run from its :class:`~mlm_ppl.settings.RunSettings`: the model, target and kernel it
builds, and its execution in a run directory (in this process or on Ray workers)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable
from typing import Any

from torch import Tensor

from .. import rundir
from ..diagnostics import stop_when_converged
from ..inference.distributed import connect, run_chains_ray, split_chains
from ..inference.registry import make_kernel
from ..inference.runner import Checkpoint, Run, checkpoint_run, run_chains
from ..inference.spec import KernelBase
from ..models.constraints import ConstraintTarget
from ..models.distribution import MaskedLMDistribution
from ..models.gap_target import GapTarget
from ..models.gaps import find_gap, has_variable_gap
from ..models.loading import check_model_files, load_mlm
from ..models.masked_lm import MaskedLM
from ..models.target import ConstrainedTarget, Target
from ..rundir import RunDirectory
from ..settings import STOP_EVERY, RunSettings


def build(
    settings: RunSettings,
    mlm: MaskedLM | None = None,
    log_factor: Callable[[Tensor], Tensor] | None = None,
    options: dict[str, Any] | None = None,
) -> tuple[MaskedLM, Target, KernelBase]:
    """Build the model, target and kernel of a run.

    Loads the model (after checking its files against ``settings.model_files`` when they are
    recorded), unless ``mlm``, the model already in memory, is given. A kernel that does not sample
    log-factors refuses constraints beyond ``Allowed`` rules, and the options are checked against
    the target.

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    mlm : MaskedLM or None, optional
        The model already in memory (None: loaded by :func:`run_model`).
    log_factor : callable or None, optional
        A Python function ``tokens (N, L) -> (N,)`` of extra log-density terms (a run in memory
        only; :func:`build_target`).
    options : dict of str to object or None, optional
        Kernel options no record holds (a Python ``temperature_schedule``: a run in memory).

    Returns
    -------
    mlm : MaskedLM
        The model.
    target : Target
        The target (:func:`build_target`).
    kernel : KernelBase
        The kernel on the target (:func:`~mlm_ppl.inference.make_kernel`).

    Raises
    ------
    ValueError, TypeError
        Where the model's files differ from the recorded ones, the model does not load, the target
        cannot be built (:func:`build_target`) or the kernel refuses its options or the target.

    Examples
    --------
    >>> from mlm_ppl.campaign import build
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> settings = RunSettings(template="AC[MASK][MASK]E", num_chains=2, num_samples=5)
    >>> mlm, target, kernel = build(settings, tiny_residue_bert("ACDE", seed=1))
    >>> type(kernel).__name__, int(target.num_free)
    ('MetropolisHastings', 2)
    """
    mlm = run_model(settings) if mlm is None else mlm
    target = build_target(mlm, settings, log_factor=log_factor)
    return mlm, target, make_kernel(settings.kernel, target, **settings.kernel_arguments(), **(options or {}))


def run_model(settings: RunSettings) -> MaskedLM:
    """Load the model of a run's settings, its files checked first against ``settings.model_files``.

    Parameters
    ----------
    settings : RunSettings
        The run's settings: ``model``, ``device``, ``dtype`` and, when recorded, ``model_files``.

    Returns
    -------
    MaskedLM
        The model (:func:`~mlm_ppl.load_mlm`).

    Raises
    ------
    ValueError
        Where a file of the model is not the one recorded (changed, gone or new), or the model does
        not load (and the other errors of :func:`~mlm_ppl.load_mlm`).
    """
    if settings.model_files is not None:
        check_model_files(settings.model, settings.model_files)
    return load_mlm(settings.model, device=settings.device, dtype=settings.dtype)


def build_target(mlm: MaskedLM, settings: RunSettings, log_factor: Callable[[Tensor], Tensor] | None = None) -> Target:
    """Build the target of a run: the one construction for every case.

    The model's distribution over ``settings.template`` (or a whole sequence of ``settings.length``
    tokens), or over every length of a variable gap ``MASK{a,b}`` (a ``GapTarget`` with
    ``settings.length_prior``), constrained by ``settings.constraints`` when there are any
    (:meth:`ConstraintSpec.constrain <mlm_ppl.ConstraintSpec.constrain>`), or tilted by
    ``log_factor``.

    The spec is bound to the template and its experts are evaluated once on the template filled with
    each free position's first allowed token (each length's, for a gap), so that an unknown token, a
    position past the template, a rule that leaves a position no token, or an expert that raises or
    returns no finite number is a ValueError (starting ``constraints:``) before any work.

    Parameters
    ----------
    mlm : MaskedLM
        The model.
    settings : RunSettings
        The run's settings (template or length, energy, temperature, constraints, length prior).
    log_factor : callable or None, optional
        A Python function ``tokens (N, L) -> (N,)`` of extra log-density terms, which no record
        holds; not with constraints, nor with a variable gap.

    Returns
    -------
    Target
        A :class:`~mlm_ppl.MaskedLMDistribution`, a :class:`~mlm_ppl.models.ConstrainedTarget` (with
        ``log_factor``), a :class:`~mlm_ppl.models.ConstraintTarget` (with constraints) or a
        ``GapTarget`` (a variable gap).

    Raises
    ------
    ValueError
        Where both constraints and ``log_factor`` are given, ``log_factor`` comes with a variable gap,
        the gap follows another token than the model's mask token, or the constraints do not fit the
        template (the message starts ``constraints:``).

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec
    >>> from mlm_ppl.campaign import build_target
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> type(build_target(mlm, RunSettings(template="AC[MASK][MASK]E"))).__name__
    'MaskedLMDistribution'
    >>> spec = ConstraintSpec(liabilities=True)
    >>> settings = RunSettings(template="AC[MASK][MASK]E", constraints=spec)
    >>> type(build_target(mlm, settings)).__name__
    'ConstraintTarget'
    """
    template = settings.template
    if template is None:
        mask = mlm.vocab[mlm.mask_id]
        length = int(settings.length or 0)
        template = (mask * length) if mlm.residue_level else " ".join([mask] * length)
    spec = settings.constraint_spec()
    if spec is not None and log_factor is not None:
        raise ValueError(
            "give constraints or log_factor, not both: write the log-factor as an expert of the constraint spec "
            "(an [[experts]] entry, kind = 'module:function')"
        )
    if has_variable_gap(template):  # every length in one target (settings: a kernel that moves lengths)
        if log_factor is not None:
            raise ValueError(
                "log_factor with a variable gap: give the extra terms as an expert of a constraint spec "
                "(constraints=; each length's target carries them), or sample each length on its own"
            )
        gap, mask = find_gap(template), mlm.vocab[mlm.mask_id]
        if gap is None or gap.mask != mask:
            raise ValueError(
                f"template: its variable gap follows no {mask}, model {mlm.name!r}'s mask token; write {mask}{{a,b}}"
            )
        prior = settings.length_prior_of(gap)
        gapped = GapTarget(mlm, gap, prior, energy=settings.energy, temperature=settings.temperature, constraints=spec)
        for L in gapped.lengths if spec is not None else ():
            _dry_run(gapped.target(L))  # type: ignore[arg-type]  # each length's experts, once
        return gapped
    dist = MaskedLMDistribution(mlm, template, energy=settings.energy, temperature=settings.temperature)
    if log_factor is not None:
        return ConstrainedTarget(dist, log_factor)
    if spec is None:
        return dist
    try:
        target = spec.constrain(dist)
    except (TypeError, ValueError) as err:
        raise ValueError(f"constraints: {err}") from None
    _dry_run(target)
    return target


def _dry_run(target: ConstraintTarget) -> None:
    """Every expert of ``target``'s spec evaluated once on the template filled with each free
    position's first allowed token; a ValueError names the expert that fails."""
    bound = target.constraints
    if not bound.spec.all_experts:
        return
    state = target.template.cpu().clone()
    state[bound.free_positions] = bound.allowed.long().argmax(-1)
    try:
        bound.expert_values(state[None])
    except Exception as err:  # any failure of an expert (user code) is the spec's error
        message = " ".join(str(err).split())
        if not message.startswith("expert "):
            message = f"{type(err).__name__}: {message}"
        raise ValueError(
            f"constraints: the experts fail on the template filled with the first allowed tokens "
            f"({bound.codec.decode(state[None])[0]!r}): {message}"
        ) from None


def connect_workers(settings: RunSettings, *, batch: bool = False) -> None:
    """Connect to Ray now, for settings with ``workers``, before the run's directory is made.

    The cluster at ``RAY_ADDRESS``, or a local instance; connecting first means a cluster that does
    not answer leaves nothing behind. The local instance gets the CPUs the run (or, ``batch``, the
    batch) asks for, and at least the machine's cores. Settings without ``workers``: nothing is
    done.

    Parameters
    ----------
    settings : RunSettings
        The run's (or the batch's) settings.
    batch : bool, optional
        Whether the settings are a batch's: a local instance gets ``workers`` CPUs (one task each)
        rather than one per group of the run's chains.

    Raises
    ------
    ModuleNotFoundError
        Where Ray is not installed (the message says how to install it).
    ValueError
        Where ``RAY_ADDRESS`` is not an address, or the cluster there does not answer.
    """
    if settings.workers is None:
        return
    groups = settings.workers if batch else len(split_chains(settings.num_chains, settings.workers))
    connect(num_cpus=max(groups, os.cpu_count() or 1))


def starts_record(settings: RunSettings, directory: str) -> RunSettings:
    """Record that a new run's chains start where the chains of an earlier run are.

    The earlier run's states are read with :func:`~mlm_ppl.rundir.chain_states`. Checked before any
    work: the earlier run must be of the same model (its files too), template or length, and number
    of chains.

    Parameters
    ----------
    settings : RunSettings
        The new run's settings.
    directory : str
        The earlier run's directory.

    Returns
    -------
    RunSettings
        ``settings`` with ``starts`` recorded: that run's directory and the sha256 of its states.

    Raises
    ------
    ValueError
        Where the earlier run is not of this model and template, has another number of chains, or
        has no states to start from; the message says what differs.
    """
    tokens, earlier = rundir.chain_states(directory)
    differ = [
        f"{name} ({getattr(settings, name)!r} here, {getattr(earlier, name)!r} there)"
        for name in ("model", "template", "length")
        if getattr(settings, name) != getattr(earlier, name)
    ]
    if settings.model_files is not None and earlier.model_files not in (None, settings.model_files):
        differ.append("model_files (the model's files changed since that run)")
    if differ:
        raise ValueError(
            f"starts: the run in {directory!r} is not of this model and template: {', '.join(differ)}; "
            "start from a run of the same model and template"
        )
    if tokens.shape[0] != settings.num_chains:
        raise ValueError(
            f"starts: the run in {directory!r} has {tokens.shape[0]} chains and this run {settings.num_chains}; "
            f"give --num-chains {tokens.shape[0]}"
        )
    return dataclasses.replace(settings, starts={"run": str(directory), "sha256": rundir.states_digest(tokens)})


def start_states(settings: RunSettings) -> Any:
    """What a new run's chains start from.

    Parameters
    ----------
    settings : RunSettings
        The run's settings: ``init``, or ``starts``.

    Returns
    -------
    str or torch.Tensor
        ``settings.init`` (a fill of the template), or with ``settings.starts`` the ``(C, L)`` states
        of the earlier run it names.

    Raises
    ------
    ValueError
        Where the earlier run's states are no longer those ``starts`` recorded (their sha256): that
        run went on, or its directory was replaced.
    """
    if settings.starts is None:
        return settings.init
    directory = settings.starts["run"]
    tokens, _ = rundir.chain_states(directory)
    if rundir.states_digest(tokens) != settings.starts["sha256"]:
        raise ValueError(
            f"starts: the chains of the run in {directory!r} are no longer where this run was to start from "
            "(that run went on, or its directory was replaced); start a new run from it"
        )
    return tokens


def build_kernel(settings: RunSettings) -> KernelBase:
    """Build the kernel of a run (what each Ray worker builds for itself).

    Parameters
    ----------
    settings : RunSettings
        The run's settings.

    Returns
    -------
    KernelBase
        The kernel, on the target of a model loaded here (:func:`build`).
    """
    return build(settings)[2]


def execute(
    run_dir: RunDirectory | None,
    settings: RunSettings,
    checkpoint: Checkpoint | None,
    mlm: MaskedLM,
    kernel: KernelBase,
    *,
    progress: bool,
    checkpoint_seconds: float = 30.0,
    init: Tensor | None = None,
) -> tuple[Run, Any, list[str]]:
    """Run (or finish) the chains of a run, in this process or on Ray workers.

    The chains run on Ray workers when ``settings.workers`` is set. In the locked ``run_dir``: the
    run is checkpointed as it goes, and its outputs are written at the end. A failure before the
    first checkpoint removes what the run wrote; Ctrl-C propagates after the checkpoint is saved.
    Without a directory (``run_dir`` None) the run lives in memory: no checkpoint, no outputs, no
    summary, and the Ray workers get ``kernel`` itself (its model need not be on disk).

    Parameters
    ----------
    run_dir : RunDirectory or None
        The run's locked directory (:class:`~mlm_ppl.rundir.RunDirectory`), or None for a run in
        memory.
    settings : RunSettings
        The run's settings.
    checkpoint : Checkpoint or None
        The checkpoint to resume from (:class:`~mlm_ppl.inference.Checkpoint`), or None for a new
        run, which starts from :func:`start_states`.
    mlm : MaskedLM
        The model.
    kernel : KernelBase
        The kernel (:func:`build`).
    progress : bool
        Whether to show a progress bar.
    checkpoint_seconds : float, optional
        Seconds between two checkpoints (default 30).
    init : torch.Tensor or None, optional
        ``(C, L)`` tokens a new run starts from instead (a run in memory only).

    Returns
    -------
    run : Run
        The draws (:class:`~mlm_ppl.Run`).
    summary : Summary or None
        The run's summary (:class:`~mlm_ppl.diagnostics.Summary`); None for a run in memory.
    paths : list of str
        The files its outputs were written to (empty for a run in memory).

    Examples
    --------
    >>> from mlm_ppl.campaign import build, execute
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> settings = RunSettings(template="AC[MASK][MASK]E", num_chains=2, num_samples=5)
    >>> mlm, target, kernel = build(settings, tiny_residue_bert("ACDE", seed=1))
    >>> run, summary, paths = execute(None, settings, None, mlm, kernel, progress=False)
    >>> run.tokens.shape, summary, paths
    (torch.Size([2, 5, 7]), None, [])
    """
    record = settings.to_dict()
    options: dict[str, Any] = dict(
        warmup_steps=settings.warmup_steps,
        thin=settings.thin,
        seed=settings.seed,
        init=settings.init,
        progress=progress,
        checkpoint_seconds=checkpoint_seconds,
    )
    try:
        if checkpoint is None:  # a new run (or one stopped before its first checkpoint): its starts
            options["init"] = start_states(settings) if init is None else init
        if settings.workers is not None:
            groups = len(split_chains(settings.num_chains, settings.workers))
            own = functools.partial(_same, kernel)  # in memory: the kernel itself, its model need not be on disk
            make = functools.partial(build_kernel, settings) if run_dir is not None else own
            result = run_chains_ray(
                make,
                settings.num_chains,
                settings.num_samples,
                workers=settings.workers,
                checkpoints=None if run_dir is None else rundir.group_checkpoints(run_dir, record, groups),
                device=settings.device if run_dir is not None else str(mlm.device),
                **options,
            )
        else:
            stop = stop_when_converged(mlm=mlm, constraints=constraints_of(kernel.target))
            result = run_chains(
                kernel,
                settings.num_chains,
                settings.num_samples,
                on_checkpoint=None if run_dir is None else lambda cp: rundir.save_checkpoint(run_dir, cp, record),
                resume=checkpoint,
                stop=stop if settings.until_converged else None,
                stop_every=STOP_EVERY,
                **options,
            )
    except Exception:
        if run_dir is not None and not rundir.checkpoint_files(run_dir.path):  # leave no half-made directory
            run_dir.discard()
        raise
    result.attrs.update(model=mlm.name, kernel=settings.kernel)
    if run_dir is None:  # where the chains ran is no part of a run in memory (Ray's equals this process's)
        return result, None, []
    record_settings(result, settings)
    report, paths = rundir.write_outputs(run_dir, result, mlm, constraints_of(kernel.target))
    return result, report, paths


def record_settings(run: Run, settings: RunSettings) -> None:
    """What a run directory's run records of its settings: the template text and the whole record
    (``config``, read back by ``mlm-ppl designs``)."""
    run.attrs.update(template_text=settings.template or "", config=json.dumps(settings.to_dict(), sort_keys=True))


def run_so_far(settings: RunSettings, checkpoint: Checkpoint, mlm: MaskedLM, kernel: KernelBase) -> Run:
    """The draws a run directory's checkpoint holds so far (a run still going, or cut off).

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    checkpoint : Checkpoint
        Its checkpoint.
    mlm : MaskedLM
        The model.
    kernel : KernelBase
        The run's kernel.

    Returns
    -------
    Run
        The draws so far, with the attributes its finished run would have (model, kernel, template
        text and the settings' record; ``checkpoint_run``).
    """
    run = checkpoint_run(kernel, checkpoint, warmup_steps=settings.warmup_steps, thin=settings.thin, seed=settings.seed)
    run.attrs.update(model=mlm.name, kernel=settings.kernel)
    record_settings(run, settings)
    return run


def _same(kernel: KernelBase) -> KernelBase:
    """The kernel itself (what each Ray worker of a run in memory unpickles)."""
    return kernel


def constraints_of(target: Any) -> Any:
    """The constraint spec a run's target was built with, bound to it, or None.

    Parameters
    ----------
    target : Target
        A run's target (:func:`build_target`).

    Returns
    -------
    BoundConstraints or None
        The spec bound to the target (for a variable gap a ``GapConstraints``, which answers the
        same questions length by length), or None for a target without constraints.

    Examples
    --------
    >>> from mlm_ppl.campaign import build_target, constraints_of
    >>> from mlm_ppl.settings import RunSettings
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = build_target(tiny_residue_bert("ACDE", seed=1), RunSettings(template="AC[MASK]E"))
    >>> constraints_of(target) is None
    True
    """
    return target.constraints if isinstance(target, (ConstraintTarget, GapTarget)) else None
