"""Energies of a masked LM (Goyal, Dyer & Berg-Kirkpatrick 2021).

For a sequence ``x`` with scorable positions ``t`` (ordinary tokens; never special
tokens), each term is read from the MLM with position ``t`` masked:

* ``E_raw(x)  = -sum_t logit_t(x_t | x_\\t)``       (raw-logit energy)
* ``E_norm(x) = -sum_t log p(x_t | x_\\t)``         (locally normalised energy; the
  negative pseudo-log-likelihood, PLL, of Salazar et al. 2020 and Wang & Cho 2019)

Both come from the same forward passes, so :func:`energy_terms` always computes both.
The ``within_word_l2r`` variant (Kauf & Ivanova 2023) also masks the tokens to the right
of ``t`` inside the same word, which removes the PLL's bias in favour of multi-token words;
for residue-level models every residue is a word and it equals the plain PLL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .tokens import Encoding

if TYPE_CHECKING:  # pragma: no cover
    from .masked_lm import MaskedLM

__all__ = ["ENERGIES", "VARIANTS", "EnergyTerms", "energy_terms", "check_energy", "site_log_probs"]

ENERGIES = ("norm", "raw")
"""The energies: ``norm``, ``E_norm(x) = -sum_t log p(x_t | x_\\t)`` (the negative pseudo-log-
likelihood), and ``raw``, ``E_raw(x) = -sum_t logit_t(x_t | x_\\t)`` (Goyal et al. 2021)."""
VARIANTS = ("pll", "within_word_l2r")
"""How the terms are read: ``pll`` masks one token at a time; ``within_word_l2r`` also masks the
later tokens of the same word (Kauf & Ivanova's PLL-word-l2r), for subword vocabularies."""


def check_energy(energy: str) -> str:
    """Validate an energy name ("norm" or "raw") and return it."""
    if energy not in ENERGIES:
        raise ValueError(f"unknown energy {energy!r}; choose one of {', '.join(map(repr, ENERGIES))}")
    return energy


def token_scores(logits: Tensor, targets: Tensor) -> Tensor:
    """``(n, 2)``: the logit and the log-probability of ``targets`` (n,) under ``logits`` (n, V).

    The negated columns are the ``E_raw`` and ``E_norm`` terms of those tokens.
    """
    logit = logits.gather(-1, targets[:, None])[:, 0]
    return torch.stack([logit, logit - torch.logsumexp(logits, dim=-1)], dim=-1)


@dataclass(frozen=True)
class EnergyTerms:
    """Per-position energy terms of a batch; both energies from one set of forward passes.

    Attributes
    ----------
    encoding : Encoding
        The encoded batch the terms belong to.
    norm : Tensor
        ``(B, T)`` ``-log p(x_t | x_\\t)`` at scored positions, 0 elsewhere; float32 (float64 for a
        float64 model).
    raw : Tensor
        ``(B, T)`` ``-logit_t(x_t | x_\\t)`` at scored positions, 0 elsewhere; same dtype.
    """

    encoding: Encoding
    norm: Tensor
    raw: Tensor

    @property
    def scored(self) -> Tensor:
        """``(B, T)`` bool, the positions that contribute a term."""
        return self.encoding.scorable

    @property
    def n_positions(self) -> Tensor:
        """``(B,)`` number of scored positions per sequence."""
        return self.scored.sum(-1)

    def total(self, energy: str = "norm") -> Tensor:
        """``(B,)`` energy of each sequence in nats: the sum of its terms."""
        terms = self.norm if check_energy(energy) == "norm" else self.raw
        return terms.sum(-1)


def energy_terms(
    mlm: "MaskedLM",
    sequences: str | Sequence[str] | Encoding,
    *,
    variant: str = "pll",
    progress: bool = False,
) -> EnergyTerms:
    """Per-position ``E_norm`` and ``E_raw`` terms of each sequence.

    Parameters
    ----------
    mlm : MaskedLM
    sequences : str, sequence of str, or Encoding
        Complete sequences (no mask tokens).
    variant : {"pll", "within_word_l2r"}
        Which positions are masked when reading the term of position ``t``: ``t`` alone,
        or ``t`` and the later tokens of its word (Kauf & Ivanova 2023).
    progress : bool
        Show a progress bar over masked copies.

    Returns
    -------
    EnergyTerms
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(map(repr, VARIANTS))}")
    enc = sequences if isinstance(sequences, Encoding) else mlm.encode(sequences)
    if (enc.input_ids == mlm.mask_id).any():
        raise ValueError("a sequence contains the mask token; energies need complete sequences")
    rows, query = enc.scorable.nonzero(as_tuple=True)  # (N,), (N,)
    N, T = rows.numel(), enc.input_ids.shape[1]
    masks = torch.zeros((N, T), dtype=torch.bool)
    masks[torch.arange(N), query] = True
    if variant == "within_word_l2r":
        words = enc.word_ids[rows]  # (N, T)
        same_word = (words == words[torch.arange(N), query][:, None]) & (words >= 0)
        right = torch.arange(T)[None, :] >= query[:, None]
        masks |= same_word & right

    out = mlm.masked_reduce(enc, rows, masks, query, token_scores, progress=progress)  # (N, 2)
    raw = torch.zeros(enc.input_ids.shape, dtype=out.dtype)
    norm = torch.zeros_like(raw)
    raw[rows, query] = -out[:, 0]
    norm[rows, query] = -out[:, 1]
    return EnergyTerms(enc, norm=norm, raw=raw)


def site_log_probs(
    mlm: "MaskedLM", tokens: Tensor, positions: Sequence[int], *, pad_id: int | None = None, progress: bool = False
) -> Tensor:
    """``(N, P)`` float64: ``log p(x_t | x_\\t)`` at each of ``positions`` (token positions of the
    states ``tokens`` ``(N, T)``, e.g. a run's free positions), each read with that position alone
    masked: the ``E_norm`` terms of the designed positions, negated.

    ``pad_id``: the states are a variable gap's padded states (:class:`~mlm_ppl.models.gap_target.
    GapTarget`): the pads are taken out before the model reads a state, and a position holding a
    pad (no residue there) gives NaN. One batched pass over ``N x P`` masked copies at most.
    """
    tokens = torch.as_tensor(tokens, dtype=torch.long)
    pos = torch.as_tensor(list(positions), dtype=torch.long)
    out = torch.full((tokens.shape[0], pos.numel()), float("nan"), dtype=torch.float64)
    if tokens.shape[0] == 0 or pos.numel() == 0:
        return out
    present = tokens != pad_id if pad_id is not None else torch.ones_like(tokens, dtype=torch.bool)
    # states with the same pads are read together: the same length, the same columns
    _, group = torch.unique(present, dim=0, return_inverse=True)
    for g in torch.unique(group):
        rows = (group == g).nonzero().flatten()
        keep = present[rows[0]]
        where = torch.cumsum(keep.long(), 0) - 1  # a kept column's index in the state without pads
        sites = keep[pos]  # the positions that hold a residue
        query = where[pos[sites]]
        enc = mlm.encoding_from_ids(tokens[rows][:, keep])
        n, k = rows.numel(), query.numel()
        if k == 0:
            continue
        copy_rows = torch.arange(n).repeat_interleave(k)
        copy_query = query.repeat(n)
        masks = torch.zeros((n * k, enc.input_ids.shape[1]), dtype=torch.bool)
        masks[torch.arange(n * k), copy_query] = True
        scores = mlm.masked_reduce(enc, copy_rows, masks, copy_query, token_scores, progress=progress)
        values = torch.full((n, pos.numel()), float("nan"), dtype=torch.float64)
        values[:, sites] = scores[:, 1].double().reshape(n, k)
        out[rows] = values
    return out
