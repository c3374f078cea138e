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

__all__ = ["ENERGIES", "VARIANTS", "EnergyTerms", "energy_terms", "check_energy"]

ENERGIES = ("norm", "raw")
VARIANTS = ("pll", "within_word_l2r")


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
