"""Evaluation metrics: how good and how faithful derived joints are, and how good generations are.

Pair joints (Torroba Hennigen & Kim 2023): :func:`pair_metrics`, :func:`mlm_pair_metrics`,
:func:`compatibility_score`, :func:`evaluate_pairs`, :func:`summarize_pairs`.
Generations (Wang & Cho 2019; Goyal et al. 2021): :func:`corpus_bleu`, :func:`self_bleu`,
:func:`unique_ngrams`, :func:`sample_energies`, :func:`transition_rates`, :func:`identity`,
:func:`nearest_germline`, :func:`mean_pairwise_identity`.
"""

from .generation import (
    corpus_bleu,
    identity,
    mean_pairwise_identity,
    nearest_germline,
    sample_energies,
    self_bleu,
    transition_rates,
    unique_ngrams,
)
from .pairs import (
    CONVENTIONS,
    PAIR_KINDS,
    PAIR_METRICS,
    compatibility_score,
    draw_pairs,
    evaluate_pairs,
    js_divergence,
    kl_divergence,
    mlm_pair_metrics,
    pair_metrics,
    plot_pairs,
    summarize_pairs,
)

__all__ = [
    "CONVENTIONS",
    "PAIR_KINDS",
    "PAIR_METRICS",
    "kl_divergence",
    "js_divergence",
    "compatibility_score",
    "pair_metrics",
    "mlm_pair_metrics",
    "draw_pairs",
    "evaluate_pairs",
    "summarize_pairs",
    "plot_pairs",
    "corpus_bleu",
    "self_bleu",
    "unique_ngrams",
    "sample_energies",
    "transition_rates",
    "identity",
    "nearest_germline",
    "mean_pairwise_identity",
]
