"""Batched chains: run any kernel for C chains at once and collect draws and per-draw stats."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from .kernels import MaskPredict, MetropolisHastings, PseudoGibbs, check_count, fill_template

__all__ = ["Run", "Checkpoint", "run_chains", "sample", "make_kernel", "check_seed", "KERNELS", "draw_from_distribution"]

KERNELS = ("mh", "pseudo-gibbs", "mask-predict")
STAT_NAMES = ("lp", "is_accepted", "acceptance_rate", "n_changed")


@dataclass
class Run:
    """Draws of C chains.

    Attributes
    ----------
    tokens : Tensor
        ``(C, D, L)`` long token ids of the draws (after warm-up and thinning).
    stats : dict of Tensor
        ``(C, D)`` per-draw statistics with ArviZ names: ``lp`` (log target density),
        ``is_accepted``, ``acceptance_rate``, ``n_changed``.
    attrs : dict
        Kernel, energy, temperature, template, seed, warm-up ... for the record.
    initial : Tensor, optional
        ``(C, L)`` the chains' starting states (after the template fill-in, before warm-up).
    """

    tokens: Tensor
    stats: dict[str, Tensor]
    attrs: dict[str, Any] = field(default_factory=dict)
    initial: Tensor | None = None

    @property
    def num_chains(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.tokens.shape[1])


def target_attrs(target) -> dict[str, Any]:
    """What a run records about its target: energy, temperature, template, free positions."""
    return dict(
        energy=getattr(target, "energy", None),
        temperature=getattr(target, "temperature", None),
        template=target.template.tolist(),
        free_positions=target.free_positions.tolist(),
    )


def check_seed(seed) -> int:
    """Seeds are plain ints (not bools, floats or None)."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    return seed


def make_kernel(name: str, target, **options):
    """Build a kernel by name: ``"mh"``, ``"pseudo-gibbs"`` or ``"mask-predict"``."""
    classes = {"mh": MetropolisHastings, "pseudo-gibbs": PseudoGibbs, "mask-predict": MaskPredict}
    if name not in classes:
        raise ValueError(f"unknown kernel {name!r}; choose one of {', '.join(map(repr, KERNELS))}")
    try:
        return classes[name](target, **options)
    except TypeError as err:
        raise TypeError(f"kernel {name!r}: {err}") from None


@dataclass
class Checkpoint:
    """Everything needed to continue a run exactly: steps done, kernel state, RNG state, draws so far."""

    step: int
    state: Any
    generator: Tensor
    draws: Tensor  # (C, D, L), filled up to the draws taken
    stats: dict[str, Tensor]  # (C, d) for the d draws taken
    initial: Tensor


def run_chains(
    kernel,
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
) -> Run:
    """Advance ``num_chains`` chains of ``kernel`` together and keep every ``thin``-th step.

    Parameters
    ----------
    kernel : MetropolisHastings, PseudoGibbs or MaskPredict
    num_chains, num_samples : int
        Chains and kept draws per chain.
    warmup_steps : int
        Steps discarded before the first draw. The template fill-in of ``init`` comes before
        them and is never a draw.
    thin : int
    seed : int
        Seeds one ``torch.Generator``: same seed, same device, same chains.
    init : {"sample", "greedy", "uniform"} or Tensor
        How the free positions are first filled (:func:`fill_template`), or starting tokens
        ``(C, L)``. Ignored by mask-predict, which starts from the masked template.
    progress : bool
        Progress bar with draws/s and acceptance so far.
    on_checkpoint : callable, optional
        Called with a :class:`Checkpoint` at most every ``checkpoint_seconds``, after the last
        step, and when the run is interrupted (then ``KeyboardInterrupt`` propagates).
    resume : Checkpoint, optional
        Continue from a checkpoint of the same run: the result equals the uninterrupted run.
    """
    C = check_count(num_chains, "num_chains", 1)
    D = check_count(num_samples, "num_samples", 1)
    W = check_count(warmup_steps, "warmup_steps", 0)
    thin = check_count(thin, "thin", 1)
    gen = torch.Generator().manual_seed(check_seed(seed))
    target = kernel.target
    L = target.template.numel()
    total = W + D * thin
    if resume is not None:
        state, step0, initial = resume.state, resume.step, resume.initial
        gen.set_state(resume.generator)
        draws = resume.draws.clone()
        stats = {k: list(resume.stats[k].unbind(1)) for k in STAT_NAMES}
        if draws.shape != (C, D, L):
            raise ValueError(f"checkpoint holds draws of shape {tuple(draws.shape)}, this run needs {(C, D, L)}")
    else:
        if isinstance(kernel, MaskPredict):
            state = kernel.init(C)
        else:
            if isinstance(init, Tensor):
                tokens = init
                if tokens.shape[0] != C:
                    raise ValueError(f"init has {tokens.shape[0]} chains but num_chains={C}")
            else:
                tokens = fill_template(target, C, gen, init)
            state = kernel.init(tokens)
        step0, initial = 0, state.tokens.clone()
        draws = torch.zeros((C, D, L), dtype=torch.long)
        stats = {k: [] for k in STAT_NAMES}

    # (steps done, state, RNG state, draws taken): replaced in one assignment after each step, so an
    # interrupt anywhere leaves a consistent snapshot to checkpoint
    snap = (step0, state, gen.get_state(), len(stats["lp"]))

    def checkpoint() -> None:
        if on_checkpoint is None:
            return
        steps_done, st, rng, n = snap
        packed = {k: torch.stack(v[:n], 1) if n else torch.empty((C, 0)) for k, v in stats.items()}
        on_checkpoint(Checkpoint(steps_done, st, rng, draws, packed, initial))

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=step0, unit=" step", desc="sampling", dynamic_ncols=True)
    accepted, seen = 0.0, 0
    last = time.monotonic()
    try:
        for i in range(step0, total):
            new_state, info = kernel.step(state, gen)
            if i >= W and (i - W + 1) % thin == 0:
                d = (i - W + 1) // thin - 1
                draws[:, d] = new_state.tokens
                for k in STAT_NAMES:
                    stats[k].append(getattr(info, k))
            state = new_state
            snap = (i + 1, state, gen.get_state(), len(stats["lp"]))
            if bar is not None:
                accepted += float(info.is_accepted.float().mean())
                seen += 1
                bar.set_postfix(draws=snap[3], accept=f"{accepted / seen:.2f}", refresh=False)
                bar.update(1)
            if on_checkpoint is not None and time.monotonic() - last >= checkpoint_seconds:
                checkpoint()
                last = time.monotonic()
    except KeyboardInterrupt:
        checkpoint()
        raise
    finally:
        if bar is not None:
            bar.close()
    checkpoint()
    attrs = dict(
        kernel=type(kernel).__name__,
        num_chains=C,
        num_samples=D,
        warmup_steps=W,
        thin=thin,
        seed=seed,
        **target_attrs(target),
    )
    return Run(draws, {k: torch.stack(v, dim=1) for k, v in stats.items()}, attrs, initial)


def draw_from_distribution(
    dist,
    n: int,
    *,
    num_steps: int | None = None,
    seed: int | None = None,
    init: str = "sample",
    **mh_options,
) -> Tensor:
    """``(n, L)`` draws of ``dist``: the last states of ``n`` independent MH chains.

    ``num_steps`` defaults to 20 sweeps (``20 * num_free`` single-site steps). Without a
    ``seed`` one is drawn from torch's global RNG, so ``pyro.set_rng_seed`` makes it reproducible.
    """
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    steps = 20 * dist.num_free if num_steps is None else check_count(num_steps, "num_steps", 1)
    kernel = MetropolisHastings(dist, **mh_options)
    return run_chains(kernel, n, 1, warmup_steps=steps - 1, seed=seed, init=init).tokens[:, 0]


def sample(
    mlm,
    template,
    *,
    kernel: str = "mh",
    energy: str = "norm",
    temperature: float = 1.0,
    num_chains: int = 4,
    num_samples: int = 100,
    warmup_steps: int = 0,
    thin: int = 1,
    seed: int = 0,
    init: str | Tensor = "sample",
    log_factor=None,
    progress: bool = False,
    **kernel_options,
) -> Run:
    """Sample the masked positions of ``template`` with C batched chains in one call.

    Builds ``MaskedLMDistribution(mlm, template, energy=..., temperature=...)`` (plus
    ``log_factor``, a function ``tokens (N, L) -> (N,)`` of extra log-density terms, if given),
    the kernel (``"mh"``, ``"pseudo-gibbs"`` or ``"mask-predict"``, with ``**kernel_options``),
    and runs :func:`run_chains`. All arguments are checked before any forward pass.
    """
    from ..models.distribution import MaskedLMDistribution
    from .kernels import ConstrainedTarget

    check_seed(seed)
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(map(repr, KERNELS))}")
    dist = MaskedLMDistribution(mlm, template, energy=energy, temperature=temperature)
    target = dist if log_factor is None else ConstrainedTarget(dist, log_factor)
    k = make_kernel(kernel, target, **kernel_options)
    run = run_chains(
        k, num_chains, num_samples, warmup_steps=warmup_steps, thin=thin, seed=seed, init=init, progress=progress
    )
    run.attrs.update(model=mlm.name, kernel=kernel, kernel_options=dict(kernel_options))
    return run
