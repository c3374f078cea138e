"""Pyro plumbing shared by the MCMC kernels (:class:`~mlm_ppl.MLMKernel`, :class:`~mlm_ppl.MLMGibbs`):
finding token sites, holding them while tracing, and the log density of the rest of a model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from ..models.distribution import MaskedLMDistribution

__all__ = ["HoldTokenSites", "check_same_mlm_site", "is_sample_site", "other_sites_log_prob"]


def is_sample_site(site: Any) -> bool:
    """A real sample site of a Pyro trace (not a plate's subsample site)."""
    return site["type"] == "sample" and not site_is_subsample(site)


class HoldTokenSites(Messenger):
    """While a model is traced to find its sites: a latent MaskedLMDistribution site takes its
    (masked) template as a cheap placeholder value instead of running MH chains to sample it."""

    def _pyro_sample(self, msg):
        fn = msg["fn"]
        if isinstance(fn, MaskedLMDistribution) and not msg["is_observed"] and msg["value"] is None:
            msg["value"] = fn.template.expand(fn.batch_shape + fn.event_shape).clone()


def check_same_mlm_site(name: str, fn: Any, expected: MaskedLMDistribution) -> None:
    """Raise if a token site's distribution differs from the one the kernel was set up with.

    A template, temperature, energy or model that depends on another latent site makes that
    site's conditional depend on the MLM distribution's normaliser, which no kernel can compute.
    """
    same = (
        isinstance(fn, MaskedLMDistribution)
        and fn.mlm is expected.mlm
        and fn.energy == expected.energy
        and fn.temperature == expected.temperature
        and fn.batch_shape == expected.batch_shape
        and torch.equal(fn.template, expected.template)
    )
    if not same:
        raise ValueError(
            f"the MaskedLMDistribution of site {name!r} changed with the values of other latent sites (its template, "
            "temperature, energy or model depends on them); its normaliser is intractable, so that conditional cannot "
            "be sampled. Fix the site's arguments, or make the other site observed"
        )


def other_sites_log_prob(
    model: Callable,
    args: tuple,
    kwargs: dict,
    values: dict[str, Tensor],
    mlm_sites: Mapping[str, MaskedLMDistribution],
) -> Tensor:
    """Log density of every sample site of ``model`` except the token sites ``mlm_sites`` (the MLM
    terms), with ``values`` substituted for latent sites: the part of the joint an MLM kernel's
    log-factor needs. Token sites are never scored, so no MLM forward runs; their distributions
    are checked against ``mlm_sites`` (:func:`check_same_mlm_site`)."""
    trace = poutine.trace(poutine.condition(model, data=values)).get_trace(*args, **kwargs)
    for name, expected in mlm_sites.items():
        check_same_mlm_site(name, trace.nodes[name]["fn"], expected)
    trace.compute_log_prob(site_filter=lambda name, site: name not in mlm_sites)
    return sum(
        (s["log_prob_sum"] for name, s in trace.nodes.items() if is_sample_site(s) and name not in mlm_sites),
        torch.tensor(0.0),
    )
