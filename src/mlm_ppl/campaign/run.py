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
    """Model, target (:func:`build_target`) and kernel of a run. Loads the model (after checking its
    files against ``settings.model_files`` when they are recorded), unless ``mlm``, the model
    already in memory, is given; a kernel that does not sample log-factors refuses constraints
    beyond ``Allowed`` rules, and the options are checked against the target. ``options``: kernel
    options no record holds (a Python ``temperature_schedule``: a run in memory)."""
    mlm = run_model(settings) if mlm is None else mlm
    target = build_target(mlm, settings, log_factor=log_factor)
    return mlm, target, make_kernel(settings.kernel, target, **settings.kernel_arguments(), **(options or {}))


def run_model(settings: RunSettings) -> MaskedLM:
    """The model of a run's settings, loaded after its files are checked against
    ``settings.model_files`` when they are recorded."""
    if settings.model_files is not None:
        check_model_files(settings.model, settings.model_files)
    return load_mlm(settings.model, device=settings.device, dtype=settings.dtype)


def build_target(mlm: MaskedLM, settings: RunSettings, log_factor: Callable[[Tensor], Tensor] | None = None) -> Target:
    """The target of a run, the one construction for every case: the model's distribution over
    ``settings.template`` (or a whole sequence of ``settings.length`` tokens), or over every
    length of a variable gap ``MASK{a,b}`` (a :class:`~mlm_ppl.models.gap_target.GapTarget` with
    ``settings.length_prior``), constrained by ``settings.constraints`` when there are any
    (:meth:`ConstraintSpec.constrain <mlm_ppl.models.constraints.ConstraintSpec.constrain>`), or
    tilted by ``log_factor`` (a Python function ``tokens (N, L) -> (N,)`` of extra log-density
    terms, which no record holds).

    The spec is bound to the template and its experts are evaluated once on the template filled
    with each free position's first allowed token (each length's, for a gap), so that an unknown
    token, a position past the template, a rule that leaves a position no token, or an expert
    that raises or returns no finite number is a ValueError (starting ``constraints:``) before
    any work."""
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
    """For settings with ``workers``: connect to Ray now (the cluster at ``RAY_ADDRESS``, or a local
    instance), before the run's directory is made, so that a cluster that does not answer leaves
    nothing behind. The local instance gets the CPUs the run (or, ``batch``, the batch) asks for."""
    if settings.workers is None:
        return
    groups = settings.workers if batch else len(split_chains(settings.num_chains, settings.workers))
    connect(num_cpus=max(groups, os.cpu_count() or 1))


def starts_record(settings: RunSettings, directory: str) -> RunSettings:
    """``settings`` of a new run whose chains start where the chains of the run in ``directory`` are
    (:func:`~mlm_ppl.rundir.chain_states`), with ``starts`` recorded: that run's directory and the
    sha256 of its states. Checked before any work: the earlier run must be of the same model (its
    files too), template or length, and number of chains; a ValueError says what differs."""
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
    """What a new run's chains start from: ``settings.init`` (a fill of the template), or with
    ``settings.starts`` the states of the earlier run it names, which must still be those it
    recorded (their sha256)."""
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
    """The kernel of a run (what each Ray worker builds for itself)."""
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
    """Run (or finish) the chains of ``settings`` (in this process, or on Ray workers when
    ``settings.workers`` is set): ``(run, summary, paths written)``.

    In the locked ``run_dir``: checkpointed as it goes, and its outputs written at the end. A
    failure before the first checkpoint removes what the run wrote; Ctrl-C propagates after the
    checkpoint is saved. Without a directory (``run_dir`` None) the run lives in memory: no
    checkpoint, no outputs, no summary (None), and the Ray workers get ``kernel`` itself (its model
    need not be on disk). A new run starts from :func:`start_states`, or from the tokens ``init``
    (a run in memory only).
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
    """The draws of a run directory's checkpoint so far (a run still going, or cut off), with the
    attributes its finished run would have (:func:`~mlm_ppl.inference.runner.checkpoint_run`)."""
    run = checkpoint_run(kernel, checkpoint, warmup_steps=settings.warmup_steps, thin=settings.thin, seed=settings.seed)
    run.attrs.update(model=mlm.name, kernel=settings.kernel)
    record_settings(run, settings)
    return run


def _same(kernel: KernelBase) -> KernelBase:
    """The kernel itself (what each Ray worker of a run in memory unpickles)."""
    return kernel


def constraints_of(target: Any) -> Any:
    """The constraint spec a run's target was built with (bound to it: a ``BoundConstraints``, or a
    variable gap's ``GapConstraints``), or None."""
    return target.constraints if isinstance(target, (ConstraintTarget, GapTarget)) else None
