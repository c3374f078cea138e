"""Metrics of generated sequences, as used by Wang & Cho (2019) and Goyal et al. (2021).

Quality and diversity of a set of samples:

``corpus_bleu``      BLEU of the samples against a reference set (every reference is a
                     reference of every sample), n-grams up to 4 with equal weights: nltk's
                     ``corpus_bleu`` with its default settings (no smoothing, so an n-gram order
                     without any match gives a score of about 1e-78, i.e. 0; brevity penalty
                     from the closest reference length).
``self_bleu``        the same with each sample's references being the *other* samples
                     (higher = less diverse).
``unique_ngrams``    the percentage of the samples' n-gram occurrences that never occur in a
                     corpus: the references ("relative to the data"), or, for each sample,
                     the other samples ("within the samples").
``sample_energies``  mean ``E_norm`` and ``E_raw`` of the samples (the same forward passes).
``transition_rates`` acceptance rate and novel-transition rate (accepted proposals that change
                     the state) of a run.
``identity``         residue identity of two sequences: position by position when they have the
                     same length (designs of one template), else after a semi-global alignment
                     (free end gaps); identical pairs over the length of the shorter sequence.
                     ``nearest_germline`` and ``mean_pairwise_identity`` build on it.

Sequences are split into tokens with ``unit``: ``"residue"`` (each non-space character; for
proteins and antibodies) or ``"word"`` (whitespace; for text).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping, Sequence

import torch

from .._checks import check_count
from ..diagnostics import acceptance_rates

__all__ = [
    "UNITS",
    "tokenize",
    "corpus_bleu",
    "self_bleu",
    "ngrams",
    "unique_ngrams",
    "sample_energies",
    "transition_rates",
    "identity",
    "nearest_germline",
    "mean_pairwise_identity",
]

UNITS = ("residue", "word")


def tokenize(sequence: str, unit: str = "residue") -> list[str]:
    """Tokens of a sequence: residues (non-space characters) or whitespace-separated words."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    if not isinstance(sequence, str):
        raise TypeError(f"sequences must be str, got {type(sequence).__name__}")
    return [c for c in sequence if not c.isspace()] if unit == "residue" else sequence.split()


def _tokens(sequences: Sequence[str], unit: str, what: str) -> list[list[str]]:
    if isinstance(sequences, str) or not len(sequences):
        raise ValueError(f"{what} must be a non-empty list of sequences")
    return [tokenize(s, unit) for s in sequences]


def _weights(max_n: int) -> tuple[float, ...]:
    max_n = check_count(max_n, "max_n")
    return (1.0 / max_n,) * max_n


def _nltk_corpus_bleu(references: list[list[list[str]]], hypotheses: list[list[str]], weights) -> float:
    try:
        from nltk.translate.bleu_score import corpus_bleu as nltk_corpus_bleu
    except ModuleNotFoundError:  # pragma: no cover - nltk is a dependency
        raise ModuleNotFoundError("BLEU comes from nltk: pip install nltk") from None
    with warnings.catch_warnings():  # nltk warns when an n-gram order has no match; the score is then 0
        warnings.simplefilter("ignore", UserWarning)
        return float(nltk_corpus_bleu(references, hypotheses, weights=weights))


def corpus_bleu(samples: Sequence[str], references: Sequence[str], *, unit: str = "residue", max_n: int = 4) -> float:
    """Corpus BLEU (0..1) of ``samples`` with all of ``references`` as references of each sample."""
    hyps = _tokens(samples, unit, "samples")
    refs = _tokens(references, unit, "references")
    return _nltk_corpus_bleu([refs] * len(hyps), hyps, _weights(max_n))


def self_bleu(samples: Sequence[str], *, unit: str = "residue", max_n: int = 4) -> float:
    """Self-BLEU (0..1): corpus BLEU of each sample against all the other samples."""
    hyps = _tokens(samples, unit, "samples")
    if len(hyps) < 2:
        raise ValueError("self-BLEU needs at least two samples")
    refs = [hyps[:i] + hyps[i + 1 :] for i in range(len(hyps))]
    return _nltk_corpus_bleu(refs, hyps, _weights(max_n))


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """The n-grams of a token list, in order."""
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def unique_ngrams(
    samples: Sequence[str], references: Sequence[str] | None = None, *, n: int, unit: str = "residue"
) -> float:
    """Percentage (0..100) of the samples' n-gram occurrences that do not occur in a corpus.

    With ``references``: the corpus is the references. Without: the corpus of each sample is
    the other samples (uniqueness within the samples).
    """
    _weights(n)
    hyps = _tokens(samples, unit, "samples")
    grams = [ngrams(h, n) for h in hyps]
    total = sum(len(g) for g in grams)
    if total == 0:
        raise ValueError(f"the samples have no {n}-grams (all shorter than {n} tokens)")
    if references is not None:
        seen = {g for r in _tokens(references, unit, "references") for g in ngrams(r, n)}
        novel = sum(g not in seen for gs in grams for g in gs)
    else:
        if len(hyps) < 2:
            raise ValueError("uniqueness within the samples needs at least two samples")
        owners: dict[tuple[str, ...], set[int]] = {}
        for i, gs in enumerate(grams):
            for g in gs:
                owners.setdefault(g, set()).add(i)
        novel = sum(owners[g] == {i} for i, gs in enumerate(grams) for g in gs)
    return 100.0 * novel / total


def sample_energies(mlm, samples: Sequence[str]) -> dict[str, float]:
    """Mean ``E_norm`` and ``E_raw`` (nats) over the samples, repeats counted; each distinct
    sequence is scored once, both energies from the same forward passes."""
    samples = list(samples)
    if not samples:
        raise ValueError("samples must be a non-empty list of sequences")
    distinct = sorted(set(samples))
    terms = mlm.energy_terms(distinct)
    index = {s: i for i, s in enumerate(distinct)}
    rows = torch.tensor([index[s] for s in samples])
    return {"e_norm": float(terms.total("norm")[rows].mean()), "e_raw": float(terms.total("raw")[rows].mean())}


def transition_rates(run) -> dict[str, float]:
    """Acceptance rate and novel-transition rate of a :class:`~mlm_ppl.inference.Run`
    (the same rates :func:`mlm_ppl.summary` reports)."""
    acceptance, novel = acceptance_rates(run.stats["is_accepted"], run.stats["n_changed"])
    return {"acceptance_rate": acceptance, "novel_transition_rate": novel}


def _aligner():
    try:
        from Bio.Align import PairwiseAligner
    except ModuleNotFoundError:
        raise ModuleNotFoundError("sequence identity uses Biopython: pip install 'mlm-ppl[antibody]'") from None
    # semi-global (end gaps free); mismatches cost nothing, so the alignment maximises identical
    # pairs less internal gap penalties and never prefers an empty overlap to a partial match
    return PairwiseAligner(
        mode="global",
        match_score=1.0,
        mismatch_score=0.0,
        open_gap_score=-2.0,
        extend_gap_score=-1.0,
        end_gap_score=0.0,
    )


def identity(a: str, b: str, *, aligner=None) -> float:
    """Residue identity (0..1) of two sequences.

    Equal lengths: the fraction of positions with the same residue. Otherwise: identical pairs
    of a semi-global alignment (match 1, mismatch 0, gap open -2, extend -1, free end gaps) over
    the length of the shorter sequence.
    """
    x, y = "".join(tokenize(a)), "".join(tokenize(b))
    if not x or not y:
        raise ValueError("identity needs two non-empty sequences")
    if len(x) == len(y):
        return sum(p == q for p, q in zip(x, y)) / len(x)
    alignment = (aligner or _aligner()).align(x, y)[0]
    return alignment.counts().identities / min(len(x), len(y))


def nearest_germline(sequence: str, germlines: Mapping[str, str], *, aligner=None) -> tuple[str, float]:
    """The germline with the highest :func:`identity` to ``sequence``, and that identity."""
    if not germlines:
        raise ValueError("no germline sequences given")
    aligner = aligner or _aligner()
    scores = {name: identity(sequence, g, aligner=aligner) for name, g in germlines.items()}
    best = max(scores, key=scores.__getitem__)
    return best, scores[best]


def mean_pairwise_identity(samples: Sequence[str], *, aligner=None) -> float:
    """Mean :func:`identity` over all pairs of samples (higher = less diverse)."""
    if len(samples) < 2:
        raise ValueError("pairwise identity needs at least two samples")
    aligner = aligner or _aligner()
    values = [identity(a, b, aligner=aligner) for a, b in itertools.combinations(samples, 2)]
    return sum(values) / len(values)
