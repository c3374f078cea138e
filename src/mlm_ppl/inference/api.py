"""The sampling API: kernels by name, :func:`sample` in one call, and draws for a distribution.

``mlm_ppl.sample(mlm, template, kernel="mh", ...)`` builds the target
(:class:`~mlm_ppl.MaskedLMDistribution`, plus a :class:`~mlm_ppl.models.ConstrainedTarget` for
log-factors), the kernel (:func:`make_kernel`) and runs :func:`~mlm_ppl.inference.run_chains`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._checks import check_choice, check_count, check_seed
from ..models.distribution import MaskedLMDistribution, register_sampler
from ..models.gap_target import GapTarget
from ..models.gaps import LengthPrior, has_variable_gap
from ..models.masked_lm import MaskedLM
from ..models.target import ConstrainedTarget, Target
from .estimate import LongRunWarning, estimate_run
from .mh import MetropolisHastings
from .pyro_sites import check_not_held
from .registry import KERNELS, kernel_class, make_kernel
from .runner import Run, run_chains
from .spec import Options

__all__ = ["KERNELS", "BACKENDS", "make_kernel", "check_kernel_options", "sample", "draw_from_distribution"]

BACKENDS = ("local", "ray")
"""Where :func:`sample` runs the chains: this process, or Ray actors (``workers``)."""


def check_kernel_options(name: str, options: dict[str, Any]) -> Options:
    """A kernel's name and options, checked before any target exists: the kernel's ``Options``.

    Checks that depend on the target (e.g. ``block_size``) run when the kernel is built.
    """
    return kernel_class(name).Options.from_dict(options, name)


def draw_from_distribution(
    dist: MaskedLMDistribution,
    n: int,
    *,
    num_steps: int | None = None,
    seed: int | None = None,
    init: str = "sample",
    first_chain: int = 0,
    **mh_options: Any,
) -> Tensor:
    """``(n, L)`` draws of ``dist``: the last states of ``n`` independent MH chains, chains
    ``first_chain .. first_chain + n - 1`` of ``seed``'s streams (so successive calls that move
    ``first_chain`` on draw new, reproducible chains).

    ``num_steps`` defaults to 20 sweeps (``20 * num_free`` single-site steps). Without a
    ``seed`` one is drawn from torch's global RNG, so ``pyro.set_rng_seed`` makes it reproducible.
    """
    check_not_held()  # drawn while an MLM kernel runs the model: a handler hid the site from it
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    steps = 20 * dist.num_free if num_steps is None else check_count(num_steps, "num_steps", 1)
    kernel = MetropolisHastings(dist, **mh_options)
    chains = range(check_count(first_chain, "first_chain", 0), first_chain + n)
    return run_chains(kernel, n, 1, warmup_steps=steps - 1, seed=seed, init=init, chains=chains).tokens[:, 0]


def sample(
    mlm: MaskedLM,
    template: str | Tensor,
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
    log_factor: Callable[[Tensor], Tensor] | None = None,
    length_prior: LengthPrior | None = None,
    progress: bool = False,
    backend: str = "local",
    workers: int | None = None,
    force: bool = False,
    **kernel_options: Any,
) -> Run:
    """Sample the masked positions of ``template`` with C batched chains in one call.

    Builds ``MaskedLMDistribution(mlm, template, energy=..., temperature=...)`` (plus
    ``log_factor``, a function ``tokens (N, L) -> (N,)`` of extra log-density terms, if given),
    the kernel (``"mh"``, ``"surrogate-mh"``, ``"pseudo-gibbs"`` or ``"mask-predict"``, with
    ``**kernel_options``),
    and runs :func:`run_chains`. All arguments are checked before any forward pass.

    A template with a variable gap ``MASK{a,b}`` builds the target over every length,
    :class:`~mlm_ppl.models.gap_target.GapTarget` (``length_prior``: its ``pi(L)``, uniform by
    default), which the kernels that move lengths sample (``kernel="gap-jump"``, or ``"surrogate-mh"``
    around gap-jump's moves); its draws are padded after the loop.

    Before any step, the run's cost is estimated as the command line estimates it
    (:func:`~mlm_ppl.inference.estimate.estimate_run`): a run past half of the machine's memory or
    past a day is refused unless ``force=True``, and one past a GiB or an hour warns
    (:class:`~mlm_ppl.inference.estimate.LongRunWarning`).

    ``backend="ray"`` splits the chains over ``workers`` Ray actors (the ``ray`` extra;
    :mod:`mlm_ppl.inference.distributed`), each holding a copy of the model: the result is the
    same run, since each chain draws from its own random stream.
    """
    check_seed(seed)
    check_kernel_options(kernel, kernel_options)
    check_choice(backend, "backend", BACKENDS)
    if backend == "ray":
        check_count(workers, "workers", 1)
    elif workers is not None:
        raise ValueError("workers applies to backend='ray'")
    target: Target
    if isinstance(template, str) and has_variable_gap(template):
        if log_factor is not None:
            raise ValueError("log_factor with a variable gap is not supported yet; sample each length on its own")
        target = GapTarget(mlm, template, length_prior, energy=energy, temperature=temperature)
    elif length_prior is not None:
        raise ValueError("length_prior applies to a template with a variable gap MASK{a,b}")
    else:
        dist = MaskedLMDistribution(mlm, template, energy=energy, temperature=temperature)
        target = dist if log_factor is None else ConstrainedTarget(dist, log_factor)
    k = make_kernel(kernel, target, **kernel_options)
    steps = check_count(warmup_steps, "warmup_steps", 0) + check_count(num_samples, "num_samples") * check_count(
        thin, "thin"
    )
    estimate = estimate_run(k, check_count(num_chains, "num_chains"), steps, num_samples)
    estimate.check(force, "force=True")
    if estimate.big:
        warnings.warn(LongRunWarning(f"estimate: {estimate}"), stacklevel=2)
    options: dict[str, Any] = dict(warmup_steps=warmup_steps, thin=thin, seed=seed, init=init, progress=progress)
    if backend == "ray":
        from .distributed import run_chains_ray  # imports ray only now

        run = run_chains_ray(
            lambda: k, num_chains, num_samples, workers=int(workers or 1), device=str(mlm.device), **options
        )
    else:
        run = run_chains(k, num_chains, num_samples, **options)
    recorded = k.options.to_dict()  # Python-only options (a schedule: attrs["annealing"]) have no record
    given = {name: value for name, value in kernel_options.items() if name in recorded}
    run.attrs.update(model=mlm.name, kernel=kernel, kernel_options=given)
    return run


register_sampler(draw_from_distribution)  # MaskedLMDistribution.sample runs MH chains (models/ never imports this)
