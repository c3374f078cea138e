"""Kernels by name (:func:`make_kernel`, :func:`check_kernel_options`) and draws for a distribution
(what ``MaskedLMDistribution.sample`` runs). A whole sampling job is :func:`mlm_ppl.sample`
(:mod:`mlm_ppl.jobs`), on the floor above: it builds the target, the kernel and the run from one
job spec; :func:`make_kernel` with :func:`~mlm_ppl.inference.run_chains` is the documented layer
below it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._checks import check_count
from ..models.distribution import MaskedLMDistribution, register_sampler
from .mh import MetropolisHastings
from .pyro_sites import check_not_held
from .registry import KERNELS, kernel_class, make_kernel
from .runner import run_chains
from .spec import Options

__all__ = ["KERNELS", "make_kernel", "check_kernel_options", "draw_from_distribution"]


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
    """Draws of a distribution: the last states of ``n`` independent MH chains, ``(n, L)``.

    The chains are ``first_chain`` to ``first_chain + n - 1`` of ``seed``'s streams (so successive
    calls that move ``first_chain`` on draw new, reproducible chains).

    What :meth:`MaskedLMDistribution.sample <mlm_ppl.MaskedLMDistribution.sample>` runs.

    Parameters
    ----------
    dist : MaskedLMDistribution
        The distribution drawn from (:class:`~mlm_ppl.MaskedLMDistribution`).
    n : int
        Draws: one independent chain each.
    num_steps : int or None, optional
        MH steps of each chain, the last state kept; None (the default): 20 sweeps
        (``20 * num_free`` single-site steps).
    seed : int or None, optional
        Seed of the chains' streams; None (the default) draws one from torch's global RNG, so
        ``pyro.set_rng_seed`` makes the draws reproducible.
    init : {"sample", "greedy", "uniform"}, optional
        How the free positions are first filled (:func:`fill_template`; default ``"sample"``).
    first_chain : int, optional
        Index of the first chain in ``seed``'s streams (default 0).
    **mh_options
        Options of :class:`~mlm_ppl.MetropolisHastings` (``scan``, ``block_size``, ``top_k`` ...).

    Returns
    -------
    torch.Tensor
        Shape ``(n, L)``, long: the last state of each chain.

    Raises
    ------
    ValueError
        Where a model being run by an MLM kernel draws from a token site hidden from it
        (``poutine.block``), ``n``, ``num_steps`` or ``first_chain`` is out of range, or an MH option
        is unknown or out of range.
    TypeError
        Where ``n``, ``num_steps`` or ``first_chain`` is not an integer.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import draw_from_distribution
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> draw_from_distribution(dist, 3, num_steps=5, seed=0).shape
    torch.Size([3, 7])
    """
    check_not_held()  # drawn while an MLM kernel runs the model: a handler hid the site from it
    n = check_count(n, "n", 1)
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    steps = 20 * dist.num_free if num_steps is None else check_count(num_steps, "num_steps", 1)
    kernel = MetropolisHastings(dist, **mh_options)
    chains = range(check_count(first_chain, "first_chain", 0), first_chain + n)
    return run_chains(kernel, n, 1, warmup_steps=steps - 1, seed=seed, init=init, chains=chains).tokens[:, 0]


register_sampler(draw_from_distribution)  # MaskedLMDistribution.sample runs MH chains (models/ never imports this)
