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

    What :func:`energy_terms` returns.

    Parameters
    ----------
    encoding : Encoding
        The encoded batch the terms belong to.
    norm : torch.Tensor
        Shape ``(B, T)``, ``-log p(x_t | x_\\t)`` at scored positions, 0 elsewhere; float32 (float64
        for a float64 model).
    raw : torch.Tensor
        Shape ``(B, T)``, ``-logit_t(x_t | x_\\t)`` at scored positions, 0 elsewhere; same dtype.

    Examples
    --------
    >>> from mlm_ppl import energy_terms
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> terms = energy_terms(tiny_residue_bert("ACDE", seed=1), ["ACD", "CE"])  # an EnergyTerms
    >>> terms.norm.shape, terms.n_positions.tolist()  # [CLS] ACD [SEP] and [CLS] CE [SEP] [PAD]
    (torch.Size([2, 5]), [3, 2])
    >>> terms.total("norm").shape
    torch.Size([2])
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
        """The energy of each sequence in nats: the sum of its terms.

        Parameters
        ----------
        energy : {"norm", "raw"}, optional
            Which terms to sum: ``norm`` (the default) or ``raw``.

        Returns
        -------
        torch.Tensor
            Shape ``(B,)``, the energies.

        Raises
        ------
        ValueError
            For an unknown ``energy``.
        """
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

    Both energies come from the same forward passes: one masked copy per scorable position of
    each sequence.

    Parameters
    ----------
    mlm : MaskedLM
        The masked language model that reads the terms.
    sequences : str, sequence of str, or Encoding
        Complete sequences (no mask tokens), as text or encoded.
    variant : {"pll", "within_word_l2r"}, optional
        Which positions are masked when reading the term of position ``t``: ``t`` alone
        (``"pll"``, the default), or ``t`` and the later tokens of its word (Kauf & Ivanova 2023).
    progress : bool, optional
        Show a progress bar over masked copies (default False).

    Returns
    -------
    EnergyTerms
        The ``E_norm`` and ``E_raw`` terms of every position of each sequence, and its encoding.

    Raises
    ------
    ValueError
        For an unknown ``variant``, a sequence holding the mask token, or a sequence the model's
        codec refuses (:meth:`~mlm_ppl.models.TokenCodec.encode`).
    TypeError
        If ``sequences`` are not strings or an :class:`~mlm_ppl.Encoding`.
    NonFiniteLogitsError
        If the model returns nan or inf logits.

    Examples
    --------
    >>> from mlm_ppl import energy_terms
    >>> from mlm_ppl.testing import tiny_bert
    >>> mlm = tiny_bert()
    >>> terms = energy_terms(mlm, ["the cats jumped", "a dog ran"])
    >>> terms.scored.sum(-1).tolist()  # "cats" and "jumped" are two word pieces each
    [5, 3]
    >>> bool((terms.total("norm") == mlm.score(["the cats jumped", "a dog ran"])).all())
    True
    >>> l2r = energy_terms(mlm, "the cats jumped", variant="within_word_l2r")  # masks "##s" with "cat"
    >>> l2r.total().shape
    torch.Size([1])
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
