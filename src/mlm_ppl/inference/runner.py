"""Batched chains: run any kernel for C chains at once and collect draws and per-draw stats.

:func:`run_chains` drives a kernel (:class:`~mlm_ppl.inference.base.Kernel`) step by step,
keeps every ``thin``-th state after warm-up with its statistics (:func:`step_stats`), shows
progress, and checkpoints so that an interrupted run resumes exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .._checks import check_count, check_interval, check_seed
from ..models.gap_target import GapTarget
from ..models.target import Target
from .base import Kernel, StepInfo, initial_tokens
from .spec import STAT_NAMES
from .streams import ChainStreams

__all__ = [
    "Run",
    "Checkpoint",
    "run_chains",
    "step_stats",
    "target_attrs",
    "kernel_attrs",
    "OWN_LAW",
    "state_consistent_lp",
    "run_attrs",
    "checkpoint_run",
    "STAT_NAMES",
]


@dataclass
class Run:
    """Draws of C chains: their tokens, per-draw statistics, attributes and starting states.

    What :func:`~mlm_ppl.run_chains` returns (and :func:`~mlm_ppl.inference.run_from_mcmc` /
    :func:`~mlm_ppl.inference.run_from_gibbs` build from a Pyro run);
    :func:`~mlm_ppl.to_inference_data` makes InferenceData of it.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, D, L)``, long: the token ids of the draws (after warm-up and thinning).
    stats : dict of str to torch.Tensor
        Per-draw statistics (:func:`~mlm_ppl.inference.step_stats`), each of shape ``(C, D)``:
        ``lp`` (log target density), ``is_accepted``, ``acceptance_rate``, ``n_changed``,
        ``n_moves``, and the other fields of the kernel's Info (``kernel.stat_names()``).
    attrs : dict, optional
        Kernel, energy, temperature, template, seed, warm-up ... for the record; ``annealing``
        (``mlm_ppl.inference.annealing.annealing_record``) when the kernel anneals, and
        ``stationary_law`` (``"own"``, ``OWN_LAW``) when it has no guaranteed target
        (``kernel_attrs``), so the summary says the draws are not samples of the target. Empty
        by default.
    initial : torch.Tensor or None, optional
        Shape ``(C, L)``: the chains' starting states (after the template fill-in, before
        warm-up). None (the default) where unknown.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl import Run
    >>> run = Run(torch.zeros((2, 5, 7), dtype=torch.long), {"lp": torch.zeros(2, 5)})
    >>> run.num_chains, run.num_draws
    (2, 5)
    """

    tokens: Tensor
    stats: dict[str, Tensor]
    attrs: dict[str, Any] = field(default_factory=dict)
    initial: Tensor | None = None

    @property
    def num_chains(self) -> int:
        """The number of chains ``C``."""
        return int(self.tokens.shape[0])

    @property
    def num_draws(self) -> int:
        """The number of draws ``D`` of each chain."""
        return int(self.tokens.shape[1])


def state_consistent_lp(tokens: Tensor, lp: Tensor) -> Tensor:
    """``lp`` ``(C, D)`` with every draw of a state carrying the value of that state's first draw
    (chains in order, draws in order within a chain).

    The log density is a function of the state, but a float32 forward pass gives a state's
    energy to within about 1e-6 nats only, depending on the batch it was evaluated in and the
    thread count (MKL's sgemm splits small products differently). Draws of one state then carry
    values that differ in the last bits, and rank-based diagnostics (R-hat, bulk and tail ESS)
    break those would-be ties at random: ESS 88.7 against 84.4 for the same tokens on Ray and in
    one process. With one value per state the ranks depend on the tokens alone.
    """
    flat = tokens.reshape(-1, tokens.shape[-1])
    _, which = torch.unique(flat, dim=0, return_inverse=True)  # (C*D,) the state of each draw
    order = torch.arange(flat.shape[0])
    first = torch.full((int(which.max()) + 1,), flat.shape[0], dtype=torch.long)
    first = first.scatter_reduce(0, which, order, reduce="amin")  # each state's first draw
    return lp.reshape(-1)[first[which]].reshape(lp.shape)


def target_attrs(target: Target) -> dict[str, Any]:
    """What a run records about its target: energy, temperature, template, free positions; for a
    variable gap (:class:`~mlm_ppl.models.gap_target.GapTarget`) also its length prior, the padded
    states' gap positions and the pad token."""
    attrs = dict(
        energy=target.energy_name,
        temperature=target.temperature,
        template=target.template.tolist(),
        free_positions=target.free_positions.tolist(),
    )
    if isinstance(target, GapTarget):
        attrs.update(target.record)
    return attrs


OWN_LAW = "own"
"""A run's ``stationary_law`` attribute when its kernel declares no guaranteed target
(``capabilities.samples_target`` false): its chains converge to a law of the kernel's own."""


def kernel_attrs(kernel: Kernel) -> dict[str, Any]:
    """What a run records of how its kernel's draws relate to the target, so its summary says
    so: ``{"annealing": record}`` (:meth:`~mlm_ppl.inference.base.Kernel.annealing`) when the
    kernel anneals (a mode seeker), ``{"stationary_law": "own"}`` when the kernel declares no
    guaranteed target (``capabilities.samples_target``); ``{}`` when it samples its target. One
    place for :func:`run_chains`, ``MLMKernel``'s and ``MLMGibbs``'s runs."""
    record = kernel.annealing()
    attrs: dict[str, Any] = {} if record is None else {"annealing": record}
    capabilities = getattr(kernel, "capabilities", None)
    if capabilities is not None and not capabilities.samples_target:
        attrs["stationary_law"] = OWN_LAW
    return attrs


def run_attrs(kernel: Kernel, num_chains: int, num_samples: int, *, warmup_steps: int, thin: int, seed: int) -> dict:
    """The attributes of a run of ``kernel`` (:attr:`Run.attrs`): its kernel, sizes, seed, target
    (:func:`target_attrs`) and how its draws relate to the target (:func:`kernel_attrs`)."""
    return dict(
        kernel=type(kernel).__name__,
        num_chains=num_chains,
        num_samples=num_samples,
        warmup_steps=warmup_steps,
        thin=thin,
        seed=seed,
        **target_attrs(kernel.target),
        **kernel_attrs(kernel),
    )


def checkpoint_run(kernel: Kernel, checkpoint: Checkpoint, *, warmup_steps: int, thin: int, seed: int) -> Run:
    """The draws a checkpoint of a run of ``kernel`` holds so far, as :func:`run_chains` would return
    them had the run stopped there (its ``num_samples`` the draws taken; ``lp`` one value per state)."""
    stats = {k: v.clone() for k, v in checkpoint.stats.items()}
    n = int(stats["lp"].shape[1])
    draws = checkpoint.draws[:, :n].clone()
    stats["lp"] = state_consistent_lp(draws, stats["lp"])
    attrs = run_attrs(kernel, int(draws.shape[0]), n, warmup_steps=warmup_steps, thin=thin, seed=seed)
    return Run(draws, stats, attrs, checkpoint.initial.clone())


def step_stats(info: StepInfo) -> dict[str, Tensor]:
    """The per-draw statistics of one step's info, each of shape ``(C,)``.

    :data:`~mlm_ppl.inference.STAT_NAMES` first, then every other field of the info
    (``Kernel.stat_names()`` in order).

    A kernel without an accept step (pseudo-Gibbs, mask-predict) always takes its move: its
    draws are recorded as accepted with acceptance probability 1, as for a Gibbs step in
    ArviZ's and Pyro's convention, so the novel-transition rate counts the steps that changed
    the state. ``n_moves`` counts the accepted single-site changes along the step's path; a
    kernel that does not report it (every kernel but surrogate-MH) made ``n_changed`` of them.

    Parameters
    ----------
    info : StepInfo
        A kernel's Info of one step of C chains (a NamedTuple with at least ``lp`` and
        ``n_changed``, :class:`~mlm_ppl.inference.StepInfo`).

    Returns
    -------
    dict of str to torch.Tensor
        ``lp``, ``is_accepted``, ``acceptance_rate``, ``n_changed``, ``n_moves``, then the
        info's other fields, each of shape ``(C,)``.

    Examples
    --------
    An info without an accept step counts every step as accepted:

    >>> from collections import namedtuple
    >>> import torch
    >>> from mlm_ppl.inference import step_stats
    >>> Info = namedtuple("Info", ["lp", "n_changed"])
    >>> stats = step_stats(Info(lp=torch.tensor([-1.0, -2.0]), n_changed=torch.tensor([1, 0])))
    >>> list(stats)
    ['lp', 'is_accepted', 'acceptance_rate', 'n_changed', 'n_moves']
    >>> stats["is_accepted"]
    tensor([True, True])
    """
    n_changed = info.n_changed
    is_accepted = getattr(info, "is_accepted", None)
    if is_accepted is None:
        is_accepted = torch.ones(n_changed.shape, dtype=torch.bool)
    acceptance_rate = getattr(info, "acceptance_rate", None)
    if acceptance_rate is None:
        acceptance_rate = torch.ones(n_changed.shape)
    n_moves = getattr(info, "n_moves", None)
    out = {
        "lp": info.lp,
        "is_accepted": is_accepted,
        "acceptance_rate": acceptance_rate,
        "n_changed": n_changed,
        "n_moves": n_changed if n_moves is None else n_moves,
    }
    out.update({k: v for k, v in info._asdict().items() if k not in out})  # type: ignore[attr-defined]
    return out


@dataclass
class Checkpoint:
    """Everything needed to continue a run exactly: steps done, kernel state, random streams, draws so far.

    :func:`run_chains` hands one to its ``on_checkpoint`` callback and continues from one given as
    ``resume``.

    Parameters
    ----------
    step : int
        Steps done (warm-up included).
    state : object
        The kernel's state after ``step`` steps (a NamedTuple of C chains with ``tokens``).
    streams : torch.Tensor
        Shape ``(C, S)``: every chain's random stream
        (:meth:`ChainStreams.get_state <mlm_ppl.inference.ChainStreams.get_state>`).
    draws : torch.Tensor
        Shape ``(C, D, L)``: the draws, filled up to the draws taken.
    stats : dict of str to torch.Tensor
        The per-draw statistics of the ``d`` draws taken, each of shape ``(C, d)``.
    initial : torch.Tensor
        Shape ``(C, L)``: the chains' starting states.

    Examples
    --------
    A run resumed from its last checkpoint gives the same draws:

    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]"))
    >>> saved = []
    >>> run = run_chains(kernel, 2, 10, seed=0, on_checkpoint=saved.append)
    >>> saved[-1].step, saved[-1].draws.shape
    (10, torch.Size([2, 10, 7]))
    >>> run_chains(kernel, 2, 10, seed=0, resume=saved[-1]).tokens.equal(run.tokens)
    True
    """

    step: int
    state: Any
    streams: Tensor
    draws: Tensor  # (C, D, L), filled up to the draws taken
    stats: dict[str, Tensor]  # (C, d) for the d draws taken
    initial: Tensor


def _check_checkpoint(cp: Checkpoint, C: int, D: int, L: int, W: int, thin: int) -> None:
    """A ValueError unless ``cp`` can continue this run: shapes, step, draws taken and RNG state agree.
    A checkpoint of the same run with a lower cap (fewer draws; the cap raised since) continues it."""
    kept = cp.draws.shape[1] if cp.draws.dim() == 3 and 0 < cp.draws.shape[1] < D else D
    total = W + kept * thin
    if not isinstance(cp.step, int) or not 0 <= cp.step <= total:
        raise ValueError(f"checkpoint is at step {cp.step!r}; this run has steps 0 to {total}")
    taken = min(kept, max(0, (cp.step - W) // thin))
    shapes = {"draws": (cp.draws, (C, kept, L)), "initial": (cp.initial, (C, L))}
    shapes["state tokens"] = (cp.state.tokens, (C, L))
    shapes.update({f"statistic {k}": (v, (C, taken)) for k, v in cp.stats.items()})
    for what, (tensor, shape) in shapes.items():
        if tuple(tensor.shape) != shape:
            raise ValueError(f"checkpoint holds {what} of shape {tuple(tensor.shape)}; this run needs {shape}")
    try:
        ChainStreams(0, C).set_state(cp.streams)  # one state per chain, each a valid generator state
    except (RuntimeError, TypeError, ValueError) as err:
        raise ValueError(f"checkpoint's random-number state is damaged ({err})") from None


def run_chains(
    kernel: Kernel,
    num_chains: int,
    num_samples: int,
    *,
    warmup_steps: int = 0,
    thin: int = 1,
    seed: int = 0,
    init: str | Tensor = "sample",
    progress: bool = False,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
    checkpoint_seconds: float = 30.0,
    resume: Checkpoint | None = None,
    chains: Sequence[int] | None = None,
    on_step: Callable[[int], None] | None = None,
    stop: Callable[[Run], str | None] | None = None,
    stop_every: int = 10,
) -> Run:
    """Advance ``num_chains`` chains of ``kernel`` together and keep every ``thin``-th step.

    Parameters
    ----------
    kernel : KernelBase
        :class:`~mlm_ppl.MetropolisHastings`, :class:`~mlm_ppl.PseudoGibbs`,
        :class:`~mlm_ppl.MaskPredict` or any kernel with the same contract
        (:class:`~mlm_ppl.inference.KernelBase`).
    num_chains : int
        Chains ``C``, advanced together in one batched forward pass per step.
    num_samples : int
        Draws ``D`` kept per chain.
    warmup_steps : int, optional
        Steps discarded before the first draw (default 0). The template fill-in of ``init`` comes
        before them and is never a draw.
    thin : int, optional
        Keep every ``thin``-th step after warm-up (default 1: every step), so the run takes
        ``warmup_steps + num_samples * thin`` steps.
    seed : int, optional
        Seeds every chain's random stream (default 0): chain ``c`` draws from a stream that
        depends only on ``(seed, c)`` (:class:`~mlm_ppl.inference.ChainStreams`), so its draws do
        not depend on how many chains run beside it. Same seed, same device, same chains.
    init : {"sample", "greedy", "uniform"} or torch.Tensor, optional
        How the free positions are first filled (:func:`~mlm_ppl.inference.fill_template`;
        default ``"sample"``), or starting tokens of shape ``(C, L)``. Mask-predict starts from
        the masked template whatever it is given.
    progress : bool, optional
        Show a progress bar with draws/s and acceptance so far (default False).
    on_checkpoint : callable or None, optional
        Called with a :class:`~mlm_ppl.inference.Checkpoint` at most every
        ``checkpoint_seconds``, after the last step, and when the run is interrupted (then
        ``KeyboardInterrupt`` propagates).
    checkpoint_seconds : float, optional
        Seconds between two calls of ``on_checkpoint``: a finite number >= 0 (default 30; 0:
        after every step).
    resume : Checkpoint or None, optional
        Continue from a checkpoint of the same run: the result equals the uninterrupted run. A
        checkpoint of the same run with a lower ``num_samples`` (a cap raised since, e.g. of a run
        that did not converge) continues it to the new cap, with the draws of an uninterrupted run
        of that many; not for a kernel that anneals (its schedule spans the run's steps).
    chains : sequence of int or None, optional
        The indices of these chains in a bigger run (default ``0 .. num_chains-1``): a group of
        chains ``[4, 5]`` run here gives exactly chains 4 and 5 of the whole run.
    on_step : callable or None, optional
        Called with the number of steps done after each step (progress shown elsewhere).
    stop : callable or None, optional
        A stopping rule (e.g. :func:`~mlm_ppl.diagnostics.stop_when_converged`): called with the
        draws so far (a :class:`~mlm_ppl.Run` of ``n`` draws) whenever ``n < num_samples`` is a
        positive multiple of ``stop_every``; when it returns a reason (a string), the run ends
        there with those ``n`` draws, ``attrs["stopped"]`` holding the reason. Its schedule
        depends on draws, never on time, so a resumed run stops where the uninterrupted one did
        (a resume from a checkpoint taken at such ``n`` asks it again first). A rule that looks
        at the draws biases what they estimate a little (the run ends where the estimates
        happened to look good); a fixed number of draws does not.
    stop_every : int, optional
        Draws between two calls of ``stop`` (default 10).

    Returns
    -------
    Run
        The draws ``(C, D, L)`` (fewer draws where ``stop`` ended the run), their per-draw
        statistics (:func:`~mlm_ppl.inference.step_stats`; ``lp`` one value per state), the
        run's attributes and the chains' starting states.

    Raises
    ------
    ValueError
        Where a count, ``checkpoint_seconds`` or the seed is out of range, ``chains`` does not
        name ``num_chains`` indices, ``resume`` is not a checkpoint of this run (or has fewer
        draws and the kernel anneals), ``init`` names no method or gives tokens of the wrong
        number of chains, or a start breaks a hard rule of the target (given, or not repaired).
    TypeError
        Where a count or the seed is not an integer, ``checkpoint_seconds`` not a number, or
        given starting tokens are not a tensor of token ids.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, run_chains
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> run = run_chains(make_kernel("mh", target), num_chains=2, num_samples=20, seed=0)
    >>> run.tokens.shape  # (chains, draws, tokens with [CLS] and [SEP])
    torch.Size([2, 20, 7])
    >>> run.stats["lp"].shape
    torch.Size([2, 20])
    """
    C = check_count(num_chains, "num_chains", 1)
    D = check_count(num_samples, "num_samples", 1)
    W = check_count(warmup_steps, "warmup_steps", 0)
    thin = check_count(thin, "thin", 1)
    checkpoint_seconds = check_interval(checkpoint_seconds, "checkpoint_seconds")
    stop_every = check_count(stop_every, "stop_every", 1)
    ids = list(range(C)) if chains is None else [check_count(c, "chain index", 0) for c in chains]
    if len(ids) != C:
        raise ValueError(f"chains names {len(ids)} chain indices for num_chains={C}")
    streams = ChainStreams(check_seed(seed), ids)
    target = kernel.target
    L = target.template.numel()
    total = W + D * thin
    if resume is not None:
        _check_checkpoint(resume, C, D, L, W, thin)
        if resume.draws.shape[1] < D and kernel.annealing() is not None:
            raise ValueError(
                f"the checkpoint is of a run of {resume.draws.shape[1]} draws, and the kernel anneals over the "
                "run's steps: its schedule cannot be stretched; resume with the run's own num_samples"
            )
        state, step0, initial = resume.state, resume.step, resume.initial
        streams.set_state(resume.streams)
        draws = torch.zeros((C, D, L), dtype=torch.long)
        draws[:, : resume.draws.shape[1]] = resume.draws  # all of them, or the first of a run whose cap was raised
        stats: dict[str, list[Tensor]] = {k: list(v.unbind(1)) for k, v in resume.stats.items()}
    else:
        state = kernel.init(initial_tokens(kernel, C, streams, init))
        step0, initial = 0, state.tokens.clone()
        draws = torch.zeros((C, D, L), dtype=torch.long)
        stats = {}  # name -> per-draw (C,) tensors; the names are step_stats' of the kernel

    # (steps done, state, RNG state, draws taken): replaced in one assignment after each step, so an
    # interrupt anywhere leaves a consistent snapshot to checkpoint
    snap = (step0, state, streams.get_state(), len(stats.get("lp", [])))

    def packed(n: int) -> dict[str, Tensor]:  # the statistics of the first n draws, (C, n) each
        if n:
            return {k: torch.stack(v[:n], 1) for k, v in stats.items()}
        return {k: torch.empty((C, 0)) for k in kernel.stat_names()}

    def checkpoint() -> None:
        if on_checkpoint is None:
            return
        steps_done, st, rng, n = snap
        on_checkpoint(Checkpoint(steps_done, st, rng, draws, packed(n), initial))

    attrs = run_attrs(kernel, C, D, warmup_steps=W, thin=thin, seed=seed)

    def so_far(n: int) -> Run:  # the first n draws, as the run would return them (its attributes too)
        stats_n = packed(n)
        stats_n["lp"] = state_consistent_lp(draws[:, :n], stats_n["lp"])
        return Run(draws[:, :n], stats_n, {**attrs, "num_samples": n}, initial)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=step0, unit=" step", desc="sampling", dynamic_ncols=True)
    accepted, seen = 0.0, 0
    last = time.monotonic()
    stopped = None

    def ask(n: int) -> str | None:
        return stop(so_far(n)) if stop is not None and 0 < n < D and n % stop_every == 0 else None

    try:
        stopped = ask(snap[3])  # a checkpoint taken between a draw and its question (idempotent otherwise)
        for i in range(step0, total if stopped is None else step0):
            new_state, info = kernel.step(state, streams)
            step_record = step_stats(info)
            if i >= W and (i - W + 1) % thin == 0:
                d = (i - W + 1) // thin - 1
                draws[:, d] = new_state.tokens
                for k, v in step_record.items():
                    stats.setdefault(k, []).append(v)
            state = new_state
            snap = (i + 1, state, streams.get_state(), len(stats.get("lp", [])))
            if bar is not None:
                accepted += float(step_record["is_accepted"].float().mean())
                seen += 1
                bar.set_postfix(draws=snap[3], accept=f"{accepted / seen:.2f}", refresh=False)
                bar.update(1)
            if on_step is not None:
                on_step(i + 1)
            if on_checkpoint is not None and time.monotonic() - last >= checkpoint_seconds:
                checkpoint()
                last = time.monotonic()
            if snap[3] and i >= W and (i - W + 1) % thin == 0:
                stopped = ask(snap[3])
                if stopped is not None:
                    break
    except KeyboardInterrupt:
        checkpoint()
        raise
    finally:
        if bar is not None:
            bar.close()
    checkpoint()
    end: dict[str, Any] = getattr(kernel, "annealing_end", lambda state: {})(snap[1])  # where chains stopped cooling
    if end and "annealing" in attrs:
        attrs["annealing"] = {**attrs["annealing"], **end}
    run = so_far(snap[3])
    if stopped is not None:
        run.attrs["stopped"] = f"{stopped}: stopped at draw {run.num_draws} of {D} (asked every {stop_every} draws)"
    return run
