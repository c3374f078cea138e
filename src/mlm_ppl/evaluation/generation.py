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
    """Corpus BLEU (0..1) of ``samples`` with all of ``references`` as references of each sample.

    nltk's ``corpus_bleu`` with its default settings: n-grams up to ``max_n`` with equal
    weights, no smoothing (an n-gram order without any match gives a score of about 1e-78,
    i.e. 0), brevity penalty from the closest reference length.

    Parameters
    ----------
    samples : sequence of str
        The generated sequences.
    references : sequence of str
        The reference corpus, every one a reference of every sample.
    unit : {"residue", "word"}, optional
        How sequences split into tokens: ``"residue"`` (the default; each non-space character)
        or ``"word"`` (whitespace-separated words).
    max_n : int, optional
        The longest n-grams counted (default 4).

    Returns
    -------
    float
        The BLEU score, 0..1.

    Raises
    ------
    ValueError
        When ``samples`` or ``references`` is empty or a single string, ``unit`` is unknown, or
        ``max_n`` is below 1.
    TypeError
        When a sequence is not a string, or ``max_n`` not an integer.

    Examples
    --------
    >>> from mlm_ppl.evaluation import corpus_bleu
    >>> corpus_bleu(["ACDEFGHIK"], ["ACDEFGHIK", "KLMNPQRST"])
    1.0
    >>> corpus_bleu(["the cat sat on the mat"], ["a dog ran"], unit="word") < 1e-6
    True
    """
    hyps = _tokens(samples, unit, "samples")
    refs = _tokens(references, unit, "references")
    return _nltk_corpus_bleu([refs] * len(hyps), hyps, _weights(max_n))


def self_bleu(samples: Sequence[str], *, unit: str = "residue", max_n: int = 4) -> float:
    """Self-BLEU (0..1): corpus BLEU of each sample against all the other samples.

    Higher means less diverse samples. The BLEU is :func:`corpus_bleu`'s.

    Parameters
    ----------
    samples : sequence of str
        The generated sequences, at least two.
    unit : {"residue", "word"}, optional
        How sequences split into tokens: ``"residue"`` (the default; each non-space character)
        or ``"word"`` (whitespace-separated words).
    max_n : int, optional
        The longest n-grams counted (default 4).

    Returns
    -------
    float
        The self-BLEU score, 0..1.

    Raises
    ------
    ValueError
        When there are fewer than two samples (or a single string), ``unit`` is unknown, or
        ``max_n`` is below 1.
    TypeError
        When a sample is not a string, or ``max_n`` not an integer.

    Examples
    --------
    >>> from mlm_ppl.evaluation import self_bleu
    >>> self_bleu(["ACDEFGHIK", "ACDEFGHIK"])  # identical samples: no diversity
    1.0
    >>> self_bleu(["ACDEFGHIK", "KLMNPQRST"]) < 1e-6
    True
    """
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

    With ``references``: the corpus is the references ("relative to the data"). Without: the
    corpus of each sample is the other samples (uniqueness within the samples).

    Parameters
    ----------
    samples : sequence of str
        The generated sequences.
    references : sequence of str or None, optional
        The reference corpus; None (the default) for uniqueness within the samples.
    n : int
        The n-gram length (keyword-only, required).
    unit : {"residue", "word"}, optional
        How sequences split into tokens: ``"residue"`` (the default; each non-space character)
        or ``"word"`` (whitespace-separated words).

    Returns
    -------
    float
        The percentage of n-gram occurrences of the samples found nowhere in the corpus.

    Raises
    ------
    ValueError
        When ``samples`` (or ``references``) is empty or a single string, no sample has ``n``
        tokens, ``references`` is None and there are fewer than two samples, ``unit`` is
        unknown, or ``n`` is below 1.
    TypeError
        When a sequence is not a string, or ``n`` not an integer.

    Examples
    --------
    Of the bigrams AC, CD, DE, AC, CD, DF, two occur in one sample only:

    >>> from mlm_ppl.evaluation import unique_ngrams
    >>> round(unique_ngrams(["ACDE", "ACDF"], n=2), 1)
    33.3
    >>> unique_ngrams(["ACDE"], ["ACDE", "KLMN"], n=2)
    0.0
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
    """Mean ``E_norm`` and ``E_raw`` (nats) of samples, repeats counted.

    Each distinct sequence is scored once (:meth:`~mlm_ppl.MaskedLM.energy_terms`), both
    energies from the same forward passes.

    Parameters
    ----------
    mlm : MaskedLM
        The model that scores the samples.
    samples : sequence of str
        The sequences, repeats allowed.

    Returns
    -------
    dict of str to float
        ``{"e_norm": ..., "e_raw": ...}``, the means over the samples.

    Raises
    ------
    ValueError
        When ``samples`` is empty, or a sequence cannot be encoded by the model.

    Examples
    --------
    >>> from mlm_ppl.evaluation import sample_energies
    >>> from mlm_ppl.testing import tiny_esm
    >>> energies = sample_energies(tiny_esm(), ["ACDE", "ACDE", "KLMN"])
    >>> sorted(energies)
    ['e_norm', 'e_raw']
    """
    samples = list(samples)
    if not samples:
        raise ValueError("samples must be a non-empty list of sequences")
    distinct = sorted(set(samples))
    terms = mlm.energy_terms(distinct)
    index = {s: i for i, s in enumerate(distinct)}
    rows = torch.tensor([index[s] for s in samples])
    return {"e_norm": float(terms.total("norm")[rows].mean()), "e_raw": float(terms.total("raw")[rows].mean())}


def transition_rates(run) -> dict[str, float]:
    """Acceptance rate and novel-transition rate of a run.

    The novel-transition rate counts accepted proposals that change the state (Goyal et al.
    2021); these are the rates :func:`~mlm_ppl.summary` reports.

    Parameters
    ----------
    run : Run
        A :class:`~mlm_ppl.Run`, with per-draw ``is_accepted`` and ``n_changed`` statistics.

    Returns
    -------
    dict of str to float
        ``{"acceptance_rate": ..., "novel_transition_rate": ...}``, fractions of all draws.

    Examples
    --------
    >>> from mlm_ppl import PseudoGibbs, run_chains
    >>> from mlm_ppl.evaluation import transition_rates
    >>> from mlm_ppl.testing import goyal_counterexample
    >>> run = run_chains(PseudoGibbs(goyal_counterexample()), num_chains=2, num_samples=10, init="uniform")
    >>> rates = transition_rates(run)
    >>> rates["acceptance_rate"]  # pseudo-Gibbs accepts every draw; not every one changes the state
    1.0
    >>> rates["novel_transition_rate"] <= 1.0
    True
    """
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
    the length of the shorter sequence. Whitespace is ignored.

    Parameters
    ----------
    a, b : str
        The two sequences.
    aligner : Bio.Align.PairwiseAligner or None, optional
        The aligner of sequences of different lengths; None (the default) for the one above.

    Returns
    -------
    float
        The identity, 0..1.

    Raises
    ------
    ValueError
        When either sequence is empty.
    TypeError
        When a sequence is not a string.
    ModuleNotFoundError
        When the sequences differ in length and Biopython is not installed
        (``pip install 'mlm-ppl[antibody]'``).

    Examples
    --------
    >>> from mlm_ppl.evaluation import identity
    >>> identity("ACDE", "ACDF")
    0.75
    >>> identity("ACDEF", "CDEF")  # aligned: CDEF is all in ACDEF
    1.0
    """
    x, y = "".join(tokenize(a)), "".join(tokenize(b))
    if not x or not y:
        raise ValueError("identity needs two non-empty sequences")
    if len(x) == len(y):
        return sum(p == q for p, q in zip(x, y)) / len(x)
    alignment = (aligner or _aligner()).align(x, y)[0]
    return alignment.counts().identities / min(len(x), len(y))


def nearest_germline(sequence: str, germlines: Mapping[str, str], *, aligner=None) -> tuple[str, float]:
    """Find the germline with the highest :func:`identity` to a sequence.

    Parameters
    ----------
    sequence : str
        The sequence, e.g. a designed variable domain.
    germlines : mapping of str to str
        Germline name to sequence, e.g. :func:`~mlm_ppl.data.germline_sequences`.
    aligner : Bio.Align.PairwiseAligner or None, optional
        The aligner of sequences of different lengths (see :func:`identity`).

    Returns
    -------
    name : str
        The nearest germline (the first in ``germlines`` on a tie).
    identity : float
        Its identity to ``sequence``, 0..1.

    Raises
    ------
    ValueError
        When ``germlines`` is empty, or a sequence is empty.
    ModuleNotFoundError
        When Biopython is not installed.

    Examples
    --------
    >>> from mlm_ppl.evaluation import nearest_germline
    >>> nearest_germline("ACDEF", {"g1": "ACDEY", "g2": "KLMNP"})
    ('g1', 0.8)
    """
    if not germlines:
        raise ValueError("no germline sequences given")
    aligner = aligner or _aligner()
    scores = {name: identity(sequence, g, aligner=aligner) for name, g in germlines.items()}
    best = max(scores, key=scores.__getitem__)
    return best, scores[best]


def mean_pairwise_identity(samples: Sequence[str], *, aligner=None) -> float:
    """Mean :func:`identity` over all pairs of samples (higher = less diverse).

    Parameters
    ----------
    samples : sequence of str
        The sequences, at least two.
    aligner : Bio.Align.PairwiseAligner or None, optional
        The aligner of sequences of different lengths (see :func:`identity`).

    Returns
    -------
    float
        The mean identity over the ``n (n - 1) / 2`` pairs, 0..1.

    Raises
    ------
    ValueError
        When there are fewer than two samples, or a sample is empty.
    ModuleNotFoundError
        When Biopython is not installed.

    Examples
    --------
    >>> from mlm_ppl.evaluation import mean_pairwise_identity
    >>> round(mean_pairwise_identity(["ACDE", "ACDF", "ACDE"]), 2)  # (0.75 + 1 + 0.75) / 3
    0.83
    """
    if len(samples) < 2:
        raise ValueError("pairwise identity needs at least two samples")
    aligner = aligner or _aligner()
    values = [identity(a, b, aligner=aligner) for a, b in itertools.combinations(samples, 2)]
    return sum(values) / len(values)
