"""The :class:`~mlm_ppl.inference.Run` of a finished ``pyro.infer.MCMC`` run of either MLM kernel:
Pyro chains (and an ``MLMKernel``'s batched chains inside each) become the run's chains, each with
the start and per-draw statistics its :class:`~mlm_ppl.inference.pyro_chains.ChainRecord` brought
back (from worker processes too). :func:`mlm_ppl.from_pyro` builds InferenceData from them."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .gibbs import MLMGibbs
from .pyro_chains import chain_records
from .pyro_kernel import MLMKernel
from .runner import Run, kernel_attrs, target_attrs

__all__ = ["run_from_mcmc", "run_from_gibbs"]


def run_from_mcmc(mcmc, kernel: MLMKernel, site: str | None = None, element: int | None = None) -> Run:
    """The :class:`~mlm_ppl.Run` of a finished ``pyro.infer.MCMC`` run of an :class:`~mlm_ppl.MLMKernel`.

    Pyro chains (and the batched chains inside each) become the run's chains: ``(C, D, L)``, each
    with the start and per-draw statistics it brought back (from worker processes too).

    Parameters
    ----------
    mcmc : pyro.infer.MCMC
        The finished run.
    kernel : MLMKernel
        The kernel ``mcmc`` ran.
    site : str or None, optional
        The token site: the model's one token site, or None (the default) for it.
    element : int or None, optional
        Must be None (the default): an ``MLMKernel`` model's token site is under no ``pyro.plate``.

    Returns
    -------
    Run
        Tokens ``(P * C, D, L)`` for ``P`` Pyro chains of ``C`` batched chains and ``D`` draws,
        per-draw statistics ``(P * C, D)``, the run's attributes and starting states.

    Raises
    ------
    TypeError
        Where ``kernel`` is not an :class:`~mlm_ppl.MLMKernel`.
    ValueError
        Where ``site`` is another site or ``element`` is given, or ``mcmc`` holds no finished run
        of ``kernel``.

    Examples
    --------
    >>> import pyro
    >>> from pyro.infer import MCMC
    >>> from mlm_ppl import MaskedLMDistribution, MLMKernel
    >>> from mlm_ppl.inference import run_from_mcmc
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = MLMKernel(lambda: pyro.sample("loop", dist), num_chains=2, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=5, warmup_steps=2, disable_progbar=True)
    >>> mcmc.run()
    >>> run_from_mcmc(mcmc, kernel).tokens.shape
    torch.Size([2, 5, 7])
    """
    if not isinstance(kernel, MLMKernel):
        raise TypeError(f"kernel must be the MLMKernel that MCMC ran, got {type(kernel).__name__}")
    if site not in (None, kernel.site) or element is not None:
        raise ValueError(f"the model has one token site {kernel.site!r}, not under a plate")
    x = mcmc.get_samples(group_by_chain=True)[kernel.site].as_subclass(Tensor)  # (P, C * D, L), chain-major
    records = chain_records(mcmc)  # one per Pyro chain, from worker processes too
    stats = [r.stats for r in records]  # each (D, C)
    P, C, L = x.shape[0], kernel.num_chains, x.shape[-1]
    D = x.shape[1] // C
    tokens = x.reshape(P * C, D, L)
    merged = {k: torch.cat([s[k].T for s in stats]) for k in stats[0]}
    target = kernel.target
    attrs = dict(
        kernel=f"MLMKernel({kernel.kernel_name})",
        num_chains=P * C,
        num_samples=D,
        warmup_steps=int(mcmc.warmup_steps),
        seed=kernel.seed,
        **target_attrs(target),
        model=getattr(getattr(target, "mlm", None), "name", None),
        **kernel_attrs(kernel.kernel),
    )
    initial = torch.cat([r.initial for r in records])
    return Run(tokens.long(), merged, attrs, initial)


def run_from_gibbs(mcmc: Any, kernel: MLMGibbs, site: str | None = None, element: int | None = None) -> Run:
    """The :class:`~mlm_ppl.Run` of one token site of a finished ``MCMC`` run of an :class:`~mlm_ppl.MLMGibbs`.

    Pyro chains become the run's chains: tokens ``(P, D, L)`` and per-draw statistics ``(P, D)``.

    Parameters
    ----------
    mcmc : pyro.infer.MCMC
        The finished run.
    kernel : MLMGibbs
        The kernel ``mcmc`` ran.
    site : str or None, optional
        The token site; None (the default) for the model's only token site.
    element : int or None, optional
        For a site under a ``pyro.plate``, the sequence of the plate (the sequences of a plate are
        different variables, not chains); None (the default) for a site outside any plate.

    Returns
    -------
    Run
        Tokens ``(P, D, L)`` for ``P`` Pyro chains of ``D`` draws, per-draw statistics
        ``(P, D)``, the run's attributes and starting states.

    Raises
    ------
    TypeError
        Where ``kernel`` is not an :class:`~mlm_ppl.MLMGibbs`.
    ValueError
        Where ``site`` is None and the model has several token sites, ``element`` is missing for
        a site under a plate or given for one outside, or ``mcmc`` holds no finished run of
        ``kernel``.

    Examples
    --------
    >>> import pyro
    >>> from pyro.infer import MCMC
    >>> from mlm_ppl import MaskedLMDistribution, MLMGibbs
    >>> from mlm_ppl.inference import run_from_gibbs
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = MLMGibbs(lambda: pyro.sample("loop", dist), seed=0)
    >>> mcmc = MCMC(kernel, num_samples=5, warmup_steps=2, disable_progbar=True)
    >>> mcmc.run()
    >>> run_from_gibbs(mcmc, kernel).tokens.shape
    torch.Size([1, 5, 7])
    """
    if not isinstance(kernel, MLMGibbs):
        raise TypeError(f"kernel must be the MLMGibbs that MCMC ran, got {type(kernel).__name__}")
    if site is None:
        if len(kernel.mlm_sites) != 1:
            raise ValueError(f"the model has token sites {kernel.mlm_sites}; name one with site=")
        site = kernel.mlm_sites[0]
    plated = kernel.is_plated(site)
    if plated == (element is None):
        raise ValueError(
            f"site {site!r} is under a pyro.plate: name one of its sequences with element="
            if plated
            else f"site {site!r} is one sequence; element= applies to sites under a pyro.plate"
        )
    target = kernel.site_target(site, element)
    x = mcmc.get_samples(group_by_chain=True)[site].long().as_subclass(Tensor)  # (P, D, L) or (P, D, B, L)
    records = chain_records(mcmc)  # one per Pyro chain, from worker processes too
    stats = [r.stats[site] for r in records]
    initial = torch.stack([r.initial[site] for r in records])
    if plated:
        x, initial = x[:, :, element], initial[:, element]
        stats = [{k: v[:, element] for k, v in s.items()} for s in stats]
    P, D, _ = x.shape
    merged = {k: torch.stack([s[k] for s in stats]) for k in stats[0]}  # (P, D)
    attrs = dict(
        kernel=repr(kernel),
        site=site if element is None else f"{site}[{element}]",
        num_chains=P,
        num_samples=D,
        warmup_steps=int(mcmc.warmup_steps),
        seed=kernel.seed,
        **target_attrs(target),
        model=getattr(target.mlm, "name", None),
        **kernel_attrs(kernel.site_kernel(site, element)),
    )
    return Run(x, merged, attrs, initial)
