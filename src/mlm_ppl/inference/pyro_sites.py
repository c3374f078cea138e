"""Pyro plumbing shared by the MCMC kernels (:class:`~mlm_ppl.MLMKernel`, :class:`~mlm_ppl.MLMGibbs`):
finding token sites, holding them while a model runs, and the log density of the rest of a model
(which chain a set-up starts and what it hands back: :mod:`.pyro_chains`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping
from types import FrameType
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.poutine.messenger import Messenger
from pyro.poutine.reparam_messenger import ReparamMessenger
from pyro.poutine.trace_struct import Trace
from pyro.poutine.util import site_is_subsample
from torch import Tensor

from ..models.distribution import MaskedLMDistribution, TokenIds, is_text
from ..models.target import ScaledTarget, Target

__all__ = [
    "HoldSites",
    "trace_model",
    "check_not_held",
    "check_same_mlm_site",
    "is_sample_site",
    "other_sites_log_prob",
    "site_weights",
    "weighted",
    "site_log_factor",
    "TokenDraws",
    "AsTokenDraws",
    "AS_TOKEN_DRAWS",
    "AsSupportDtype",
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
            if _inside_pyros_safe_wrapper():
                return _nan_like(func(*_plain_float(args), **(kwargs or {})))
            raise TypeError(_SUMMARY_HELP)
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func in _SHAPE_OPS and isinstance(out, torch.Tensor) and out.dtype == torch.long:
            return out
        return _plain(out)


def _inside_pyros_safe_wrapper() -> bool:
    """Whether Pyro's ``_safe`` wrapper (``pyro.infer.mcmc.util``: ``MCMC.diagnostics()`` computes
    the ESS through it) is a caller. It turns any error into a NaN tensor of the input's dtype,
    which for ``torch.long`` fails with "value cannot be converted to type int64_t": there the
    moments of token ids are NaN, so the call goes on to Pyro's R-hat, which stops with
    :data:`_SUMMARY_HELP` (one message, the same as ``MCMC.summary()``'s)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return False
        if frame.f_code.co_name == "wrapped" and frame.f_globals.get("__name__") == "pyro.infer.mcmc.util":
            return True
        frame = frame.f_back
    return False


def _plain_float(value: Any) -> Any:
    if isinstance(value, TokenDraws):
        return value.as_subclass(torch.Tensor).double()
    if isinstance(value, (tuple, list)):
        return type(value)(_plain_float(v) for v in value)
    return value


def _nan_like(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.full_like(value, float("nan"))
    if isinstance(value, tuple):
        items = [_nan_like(v) for v in value]
        return tuple(items) if type(value) is tuple else type(value)(items)  # torch.return_types take a list
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, TokenDraws):
        return value.as_subclass(torch.Tensor)
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    return value


class AsTokenDraws:
    """What ``MCMC`` applies (``.inv``) to a token site's samples after a run: Pyro packs each
    draw's sites into one tensor, so ids beside continuous sites travel as floats; they come out
    of ``get_samples`` as :class:`TokenDraws`.

    With ``batched_chains=C`` (``MLMKernel(num_chains=C)``, whose draws Pyro stores as
    ``(P, D, C, L)``) each Pyro chain's C chains are laid end to end, ``(P, C * D, L)``: the
    order of ``P * C`` Pyro chains of one chain each, so ``get_samples()`` is ``(P * C * D, L)``,
    one posterior draw per row, which ``Predictive`` takes as it is."""

    def __init__(self, batched_chains: int = 1) -> None:
        self.batched_chains = batched_chains

    def inv(self, z: Tensor) -> Tensor:
        if self.batched_chains > 1:
            P, D, C, L = z.shape
            z = z.permute(0, 2, 1, 3).reshape(P, C * D, L)
        return z.round().long().as_subclass(TokenDraws)


AS_TOKEN_DRAWS = AsTokenDraws()


class AsSupportDtype:
    """What ``MCMC`` applies (``.inv``) to a discrete site's samples after a run: back to the
    dtype of the site's support (``torch.long`` for a ``Categorical``), which Pyro's packing of
    each draw beside continuous sites turned into floats."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def inv(self, z: Tensor) -> Tensor:
        if z.dtype == self.dtype or self.dtype.is_floating_point:
            return z.to(self.dtype)
        return z.round().to(self.dtype)


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

    active = 0  # how many HoldSites are entered: a token site drawn meanwhile was hidden from them

    def __init__(self, values: Mapping[str, Tensor] | None = None, zero_density: Collection[str] = ()) -> None:
        super().__init__()
        self.values = dict(values or {})
        self.zero_density = set(zero_density)

    def __enter__(self) -> "HoldSites":
        entered = super().__enter__()
        HoldSites.active += 1  # counted once entered: a failed enter leaves no count behind
        return entered

    def __exit__(self, *exc: Any) -> Any:
        HoldSites.active -= 1
        return super().__exit__(*exc)

    def _pyro_sample(self, msg: Any) -> None:
        name, fn = msg["name"], msg["fn"]
        if name in self.values:
            msg["value"] = self.values[name]
            msg["is_observed"] = True
            if name in self.zero_density:
                msg["fn"] = _Held(fn.batch_shape, fn.event_shape)
        elif isinstance(fn, MaskedLMDistribution) and not msg["is_observed"] and msg["value"] is None:
            msg["value"] = fn.template.expand(fn.batch_shape + fn.event_shape).clone()


_HIDDEN = (
    "a MaskedLMDistribution site was drawn from its distribution while an MLM kernel ran the model: a handler "
    "inside the model (poutine.block, or any that stops a site's message) hid the token site from the kernel, "
    "which must see and move it. Block only other sites, or hold the tokens fixed with poutine.condition"
)


def check_not_held() -> None:
    """Raise if an MLM kernel is running the model (:class:`HoldSites` entered): a token site
    that reaches ``MaskedLMDistribution.sample`` then was hidden from it (``poutine.block``), and
    drawing it would run MH chains and leave it out of the kernel's moves."""
    if HoldSites.active:
        raise ValueError(_HIDDEN)


def trace_model(model: Callable, args: tuple, kwargs: dict) -> Trace:
    """The trace of ``model`` with its token sites held at their templates (:class:`HoldSites`):
    how both MLM kernels find their sites. Refuses, naming the handler, what a kernel cannot
    honour: a token site hidden by ``poutine.block`` (:func:`check_not_held`), reparametrized by
    ``poutine.reparam``, or conditioned on a sequence that still holds mask tokens."""
    try:
        with poutine.trace() as tracer, HoldSites():
            model(*args, **kwargs)
    except Exception as error:
        name = _reparametrized_token_site(error)
        if name is None:
            raise
        raise ValueError(_reparam_message(name)) from error
    trace = tracer.trace
    for name, node in trace.nodes.items():
        if not is_sample_site(node):
            continue
        fn = node["fn"]
        if isinstance(fn, MaskedLMDistribution):
            if node["is_observed"]:
                value = node["value"]  # text reaches check_complete as text: it names the call that encodes it
                fn.check_complete(value if is_text(value) else torch.as_tensor(value), f"token site {name!r}")
        elif isinstance(getattr(fn, "support", None), TokenIds):
            raise ValueError(_reparam_message(name))
    return trace


def _reparam_message(name: str) -> str:
    return (
        f"poutine.reparam was applied to token site {name!r} (or to a site that took its support): a "
        "MaskedLMDistribution has no reparametrization, and the MLM kernels must move the site itself. Leave "
        "token sites out of the reparam config"
    )


def _reparametrized_token_site(error: BaseException) -> str | None:
    """The token site a ``poutine.reparam`` handler was rewriting when ``error`` was raised (found
    in the traceback: the handler's frame holds the site's message), or None."""
    tb = error.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        msg = local.get("msg")
        if isinstance(local.get("self"), ReparamMessenger) and isinstance(msg, dict):
            if isinstance(msg.get("fn"), MaskedLMDistribution):
                return str(msg.get("name"))
        tb = tb.tb_next
    return None


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
    """``target`` as Pyro's trace scores it: its log density (energy and constraints) times
    ``weight`` (a :class:`ScaledTarget` unless the weight is 1; a weight of 0 drops the site's
    constraints with its energy)."""
    return target if float(weight) == 1.0 else ScaledTarget(target, float(weight))


def site_log_factor(site: Target, tokens: Tensor) -> Tensor:
    """``(N,)`` float64, the log-factor of a token site's own target (:func:`weighted` of its
    distribution) at complete states ``(N, L)``, with no forward pass: the distribution's
    :meth:`~mlm_ppl.MaskedLMDistribution.log_factor` (its ``constraints``) times the site's
    weight; zeros without constraints or at weight 0."""
    if isinstance(site, ScaledTarget):
        if site.scale == 0:
            return torch.zeros(tokens.shape[0], dtype=torch.float64)
        return site.scale * site_log_factor(site.base, tokens)
    if not isinstance(site, MaskedLMDistribution):
        raise TypeError(f"a token site's target is a MaskedLMDistribution, scaled or not; got {type(site).__name__}")
    return site.log_factor(tokens)


def check_same_mlm_site(name: str, fn: Any, expected: MaskedLMDistribution) -> None:
    """Raise if a token site's distribution differs from the one the kernel was set up with.

    A template, temperature, energy, constraint spec or model that depends on another latent
    site makes that site's conditional depend on the MLM distribution's normaliser, which no
    kernel can compute.
    """
    same = (
        isinstance(fn, MaskedLMDistribution)
        and fn.mlm is expected.mlm
        and fn.energy_name == expected.energy_name
        and fn.temperature == expected.temperature
        and fn.batch_shape == expected.batch_shape
        and torch.equal(fn.template, expected.template)
        and _same_spec(name, fn, expected)
    )
    if not same:
        raise ValueError(
            f"the MaskedLMDistribution of site {name!r} changed with the values of other latent sites (its template, "
            "temperature, energy, constraints or model depends on them); its normaliser is intractable, so that "
            "conditional cannot be sampled. Fix the site's arguments, or make the other site observed"
        )


def _same_spec(name: str, a: MaskedLMDistribution, b: MaskedLMDistribution) -> bool:
    """Whether two token-site distributions have the same constraint spec: none, one object, or
    specs with the same spec-file form (a spec built anew at each model run). Two spec objects
    of which one has no file form (a lambda or closure expert) cannot be compared: a ValueError
    that says to build the spec once, outside the model."""
    if a.constraints is None or b.constraints is None:
        return a.constraints is None and b.constraints is None
    if a.constraints.spec is b.constraints.spec:
        return True
    try:
        return a.constraints.spec.to_dict() == b.constraints.spec.to_dict()
    except ValueError as err:
        raise ValueError(
            f"the constraint spec of site {name!r} is built anew at each run of the model and has no spec-file form "
            f"({err}), so no kernel can tell whether it depends on other latent sites; build the spec once, outside "
            "the model"
        ) from None


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
