"""Evaluation metrics: how good and how faithful derived joints are (and, later, generations).

Pair joints (Torroba Hennigen & Kim 2023): :func:`pair_metrics`, :func:`mlm_pair_metrics`,
:func:`compatibility_score`, :func:`evaluate_pairs`, :func:`summarize_pairs`.
"""

from .pairs import (
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
]
