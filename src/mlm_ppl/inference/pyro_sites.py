"""Pyro plumbing shared by the MCMC kernels (:class:`~mlm_ppl.MLMKernel`, :class:`~mlm_ppl.MLMGibbs`):
finding token sites, holding them while a model runs, each Pyro chain's random streams, and the
log density of the rest of a model."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from ..models.distribution import MaskedLMDistribution
from ..models.target import ScaledTarget, Target
from .streams import ChainStreams

__all__ = [
    "HoldSites",
    "chain_streams",
    "check_same_mlm_site",
    "is_sample_site",
    "other_sites_log_prob",
    "site_weights",
    "weighted",
    "TokenDraws",
    "AS_TOKEN_DRAWS",
]

_SUMMARY_HELP = (
    "token ids are labels: their mean, variance, quantiles, R-hat and ESS mean nothing, so Pyro's "
    "MCMC.summary()/diagnostics() and az.from_pyro cannot summarise a token site. Use mlm_ppl.from_pyro(mcmc) "
    "(InferenceData with the log density, Hamming distances and token indicators of the tokens, and the other "
    "sites as they are) and mlm_ppl.summary(idata); x.float() if you do mean to average ids"
)
_MOMENTS = {
    torch.mean, torch.Tensor.mean, torch.var, torch.Tensor.var, torch.std, torch.Tensor.std, torch.median,
    torch.Tensor.median, torch.quantile, torch.Tensor.quantile, torch.var_mean, torch.std_mean,
}  # fmt: skip
_SHAPE_OPS = {
    torch.Tensor.__getitem__, torch.Tensor.reshape, torch.Tensor.view, torch.Tensor.permute, torch.Tensor.flatten,
    torch.Tensor.transpose, torch.Tensor.unsqueeze, torch.Tensor.squeeze, torch.Tensor.expand, torch.Tensor.clone,
    torch.Tensor.contiguous, torch.Tensor.detach, torch.Tensor.to, torch.Tensor.long, torch.Tensor.cpu, torch.cat,
    torch.stack, torch.reshape, torch.flatten,
}  # fmt: skip


class TokenDraws(torch.Tensor):
    """Token ids drawn by MCMC (``torch.long``), as ``mcmc.get_samples()`` returns them.
    Reshaping, indexing and stacking keep the type; anything else gives plain tensors (a table
    indexed by them, comparisons, ``.float()``); the moments that Pyro's and ArviZ's summaries
    take raise a TypeError that names :func:`mlm_ppl.from_pyro` instead of failing inside torch."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in _MOMENTS:
            raise TypeError(_SUMMARY_HELP)
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func in _SHAPE_OPS and isinstance(out, torch.Tensor) and out.dtype == torch.long:
            return out
        return _plain(out)


def _plain(value: Any) -> Any:
    if isinstance(value, TokenDraws):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    return value


class _AsTokenDraws:
    """What ``MCMC`` applies (``.inv``) to a token site's samples after a run: Pyro packs each
    draw's sites into one tensor, so ids beside continuous sites travel as floats; they come out
    of ``get_samples`` as :class:`TokenDraws`."""

    def inv(self, z: Tensor) -> Tensor:
        return z.round().long().as_subclass(TokenDraws)


AS_TOKEN_DRAWS = _AsTokenDraws()


def is_sample_site(site: Any) -> bool:
    """A real sample site of a Pyro trace (not a plate's subsample site)."""
    return site["type"] == "sample" and not site_is_subsample(site)


class _Held(TorchDistribution):
    """Stands in for a site held at its value: log density 0, so a potential never runs it."""

    arg_constraints: dict = {}
    support = constraints.real

    def __init__(self, batch_shape: torch.Size, event_shape: torch.Size) -> None:
        super().__init__(batch_shape, event_shape, validate_args=False)

    def log_prob(self, value: Tensor) -> Tensor:
        return torch.zeros(value.shape[: value.dim() - len(self.event_shape)])


class HoldSites(Messenger):
    """Sites held while a model runs: the one holder of token sites.

    Sites named in ``values`` take those values as observations (those in ``zero_density`` also
    get a log density of 0: the MLM terms left out of an inner HMC potential). Any other latent
    :class:`~mlm_ppl.MaskedLMDistribution` site takes its masked template as a placeholder, so
    tracing a model to find its sites never runs MH chains to sample one.
    """

    def __init__(self, values: Mapping[str, Tensor] | None = None, zero_density: Collection[str] = ()) -> None:
        super().__init__()
        self.values = dict(values or {})
        self.zero_density = set(zero_density)

    def _pyro_sample(self, msg: Any) -> None:
        name, fn = msg["name"], msg["fn"]
        if name in self.values:
            msg["value"] = self.values[name]
            msg["is_observed"] = True
            if name in self.zero_density:
                msg["fn"] = _Held(fn.batch_shape, fn.event_shape)
        elif isinstance(fn, MaskedLMDistribution) and not msg["is_observed"] and msg["value"] is None:
            msg["value"] = fn.template.expand(fn.batch_shape + fn.event_shape).clone()


def site_weights(name: str, node: Any) -> Tensor:
    """What Pyro's handlers multiply a token site's log density by: ``scale * mask``
    (``poutine.scale``, ``poutine.mask``), float64, of the site's batch shape (``()`` for one
    sequence). (``MaskedLMDistribution.mask(...)`` wraps the distribution, so the kernels no
    longer see a token site there, and say so.) A subsampled ``pyro.plate``
    over token sequences is refused: MCMC needs every sequence of the plate in every step, and
    the plate's scale would make the kernels sample another law than the model's."""
    for frame in node["cond_indep_stack"]:
        full = getattr(frame, "full_size", None)
        if full is not None and full != frame.size:
            raise ValueError(
                f"token site {name!r} is under pyro.plate({frame.name!r}, {full}, subsample_size={frame.size}): "
                "MCMC cannot subsample token sequences (each step must see every one); remove subsample_size"
            )
    batch = node["fn"].batch_shape
    weight = torch.as_tensor(node["scale"], dtype=torch.float64)
    if node["mask"] is not None:
        weight = weight * torch.as_tensor(node["mask"], dtype=torch.float64)
    if not bool(torch.isfinite(weight).all()) or bool((weight < 0).any()):
        raise ValueError(f"token site {name!r} has a scale that is not finite and >= 0: {weight.tolist()}")
    return weight.expand(batch)


def weighted(target: Target, weight: Tensor) -> Target:
    """``target`` as Pyro's trace scores it: its energy times ``weight`` (a :class:`ScaledTarget`
    unless the weight is 1)."""
    return target if float(weight) == 1.0 else ScaledTarget(target, float(weight))


def chain_streams(seed: int | None, chain_index: int, num_chains: int) -> ChainStreams:
    """The random streams of Pyro chain ``chain_index`` (counting every chain a kernel object ran)
    with ``num_chains`` batched chains inside it: the streams of chains
    ``chain_index * C .. chain_index * C + C - 1`` of ``seed``; with ``seed=None`` a fresh seed from
    torch's global RNG, so ``pyro.set_rng_seed`` governs, as for Pyro's own kernels."""
    if seed is None:
        return ChainStreams(int(torch.randint(0, 2**62, ()).item()), num_chains)
    return ChainStreams(seed, range(chain_index * num_chains, (chain_index + 1) * num_chains))


def check_same_mlm_site(name: str, fn: Any, expected: MaskedLMDistribution) -> None:
    """Raise if a token site's distribution differs from the one the kernel was set up with.

    A template, temperature, energy or model that depends on another latent site makes that
    site's conditional depend on the MLM distribution's normaliser, which no kernel can compute.
    """
    same = (
        isinstance(fn, MaskedLMDistribution)
        and fn.mlm is expected.mlm
        and fn.energy_name == expected.energy_name
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
