"""Metrics of joints over two positions, as in Torroba Hennigen & Kim (2023), section 4.

For a pair of positions ``(a, b)`` of a held-out sequence with observed tokens
``(w_a, w_b)`` and a derived joint ``q``:

``pair_nll``     ``-log q(w_a, w_b) / 2``; the pairwise perplexity (P-PPL) is ``exp`` of its
                 mean over pairs.
``unary_nll``    ``-(log q(w_a | w_b) + log q(w_b | w_a)) / 2``; the unary perplexity (U-PPL)
                 is ``exp`` of its mean. For the MLM itself (method ``"mlm"``) the same with
                 the MLM's conditionals ``P_a``, ``P_b``: the baseline.
``kl_fwd_*``     ``KL(P || q)`` from the MLM's conditionals to the joint's,
``kl_rev_*``     ``KL(q || P)``, and
``jsd_*``        the Jensen-Shannon divergence, each averaged over the two positions;
                 ``*_gold`` conditions on the observed token of the other position,
                 ``*_all`` averages uniformly over every conditioning value (``K_b`` + ``K_a``).
``compatibility`` Arnold & Press's score of the MLM's two conditional families: 0 when they
                 are the conditionals of one joint, positive otherwise (method ``"mlm"``).

All divergences are in nats, over the candidate support of the pair.

Two conventions (:data:`CONVENTIONS`): ``"mlm-ppl"`` (default) and ``"reference"``, the
setting of the paper's code, ``ltorroba/lms-from-mlms`` ``evaluate_kl_compatibility.py`` run
without ``--joint-size`` (its default); the differences are tabled in ``docs/pairs.md``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from .._checks import check_choice, check_count
from .._files import save_figure
from ..models.pairs import PAIR_METHODS, PIVOTS, PairConditionals, PairJoint, pair_conditionals

__all__ = [
    "CONVENTIONS",
    "REFERENCE_AG",
    "PAIR_KINDS",
    "PAIR_METRICS",
    "ROW_FIELDS",
    "kl_divergence",
    "js_divergence",
    "compatibility_score",
    "pair_metrics",
    "mlm_pair_metrics",
    "parse_methods",
    "draw_pairs",
    "evaluate_pairs",
    "summarize_pairs",
    "paired_differences",
    "format_summary",
    "format_differences",
    "plot_pairs",
]

PAIR_KINDS = ("contiguous", "random")
"""Which pairs of positions an evaluation draws: neighbours, or two positions at random."""
CONVENTIONS = ("mlm-ppl", "reference")
"""``"mlm-ppl"``: the candidates of a position are the ordinary tokens (or ``K`` of them), AG
runs to its tolerance, a random pair's positions are sorted (HCB pivots on the left one).
``"reference"``: the reference code's whole-vocabulary mode: every token id, special tokens
included (``support="all"``); AG stops after 40 plain steps (``REFERENCE_AG``); a random
pair keeps the order its positions were drawn in (HCB pivots on the first drawn)."""
REFERENCE_AG = {"max_iter": 40, "accelerate": False}
"""The reference code's Arnold-Gokhale iteration: ``--iter-steps 40`` plain steps from uniform."""
_DIVERGENCES = ("kl_fwd", "kl_rev", "jsd")
#: Metrics in the summary table, in order.
PAIR_METRICS = (
    "pair_ppl",
    "unary_ppl",
    *(f"{d}_gold" for d in _DIVERGENCES),
    *(f"{d}_all" for d in _DIVERGENCES),
    "compatibility",
)
#: Columns of the per-pair CSV (one row per pair and method, plus the ``mlm`` baseline row).
ROW_FIELDS = (
    "pair",
    "sequence",
    "a",
    "b",
    "token_a",
    "token_b",
    "method",
    "pair_nll",
    "unary_nll",
    *PAIR_METRICS[2:],
    "converged",
    "iterations",
    "copies",
    "seconds",
)


# ---------------------------------------------------------------------- divergences
def kl_divergence(log_p: Tensor, log_q: Tensor, dim: int = -1) -> Tensor:
    """Kullback-Leibler divergence ``KL(p || q) = sum p (log p - log q)`` along ``dim``.

    Terms where ``p`` is 0 count 0 (``0 log 0 = 0``). Clamped at 0: for (nearly) equal
    distributions the sum can round to about -1e-18.

    Parameters
    ----------
    log_p, log_q : torch.Tensor
        Log-probabilities of the two distributions, normalised along ``dim``; shapes that
        broadcast together.
    dim : int, optional
        The dimension the distributions run along (default -1, the last).

    Returns
    -------
    torch.Tensor
        The divergences in nats, ``dim`` reduced.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.evaluation import kl_divergence
    >>> p, q = torch.tensor([0.5, 0.5]).log(), torch.tensor([0.9, 0.1]).log()
    >>> kl_divergence(p, p)
    tensor(0.)
    >>> bool(kl_divergence(p, q) > 0)
    True
    """
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p)).sum(dim).clamp(min=0.0)


def js_divergence(log_p: Tensor, log_q: Tensor, dim: int = -1) -> Tensor:
    """Jensen-Shannon divergence ``(KL(p || m) + KL(q || m)) / 2``, ``m = (p + q) / 2``.

    Symmetric in ``p`` and ``q``, and at most ``log 2``.

    Parameters
    ----------
    log_p, log_q : torch.Tensor
        Log-probabilities of the two distributions, normalised along ``dim``; shapes that
        broadcast together.
    dim : int, optional
        The dimension the distributions run along (default -1, the last).

    Returns
    -------
    torch.Tensor
        The divergences in nats, ``dim`` reduced.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.evaluation import js_divergence
    >>> p, q = torch.tensor([1.0, 0.0]).log(), torch.tensor([0.0, 1.0]).log()
    >>> round(float(js_divergence(p, q)), 4)  # disjoint supports: log 2
    0.6931
    """
    log_m = torch.logaddexp(log_p, log_q) - math.log(2.0)
    return 0.5 * (kl_divergence(log_p, log_m, dim) + kl_divergence(log_q, log_m, dim))


def compatibility_score(log_cond_a: Tensor, log_cond_b: Tensor) -> Tensor:
    """Arnold & Press (1989) incompatibility of two conditional families, as in the paper.

    ``A = P(x_a | x_b)`` (columns sum to 1) and ``B = P(x_b | x_a)`` (rows sum to 1) are
    compatible iff ``C = A / B`` factorises as ``u_i v_j``. The score is the mean over cells of
    ``(log C_ij + log C_.. - log C_i. - log C_.j)^2``: zero for compatible families.

    Parameters
    ----------
    log_cond_a : torch.Tensor
        Shape ``(K_a, K_b)``, ``log A``: ``log P(x_a | x_b)``, each column normalised
        (:attr:`~mlm_ppl.PairConditionals.log_cond_a`).
    log_cond_b : torch.Tensor
        Shape ``(K_a, K_b)``, ``log B``: ``log P(x_b | x_a)``, each row normalised
        (:attr:`~mlm_ppl.PairConditionals.log_cond_b`).

    Returns
    -------
    torch.Tensor
        The score, a scalar ``>= 0``.

    Examples
    --------
    Conditionals of one joint are compatible; Goyal et al.'s are not:

    >>> from mlm_ppl.evaluation import compatibility_score
    >>> from mlm_ppl.testing import goyal_counterexample, table_from_joint, table_pair_conditionals
    >>> pair = table_pair_conditionals(table_from_joint([[0.4, 0.1], [0.2, 0.3]]))
    >>> bool(compatibility_score(pair.log_cond_a, pair.log_cond_b) < 1e-12)
    True
    >>> pair = table_pair_conditionals(goyal_counterexample())
    >>> bool(compatibility_score(pair.log_cond_a, pair.log_cond_b) > 1)
    True
    """
    log_c = log_cond_a - log_cond_b
    total = torch.logsumexp(log_c.reshape(-1), 0)
    rows = torch.logsumexp(log_c, 1, keepdim=True)
    cols = torch.logsumexp(log_c, 0, keepdim=True)
    return ((log_c + total - rows - cols) ** 2).mean()


def _divergences(log_p_a, log_q_a, log_p_b, log_q_b, i: int, j: int) -> dict[str, float]:
    """Gold and all-values averages of the three divergences between two conditional families."""
    out = {}
    for name, fn, swap in (
        ("kl_fwd", kl_divergence, False),
        ("kl_rev", kl_divergence, True),
        ("jsd", js_divergence, False),
    ):
        pa, qa, pb, qb = (log_q_a, log_p_a, log_q_b, log_p_b) if swap else (log_p_a, log_q_a, log_p_b, log_q_b)
        da = fn(pa, qa, 0)  # (K_b,): one per conditioning value of b
        db = fn(pb, qb, 1)  # (K_a,)
        out[f"{name}_gold"] = float((da[j] + db[i]) / 2)
        out[f"{name}_all"] = float(torch.cat([da, db]).mean())
    return out


def _gold(cond: PairConditionals) -> tuple[int, int]:
    gold = cond.observed_index
    if gold is None:
        raise ValueError(
            f"the observed tokens {cond.observed} are not both in the support; metrics need them "
            "(use support=None, 'all' or an int K, which always include them)"
        )
    return gold


def pair_metrics(joint: PairJoint, cond: PairConditionals) -> dict[str, float]:
    """Perplexity terms and faithfulness of a derived joint to the MLM conditionals it came from.

    The metrics are those of the module's table (Torroba Hennigen & Kim 2023, section 4): the
    pair and unary NLLs of the observed tokens, and the forward and reverse KL and the
    Jensen-Shannon divergence between the MLM's conditionals and the joint's, in nats.

    Parameters
    ----------
    joint : PairJoint
        A joint derived from ``cond`` (:meth:`~mlm_ppl.PairConditionals.joint`), over the same
        candidates.
    cond : PairConditionals
        The MLM's conditionals at the pair, its observed tokens among the candidates.

    Returns
    -------
    dict of str to float
        ``pair_nll``, ``unary_nll``, and ``kl_fwd``, ``kl_rev``, ``jsd`` each with the suffix
        ``_gold`` (given the observed token of the other position) and ``_all`` (averaged over
        every conditioning value).

    Raises
    ------
    ValueError
        When the joint and the conditionals have different candidates, or the observed tokens
        are not both among the candidates.

    Examples
    --------
    Arnold-Gokhale recovers the joint of compatible conditionals:

    >>> from mlm_ppl.evaluation import pair_metrics
    >>> from mlm_ppl.testing import table_from_joint, table_pair_conditionals
    >>> cond = table_pair_conditionals(table_from_joint([[0.4, 0.1], [0.2, 0.3]]))
    >>> metrics = pair_metrics(cond.joint("ag"), cond)
    >>> metrics["kl_fwd_all"] < 1e-6
    True
    """
    if not (torch.equal(joint.candidates_a, cond.candidates_a) and torch.equal(joint.candidates_b, cond.candidates_b)):
        raise ValueError("the joint and the conditionals have different candidate supports")
    i, j = _gold(cond)
    out = {
        "pair_nll": float(-joint.log_joint[i, j] / 2),
        "unary_nll": float(-(joint.log_cond_a[i, j] + joint.log_cond_b[i, j]) / 2),
    }
    out.update(_divergences(cond.log_cond_a, joint.log_cond_a, cond.log_cond_b, joint.log_cond_b, i, j))
    return out


def mlm_pair_metrics(cond: PairConditionals) -> dict[str, float]:
    """The MLM baseline: unary NLL of its own conditionals and their compatibility score.

    Parameters
    ----------
    cond : PairConditionals
        The MLM's conditionals at the pair, its observed tokens among the candidates.

    Returns
    -------
    dict of str to float
        ``unary_nll`` (``-(log P_a(w_a | w_b) + log P_b(w_b | w_a)) / 2``) and ``compatibility``
        (:func:`compatibility_score`).

    Raises
    ------
    ValueError
        When the observed tokens are not both among the candidates.

    Examples
    --------
    >>> from mlm_ppl.evaluation import mlm_pair_metrics
    >>> from mlm_ppl.testing import goyal_counterexample, table_pair_conditionals
    >>> metrics = mlm_pair_metrics(table_pair_conditionals(goyal_counterexample()))
    >>> sorted(metrics), metrics["compatibility"] > 0
    (['compatibility', 'unary_nll'], True)
    """
    i, j = _gold(cond)
    la, lb = cond.log_cond_a, cond.log_cond_b
    return {
        "unary_nll": float(-(la[i, j] + lb[i, j]) / 2),
        "compatibility": float(compatibility_score(la, lb)),
    }


# ---------------------------------------------------------------------- the evaluation
def parse_methods(spec: str | Sequence[str]) -> list[tuple[str, str, dict]]:
    """``"naive,mrf,hcb:one,ag"`` -> ``[(label, method, options), ...]``.

    ``hcb`` takes its pivot after a colon (``hcb:both``, the default, or ``hcb:one``).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[tuple[str, str, dict]] = []
    for item in (s.strip() for s in items):
        method, _, pivot = item.partition(":")
        if method not in PAIR_METHODS:
            raise ValueError(f"unknown method {item!r}; choose from {', '.join(PAIR_METHODS)} (hcb:one, hcb:both)")
        if pivot and (method != "hcb" or pivot not in PIVOTS):
            raise ValueError(f"{item!r}: only hcb takes a pivot, one of {PIVOTS}")
        label = item if pivot else method
        if any(label == seen for seen, _, _ in out):
            raise ValueError(f"method {label!r} is listed twice")
        out.append((label, method, {"pivot": pivot} if pivot else {}))
    if not out:
        raise ValueError("give at least one method")
    return out


def draw_pairs(
    mlm, sequences: Sequence[str], kind: str, n: int, seed: int, *, convention: str = "mlm-ppl"
) -> list[tuple[int, int, int]]:
    """Draw ``n`` seeded pairs ``(sequence_index, a, b)``, cycling through the sequences in order.

    ``kind="contiguous"``: ``b = a + 1``; ``"random"``: two distinct positions, ``a < b``, or
    with ``convention="reference"`` in the order they were drawn (the same positions for the
    same seed). Positions are token positions of the encoded sequences (``[CLS]`` is 0),
    ordinary tokens only. Every sequence is validated (encoded) before any pair is drawn.

    Parameters
    ----------
    mlm : MaskedLM
        The model whose encoding gives the positions.
    sequences : sequence of str
        The held-out sequences.
    kind : {"contiguous", "random"}
        Neighbours, or two positions at random (:data:`~mlm_ppl.evaluation.PAIR_KINDS`).
    n : int
        Number of pairs; pair ``k`` is from sequence ``k % len(sequences)``.
    seed : int
        Seed of the draws (a private :class:`random.Random`).
    convention : {"mlm-ppl", "reference"}, optional
        See :data:`~mlm_ppl.evaluation.CONVENTIONS` (default ``"mlm-ppl"``).

    Returns
    -------
    list of tuple of int
        The pairs ``(sequence_index, a, b)``.

    Raises
    ------
    ValueError
        When ``kind`` or ``convention`` is unknown, ``n`` is below 1, there are no sequences, a
        sequence cannot be encoded, or one has too few ordinary tokens for a pair.
    TypeError
        When ``n`` is not an integer.

    Examples
    --------
    >>> from mlm_ppl.evaluation import draw_pairs
    >>> from mlm_ppl.testing import tiny_esm
    >>> draw_pairs(tiny_esm(), ["ACDEFG", "KLMNP"], "contiguous", 3, seed=0)
    [(0, 4, 5), (1, 4, 5), (0, 1, 2)]
    """
    if kind not in PAIR_KINDS:
        raise ValueError(f"pairs must be one of {PAIR_KINDS}, got {kind!r}")
    check_choice(convention, "convention", CONVENTIONS)
    check_count(n, "n")
    if not sequences:
        raise ValueError("no sequences to draw pairs from")
    enc = mlm.encode(list(sequences))  # validates every sequence first
    choices = []
    for s in range(len(enc)):
        pos = enc.scorable[s].nonzero().flatten().tolist()
        if kind == "contiguous":
            pos = [t for t in pos if enc.scorable[s, t + 1 : t + 2].any()] if pos else []
        if (kind == "contiguous" and not pos) or (kind == "random" and len(pos) < 2):
            raise ValueError(f"sequence {s} has fewer than two ordinary tokens; cannot draw a pair from it")
        choices.append(pos)
    rng = random.Random(seed)
    out = []
    for k in range(n):
        s = k % len(choices)
        if kind == "contiguous":
            a = rng.choice(choices[s])
            out.append((s, a, a + 1))
        else:
            a, b = rng.sample(choices[s], 2)
            out.append((s, a, b) if convention == "reference" else (s, min(a, b), max(a, b)))
    return out


def evaluate_pairs(
    mlm,
    sequences: Sequence[str],
    pairs: Sequence[tuple[int, int, int]],
    methods: str | Sequence[str],
    *,
    support: int | str | None = None,
    skip: frozenset[int] | set[int] = frozenset(),
    convention: str = "mlm-ppl",
) -> Iterator[list[dict]]:
    """Evaluate every method on every pair; yield the rows of one pair at a time.

    Each pair's conditionals are read once (:func:`~mlm_ppl.pair_conditionals`) and shared by
    all methods. The first row of each pair is the ``mlm`` baseline. Pairs whose index is in
    ``skip`` (already done) are not computed. ``convention="reference"`` reads every token id
    (``support="all"``; a ``support`` of its own is refused) and runs AG as ``REFERENCE_AG``
    (40 plain steps); draw its pairs with the same convention.

    Parameters
    ----------
    mlm : MaskedLM
        The model.
    sequences : sequence of str
        The held-out sequences.
    pairs : sequence of tuple of int
        ``(sequence_index, a, b)`` triples, as :func:`draw_pairs` gives.
    methods : str or sequence of str
        The joints to derive: ``"naive,mrf,hcb:one,ag"`` or a list of such names; ``hcb``
        takes its pivot after a colon (``hcb:both``, the default, or ``hcb:one``).
    support : int, str or None, optional
        The candidates of each position (see :func:`~mlm_ppl.pair_conditionals`); None (the
        default) for every ordinary token.
    skip : set of int, optional
        Indices of pairs not to compute (empty by default).
    convention : {"mlm-ppl", "reference"}, optional
        See :data:`~mlm_ppl.evaluation.CONVENTIONS` (default ``"mlm-ppl"``).

    Yields
    ------
    list of dict
        The rows of one pair: the ``mlm`` baseline (:func:`mlm_pair_metrics`, the masked
        ``copies`` read, and the ``seconds`` spent on the pair), then one per method
        (:func:`pair_metrics`, ``converged`` and ``iterations``); each with the pair's index,
        sequence index, positions and observed tokens.

    Raises
    ------
    ValueError
        When a method is unknown or listed twice, the convention is unknown, or
        ``convention="reference"`` is given a ``support``; a pair's positions or the support
        are refused by :func:`~mlm_ppl.pair_conditionals` when its pair is reached.

    Examples
    --------
    >>> from mlm_ppl.evaluation import draw_pairs, evaluate_pairs
    >>> from mlm_ppl.testing import tiny_esm
    >>> mlm = tiny_esm()
    >>> pairs = draw_pairs(mlm, ["ACDEFG"], "random", 2, seed=0)
    >>> rows = [row for pair in evaluate_pairs(mlm, ["ACDEFG"], pairs, "naive,ag", support=4) for row in pair]
    >>> [row["method"] for row in rows]
    ['mlm', 'naive', 'ag', 'mlm', 'naive', 'ag']
    """
    parsed = parse_methods(methods)
    if check_choice(convention, "convention", CONVENTIONS) == "reference":
        if support is not None:
            raise ValueError(
                "the reference convention reads the whole vocabulary; a support of K candidates applies to "
                "convention='mlm-ppl' only"
            )
        support = "all"
        parsed = [(label, m, {**options, **REFERENCE_AG} if m == "ag" else options) for label, m, options in parsed]
    for k, (s, a, b) in enumerate(pairs):
        if k in skip:
            continue
        t0 = time.perf_counter()
        cond = pair_conditionals(mlm, sequences[s], a, b, support=support)
        tok_a, tok_b = mlm.tokenizer.convert_ids_to_tokens(list(cond.observed))
        base = {"pair": k, "sequence": s, "a": a, "b": b, "token_a": tok_a, "token_b": tok_b}
        rows = [{**base, "method": "mlm", **mlm_pair_metrics(cond), "copies": cond.copies}]
        for label, method, options in parsed:
            joint = cond.joint(method, **options)
            rows.append(
                {
                    **base,
                    "method": label,
                    **pair_metrics(joint, cond),
                    "converged": joint.converged,
                    "iterations": joint.iterations,
                }
            )
        rows[0]["seconds"] = time.perf_counter() - t0  # reads and all the methods
        yield rows


def _mean_se(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def summarize_pairs(rows: Sequence[dict]) -> list[dict]:
    """Mean and standard error of every metric per method, over pairs.

    Perplexities are ``exp(mean NLL)``, with the delta-method standard error
    ``PPL * SE(NLL)``. Missing, empty and NaN values are left out.

    Parameters
    ----------
    rows : sequence of dict
        Per-pair rows, as :func:`evaluate_pairs` yields them or read back from its CSV.

    Returns
    -------
    list of dict
        Rows ``{method, metric, mean, se, n}`` in method order of first appearance, metrics in
        :data:`~mlm_ppl.evaluation.PAIR_METRICS` order; ``se`` is NaN for a single value.

    Examples
    --------
    >>> from mlm_ppl.evaluation import summarize_pairs
    >>> rows = [{"method": "ag", "pair_nll": 1.0}, {"method": "ag", "pair_nll": 3.0}]
    >>> summary = summarize_pairs(rows)
    >>> [(row["metric"], row["n"]) for row in summary]
    [('pair_ppl', 2)]
    >>> round(summary[0]["mean"], 3)  # exp(2)
    7.389
    """
    methods: list[str] = []
    for r in rows:
        if r["method"] not in methods:
            methods.append(r["method"])
    out = []
    for m in methods:
        mine = [r for r in rows if r["method"] == m]
        for metric in PAIR_METRICS:
            column = {"pair_ppl": "pair_nll", "unary_ppl": "unary_nll"}.get(metric, metric)
            values = [
                float(r[column]) for r in mine if r.get(column) not in (None, "") and not math.isnan(float(r[column]))
            ]
            if not values:
                continue
            mean, se = _mean_se(values)
            if column != metric:
                mean, se = math.exp(mean), math.exp(mean) * se
            out.append({"method": m, "metric": metric, "mean": mean, "se": se, "n": len(values)})
    return out


def paired_differences(
    rows: Sequence[dict],
    reference: str = "ag",
    metrics: Sequence[str] = ("unary_nll", "kl_fwd_all", "jsd_all", "kl_fwd_gold"),
) -> list[dict]:
    """Per-pair differences ``method - reference`` of each metric: mean, standard error, and
    the fraction of pairs where the reference is lower (strictly).

    Pair-to-pair variation dominates the standard errors of :func:`summarize_pairs`; paired
    differences say whether one method beats another on the same pairs.
    """
    by_pair: dict[tuple[str, str], dict] = {(str(r["pair"]), r["method"]): r for r in rows}
    ref_pairs = [p for (p, m) in by_pair if m == reference]
    if not ref_pairs:
        return []
    methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] not in (reference, "mlm")))
    if "unary_nll" in metrics:
        methods.append("mlm")
    out = []
    for m in methods:
        for metric in metrics:
            diffs = []
            for p in ref_pairs:
                other = by_pair.get((p, m), {}).get(metric)
                if other in (None, ""):
                    continue
                diffs.append(float(other) - float(by_pair[p, reference][metric]))
            if not diffs:
                continue
            mean, se = _mean_se(diffs)
            out.append(
                {
                    "method": m,
                    "reference": reference,
                    "metric": metric,
                    "mean": mean,
                    "se": se,
                    "reference_lower": sum(d > 0 for d in diffs) / len(diffs),
                    "n": len(diffs),
                }
            )
    return out


def format_differences(diffs: Sequence[dict]) -> str:
    """A plain-text table of :func:`paired_differences`."""
    if not diffs:
        return ""
    ref = diffs[0]["reference"]
    lines = [f"paired differences (method - {ref}, mean ± se over pairs; share of pairs where {ref} is lower)"]
    for d in diffs:
        lines.append(
            f"  {d['method']:<10} {d['metric']:<12} {d['mean']:+.4g} ± {d['se']:.2g}   "
            f"{100 * d['reference_lower']:.0f}%"
        )
    return "\n".join(lines)


def format_summary(summary: Sequence[dict]) -> str:
    """A plain-text table: methods as rows, metrics as columns, ``mean ± se``."""
    methods = list(dict.fromkeys(r["method"] for r in summary))
    metrics = [m for m in PAIR_METRICS if any(r["metric"] == m for r in summary)]
    cell = {(r["method"], r["metric"]): f"{r['mean']:.4g} ± {r['se']:.2g}" for r in summary}
    header = ["method", *metrics]
    table = [header] + [[m, *(cell.get((m, x), "-") for x in metrics)] for m in methods]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in table)


def plot_pairs(summary: Sequence[dict], path: str, *, title: str = "") -> str:
    """Draw bar charts (mean ± standard error) of every metric per method as a PNG.

    Draws on a standalone ``matplotlib.figure.Figure``: no pyplot state, and the user's backend is
    left as it is. The file is written atomically.

    Parameters
    ----------
    summary : sequence of dict
        Rows of :func:`summarize_pairs`.
    path : str
        Where to write the PNG.
    title : str, optional
        The figure's title (none by default).

    Returns
    -------
    str
        ``path``.
    """
    import matplotlib
    from matplotlib.figure import Figure

    metrics = [m for m in PAIR_METRICS if any(r["metric"] == m for r in summary)]
    methods = list(dict.fromkeys(r["method"] for r in summary))
    cols = 3
    rows_n = math.ceil(len(metrics) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows_n))
    axes = fig.subplots(rows_n, cols, squeeze=False)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.flat, metrics):
        here = [r for r in summary if r["metric"] == metric]
        names = [r["method"] for r in here]
        ax.bar(
            range(len(here)),
            [r["mean"] for r in here],
            yerr=[0 if math.isnan(r["se"]) else r["se"] for r in here],
            color=[colours[methods.index(n) % len(colours)] for n in names],
            capsize=3,
        )
        ax.set_xticks(range(len(here)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(metric, fontsize=9)
        if metric.endswith("ppl"):
            low = min(r["mean"] - (0 if math.isnan(r["se"]) else r["se"]) for r in here)
            ax.set_ylim(bottom=max(0.0, 0.9 * low))
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
