"""What a :class:`~mlm_ppl.models.MaskedLMDistribution`'s values are: its template's ids (the fixed
tokens and the masks), and its support :class:`TokenIds`, which Pyro's continuous inference is
refused on, by a message that names the kernels that move token sites, and what Pyro may ask of
a distribution that an energy-based model cannot give (:class:`EnergyRefusals`)."""

from __future__ import annotations

import sys
from typing import Any

import torch
from pyro.distributions import constraints
from torch import Tensor
from torch.distributions import biject_to, transform_to

from .gaps import expand_counts, has_counts
from .masked_lm import MaskedLM

__all__ = ["SVI_REFUSED", "EnergyRefusals", "TokenIds", "template_ids", "under_svi"]


class TokenIds(constraints.Constraint):
    """The support of :class:`MaskedLMDistribution`: sequences of token ids in ``[0, V)``.

    Discrete, so Pyro's continuous inference cannot move it; and where Pyro would look for a
    transform to an unconstrained space (plain ``NUTS(model)``, ``HMC``, autoguides), the one
    registered below refuses with a message naming the kernels that can.
    """

    is_discrete = True
    event_dim = 1

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = int(vocab_size)

    def check(self, value: Tensor) -> Tensor:
        ok = (value >= 0) & (value < self.vocab_size) & (value == value.floor())
        return ok.all(-1)

    def __repr__(self) -> str:
        return f"TokenIds(vocab_size={self.vocab_size})"


def _no_transform(constraint: TokenIds) -> Any:
    raise ValueError(
        "a MaskedLMDistribution site (token ids) reached continuous inference (NUTS, HMC, an autoguide), which "
        "cannot move discrete sites: sample the model with mlm_ppl.MLMGibbs(NUTS(model)) (NUTS for the continuous "
        "sites, MH for the tokens) or mlm_ppl.MLMKernel(model) (token sites only). SVI cannot infer a token site "
        "(its ELBO needs a normalised log_prob): condition it on fixed sequences (obs=...) to fit the other sites"
    )


SVI_REFUSED = (
    "a MaskedLMDistribution site is sampled under SVI (latent in the model, or in the guide): each step would "
    "draw it by approximate "
    "Metropolis-Hastings chains (MaskedLMDistribution.sample) and score it with its unnormalised log_prob, "
    "which is not the ELBO SVI promises. Sample the posterior with MCMC(mlm_ppl.MLMGibbs(NUTS(model))), or "
    "condition the site on fixed sequences (obs=..., poutine.condition) to fit the other sites by SVI"
)


def under_svi() -> bool:
    """Whether the caller runs inside Pyro's SVI or an ELBO (a frame of the stack belongs to one):
    what :meth:`~mlm_ppl.models.MaskedLMDistribution.sample` refuses (:data:`SVI_REFUSED`)."""
    from pyro.infer import SVI
    from pyro.infer.elbo import ELBO

    frame = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), (SVI, ELBO)):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


biject_to.register(TokenIds)(_no_transform)
transform_to.register(TokenIds)(_no_transform)


def template_ids(mlm: MaskedLM, template: str | Tensor) -> Tensor:
    """``(L,)`` the ids of ``template`` (text, with ``MASK{n}`` counts expanded, or ids), checked:
    one unpadded sequence the model accepts."""
    if isinstance(template, str):
        if has_counts(template):  # MASK{13}: 13 masks (a variable gap MASK{a,b} is refused here)
            template = expand_counts(template, mlm.vocab[mlm.mask_id], mlm.max_length)
        return mlm.encode([template], allow_mask=True).input_ids[0]
    if isinstance(template, Tensor):
        ids = template.detach().cpu()
        if ids.dtype != torch.long or ids.dim() != 1:
            raise TypeError(
                f"a template tensor must be 1-D torch.long ids, got {ids.dtype} of shape {tuple(ids.shape)}"
            )
        if ((ids < 0) | (ids >= mlm.vocab_size)).any():
            raise ValueError(f"template ids must lie in [0, {mlm.vocab_size})")
        if ids.numel() > mlm.max_length:
            raise ValueError(
                f"template has {ids.numel()} tokens but model {mlm.name!r} accepts at most {mlm.max_length}"
            )
        if (ids == mlm.pad_id).any():
            raise ValueError("template contains padding; give one unpadded sequence")
        return ids.clone()
    raise TypeError(f"template must be a string or a 1-D tensor of token ids, got {type(template).__name__}")


class EnergyRefusals:
    """What Pyro may ask of a distribution that an energy-based model over sequences cannot give
    (enumeration, moments, entropy, a place in a guide): each refused with the reason and what
    to use instead. A base of :class:`~mlm_ppl.models.MaskedLMDistribution`."""

    _NO_ENUMERATION = (
        "MaskedLMDistribution cannot be enumerated: its support is every sequence of ordinary tokens at the "
        "free positions (V**F of them) and its normaliser is intractable. Sample token sites with MCMC instead: "
        "mlm_ppl.MLMGibbs(NUTS(model)) beside continuous sites, mlm_ppl.MLMGibbs(model) or mlm_ppl.MLMKernel(model) "
        "otherwise (plain NUTS/HMC cannot move discrete sites, and enumeration, TraceEnum_ELBO and infer_discrete "
        "cannot sum this one out)"
    )
    _NO_MOMENTS = (
        "token ids are labels, so MaskedLMDistribution has no {what}; summarise draws through functionals "
        "(mlm_ppl.from_pyro(mcmc), mlm_ppl.to_inference_data(run): log density, Hamming distances, token "
        "indicators) and mlm_ppl.summary"
    )

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError(self._NO_ENUMERATION)

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(self._NO_MOMENTS.format(what="mean"))

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(self._NO_MOMENTS.format(what="variance"))

    def score_parts(self, value: Tensor) -> Any:
        """Refused: Pyro's ELBOs call this for the sites of a *guide*, and an unnormalised
        ``log_prob`` there makes the ELBO and its score-function gradient wrong."""
        raise NotImplementedError(
            "a MaskedLMDistribution site in a guide: its log_prob is unnormalised (the normaliser is intractable), "
            "so the ELBO and its gradient would be wrong. Keep token sites in the model (observed, or sampled with "
            "mlm_ppl.MLMGibbs(NUTS(model)) for the continuous sites beside them) and out of the guide"
        )

    def entropy(self) -> Tensor:
        raise NotImplementedError(
            "the entropy of MaskedLMDistribution needs its intractable normaliser; estimate functionals from draws"
        )
