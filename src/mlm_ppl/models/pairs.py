"""Explicit joint distributions over two positions derived from an MLM's conditionals.

Torroba Hennigen & Kim (2023), *Deriving Language Models from Masked Language Models*. Mask
two positions ``a`` and ``b`` of a sequence, keep the rest observed, and read the MLM's
conditionals ``P_a(x_a | x_b)`` (only ``a`` masked, ``b`` set to ``x_b``) and
``P_b(x_b | x_a)`` for every candidate of the other position. These two families of
conditionals are in general *incompatible*: no joint has both as its conditionals. Each
method below builds a normalised joint ``q(x_a, x_b)`` from them:

``naive``      ``q = P_a(x_a) P_b(x_b)``, the two marginals read with *both* positions masked.
``mrf``        ``q ∝ P_a(x_a | x_b) P_b(x_b | x_a)`` (a pairwise MRF on log-conditionals).
``mrf_logit``  ``q ∝ exp(logit_a(x_a | x_b) + logit_b(x_b | x_a))`` (raw logits).
``hcb``        Hammersley-Clifford-Besag:
               ``q ∝ P_a(x_a | x_b) / P_a(a* | x_b) * P_b(x_b | a*)`` for a pivot ``a*``
               (or the same with the roles of ``a`` and ``b`` swapped).
``ag``         Arnold-Gokhale: the joint whose conditionals are closest to the MLM's, i.e.
               a stationary point of ``sum_{x_b} KL(P_a(.|x_b) || q(.|x_b)) +
               sum_{x_a} KL(P_b(.|x_a) || q(.|x_a))``, found by the fixed-point iteration
               ``q ∝ (P_a(x_a|x_b) + P_b(x_b|x_a)) / (1/q_a(x_a) + 1/q_b(x_b))``
               (accelerated; see :func:`arnold_gokhale`).

If the conditionals are compatible (derived from one joint ``p``), ``hcb`` (any pivot) and
``ag`` recover ``p`` exactly; ``mrf`` gives ``p(x_a,x_b)^2 / (p(x_a) p(x_b))`` normalised,
which equals ``p`` only when ``x_a`` and ``x_b`` are independent, and ``mrf_logit`` depends
on the per-context offsets of the logits, which the conditionals do not fix.

Everything is computed over a *support*: the ordinary tokens of the vocabulary (``2V``
masked copies of the sequence) or, as in the paper, ``K`` candidates per position. The MLM's
conditionals are renormalised over the support.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyro.distributions as dist
import torch
from torch import Tensor

if TYPE_CHECKING:  # pragma: no cover
    from .masked_lm import MaskedLM

__all__ = [
    "PAIR_METHODS",
    "PIVOTS",
    "PairConditionals",
    "PairJoint",
    "pair_conditionals",
    "derive_pair_joint",
    "pair_joint",
    "candidate_sets",
    "arnold_gokhale",
    "summed_kl",
]

PAIR_METHODS = ("naive", "mrf", "mrf_logit", "hcb", "ag")
PIVOTS = ("both", "one")
_SIDES = ("a", "b")


@dataclass(frozen=True)
class PairConditionals:
    """An MLM's conditionals at two positions ``a`` and ``b`` of one sequence, over a support.

    Rows index the candidates of ``a``, columns the candidates of ``b``. All logits are
    float64 and restricted to the support.

    Attributes
    ----------
    positions : tuple of int
        ``(a, b)``, token positions in the encoded sequence (``[CLS]`` is 0).
    candidates_a, candidates_b : Tensor
        ``(K_a,)`` and ``(K_b,)`` long token ids, distinct ordinary tokens.
    logits_a : Tensor
        ``(K_a, K_b)``: entry ``[i, j]`` is the logit of ``candidates_a[i]`` at ``a``, read
        with ``a`` masked and ``b`` set to ``candidates_b[j]``.
    logits_b : Tensor
        ``(K_a, K_b)``: entry ``[i, j]`` is the logit of ``candidates_b[j]`` at ``b``, read
        with ``b`` masked and ``a`` set to ``candidates_a[i]``.
    marginal_a, marginal_b : Tensor
        ``(K_a,)``, ``(K_b,)`` logits read with both positions masked.
    single_a, single_b : Tensor
        ``(K_a,)``, ``(K_b,)`` logits read with only that position masked and the other at
        its observed token.
    observed : tuple of int
        The observed token ids at ``a`` and ``b``.
    copies : int
        Masked copies of the sequence that went through the model.
    """

    positions: tuple[int, int]
    candidates_a: Tensor
    candidates_b: Tensor
    logits_a: Tensor
    logits_b: Tensor
    marginal_a: Tensor
    marginal_b: Tensor
    single_a: Tensor
    single_b: Tensor
    observed: tuple[int, int]
    copies: int = 0

    @property
    def log_cond_a(self) -> Tensor:
        """``(K_a, K_b)`` ``log P_a(x_a | x_b)``: each column normalised over the candidates of ``a``."""
        return torch.log_softmax(self.logits_a, dim=0)

    @property
    def log_cond_b(self) -> Tensor:
        """``(K_a, K_b)`` ``log P_b(x_b | x_a)``: each row normalised over the candidates of ``b``."""
        return torch.log_softmax(self.logits_b, dim=1)

    @property
    def observed_index(self) -> tuple[int, int] | None:
        """Indices of the observed tokens among the candidates, or None if either is outside the support."""
        i, j = _index_of(self.candidates_a, self.observed[0]), _index_of(self.candidates_b, self.observed[1])
        return None if i is None or j is None else (i, j)

    def joint(self, method: str, **options) -> "PairJoint":
        """The joint of ``method`` (see :func:`pair_joint`)."""
        return pair_joint(self, method, **options)


class PairJoint(dist.Categorical):
    """A normalised joint over the candidate pairs ``(x_a, x_b)`` of two positions.

    A :class:`pyro.distributions.Categorical` over ``K_a * K_b`` outcomes: outcome
    ``i * K_b + j`` is the pair ``(candidates_a[i], candidates_b[j])``. Use :meth:`tokens` to
    turn samples into token ids and :meth:`log_prob_tokens` to score token pairs.

    Attributes
    ----------
    candidates_a, candidates_b : Tensor
        The candidate token ids of the two positions.
    positions : tuple of int
        ``(a, b)``.
    method : str
        How the joint was derived.
    converged : bool
        For ``ag``, whether the fixed-point iteration met its tolerance; True otherwise.
    iterations : int
        For ``ag``, iterations run; 0 otherwise.
    pivot : int or None
        For ``hcb``, the pivot token id.
    """

    def __init__(
        self,
        log_joint: Tensor,
        candidates_a: Tensor,
        candidates_b: Tensor,
        *,
        positions: tuple[int, int] = (0, 1),
        method: str = "",
        converged: bool = True,
        iterations: int = 0,
        pivot: int | None = None,
        validate_args: bool | None = None,
    ) -> None:
        log_joint = torch.as_tensor(log_joint, dtype=torch.float64)
        if log_joint.shape != (len(candidates_a), len(candidates_b)):
            raise ValueError(
                f"log_joint must have shape (K_a, K_b) = ({len(candidates_a)}, {len(candidates_b)}), "
                f"got {tuple(log_joint.shape)}"
            )
        self.candidates_a = torch.as_tensor(candidates_a, dtype=torch.long)
        self.candidates_b = torch.as_tensor(candidates_b, dtype=torch.long)
        self.positions = positions
        self.method = method
        self.converged = converged
        self.iterations = iterations
        self.pivot = pivot
        super().__init__(logits=log_joint.reshape(-1), validate_args=validate_args)

    @property
    def shape_2d(self) -> tuple[int, int]:
        return len(self.candidates_a), len(self.candidates_b)

    @property
    def log_joint(self) -> Tensor:
        """``(K_a, K_b)`` normalised ``log q(x_a, x_b)``."""
        return self.logits.reshape(self.shape_2d)

    @property
    def log_cond_a(self) -> Tensor:
        """``(K_a, K_b)`` ``log q(x_a | x_b)`` (columns normalised)."""
        return torch.log_softmax(self.log_joint, dim=0)

    @property
    def log_cond_b(self) -> Tensor:
        """``(K_a, K_b)`` ``log q(x_b | x_a)`` (rows normalised)."""
        return torch.log_softmax(self.log_joint, dim=1)

    def tokens(self, outcome: Tensor) -> Tensor:
        """Token ids ``(..., 2)`` of outcomes (flat indices) ``(...)``."""
        outcome = torch.as_tensor(outcome, dtype=torch.long)
        kb = len(self.candidates_b)
        return torch.stack([self.candidates_a[outcome // kb], self.candidates_b[outcome % kb]], dim=-1)

    def log_prob_tokens(self, x_a: int, x_b: int) -> Tensor:
        """``log q(x_a, x_b)`` of token ids; ``-inf`` outside the support."""
        i, j = _index_of(self.candidates_a, x_a), _index_of(self.candidates_b, x_b)
        if i is None or j is None:
            return torch.tensor(float("-inf"), dtype=self.logits.dtype)
        return self.log_joint[i, j]

    def expand(self, batch_shape, _instance=None):
        return dist.Categorical(logits=self.logits).expand(batch_shape)


def _index_of(candidates: Tensor, token: int) -> int | None:
    """Index of a token id among candidates (distinct ids), or None."""
    hit = (candidates == int(token)).nonzero().flatten()
    return int(hit[0]) if hit.numel() else None


# ---------------------------------------------------------------------- the joints
def pair_joint(
    cond: PairConditionals,
    method: str,
    *,
    pivot: str | int | None = None,
    pivot_side: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    accelerate: bool | None = None,
) -> PairJoint:
    """The joint of ``method`` built from the conditionals ``cond``.

    Parameters
    ----------
    cond : PairConditionals
    method : {"naive", "mrf", "mrf_logit", "hcb", "ag"}
    pivot : {"both", "one"} or int
        ``hcb`` only (default ``"both"``). ``"both"``: the most likely candidate of the pivot side with both
        positions masked; ``"one"``: the most likely candidate with only the pivot side masked
        (the other position at its observed token); an int: that token id (a candidate).
    pivot_side : {"a", "b"}
        ``hcb`` only (default ``"a"``): the position whose value is pivoted. ``"a"`` gives
        ``q ∝ P_a(x_a|x_b) / P_a(a*|x_b) * P_b(x_b|a*)``; ``"b"`` swaps the roles.
    tol, max_iter, accelerate : float, int, bool
        ``ag`` only (defaults 1e-6, 20000, True): stop when the fixed-point equation holds to
        ``tol``, or after ``max_iter`` evaluations of the map (then the joint's ``converged``
        is False); ``accelerate=False`` runs the plain iteration (the paper's setting is
        ``max_iter=40, accelerate=False``). See :func:`arnold_gokhale`.
    """
    opts = _check_options(method, pivot, pivot_side, tol, max_iter, accelerate)
    extra: dict = {}
    if method == "naive":
        logq = torch.log_softmax(cond.marginal_a, 0)[:, None] + torch.log_softmax(cond.marginal_b, 0)[None, :]
    elif method == "mrf":
        logq = cond.log_cond_a + cond.log_cond_b
    elif method == "mrf_logit":
        logq = cond.logits_a + cond.logits_b
    elif method == "hcb":
        logq, extra["pivot"] = _hcb(cond, opts["pivot"], opts["pivot_side"])
    else:
        logq, extra["converged"], extra["iterations"] = arnold_gokhale(
            cond.log_cond_a, cond.log_cond_b, opts["tol"], opts["max_iter"], accelerate=opts["accelerate"]
        )
    logq = logq - torch.logsumexp(logq.reshape(-1), 0)
    return PairJoint(logq, cond.candidates_a, cond.candidates_b, positions=cond.positions, method=method, **extra)


def _check_options(method, pivot, pivot_side, tol, max_iter, accelerate=None) -> dict:
    """Validate a method's options (before any forward pass) and fill in the defaults."""
    if method not in PAIR_METHODS:
        raise ValueError(f"method must be one of {PAIR_METHODS}, got {method!r}")
    if method != "hcb" and (pivot is not None or pivot_side is not None):
        raise ValueError(f"pivot and pivot_side apply to method 'hcb' only, not {method!r}")
    if method != "ag" and (tol is not None or max_iter is not None or accelerate is not None):
        raise ValueError(f"tol, max_iter and accelerate apply to method 'ag' only, not {method!r}")
    opts = {"pivot": "both" if pivot is None else pivot, "pivot_side": pivot_side or "a",
            "tol": 1e-6 if tol is None else tol, "max_iter": 20000 if max_iter is None else max_iter,
            "accelerate": True if accelerate is None else accelerate}
    if opts["pivot_side"] not in _SIDES:
        raise ValueError(f"pivot_side must be 'a' or 'b', got {pivot_side!r}")
    p = opts["pivot"]
    if isinstance(p, bool) or not isinstance(p, (str, int)) or (isinstance(p, str) and p not in PIVOTS):
        raise ValueError(f"pivot must be one of {PIVOTS} or a token id, got {p!r}")
    if not (isinstance(opts["tol"], (int, float)) and opts["tol"] > 0):
        raise ValueError(f"tol must be a number > 0, got {tol!r}")
    m = opts["max_iter"]
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not isinstance(opts["accelerate"], bool):
        raise ValueError(f"accelerate must be True or False, got {accelerate!r}")
    return opts


def _hcb(cond: PairConditionals, pivot: str | int, side: str) -> tuple[Tensor, int]:
    if side == "a":
        lead, other, candidates, marginal, single = (
            cond.log_cond_a, cond.log_cond_b, cond.candidates_a, cond.marginal_a, cond.single_a)
    else:  # transpose so that rows index the pivot side
        lead, other, candidates, marginal, single = (
            cond.log_cond_b.T, cond.log_cond_a.T, cond.candidates_b, cond.marginal_b, cond.single_b)
    if isinstance(pivot, str):
        k = int(torch.argmax(marginal if pivot == "both" else single))
    else:
        found = _index_of(candidates, pivot)
        if found is None:
            raise ValueError(f"pivot token id {pivot} is not a candidate of position {side}: {candidates.tolist()}")
        k = found
    # q(x, y) ∝ P(x | y) / P(x* | y) * P(y | x*), rows x on the pivot side
    logq = lead - lead[k][None, :] + other[k][None, :]
    return (logq if side == "a" else logq.T), int(candidates[k])


def arnold_gokhale(
    log_cond_a: Tensor, log_cond_b: Tensor, tol: float = 1e-6, max_iter: int = 20000, *, accelerate: bool = True
):
    """Arnold & Gokhale's (1998) joint most nearly compatible with two conditional families.

    Minimises ``J(q) = sum_j KL(A[:, j] || q(.|j)) + sum_i KL(B[i, :] || q(.|i))`` with
    ``A = exp(log_cond_a)`` (columns sum to 1) and ``B = exp(log_cond_b)`` (rows sum to 1).
    Setting the gradient of ``J`` on the simplex to zero gives the fixed-point equation
    ``q_ij (1/q_i. + 1/q_.j) = A_ij + B_ij``, iterated from the uniform joint in log space as
    ``q <- normalise((A + B) / (1/q_i. + 1/q_.j))``.

    On sharp conditionals (real MLMs) the plain iteration converges sublinearly: tens of
    thousands of steps on AntiBERTy pairs. The iteration is therefore accelerated with SQUAREM
    (Varadhan & Roland 2008) in log space, with a safeguard that falls back to two plain steps
    whenever the extrapolated point does not lower ``J``; the fixed points are unchanged.

    Parameters
    ----------
    tol : float
        Converged when the fixed-point equation holds to ``tol``:
        ``max |q_ij (1/q_i. + 1/q_.j) - (A_ij + B_ij)| <= tol`` (a KKT residual of ``J``).
    max_iter : int
        Cap on evaluations of the fixed-point map.
    accelerate : bool
        SQUAREM (default) or the plain iteration.

    Returns
    -------
    (log_joint, converged, iterations)
        ``iterations`` counts evaluations of the map.
    """
    _check_options("ag", None, None, tol, max_iter, accelerate)
    # small dense matrices: numpy's per-call overhead is a fraction of torch's here
    la, lb = log_cond_a.double().cpu().numpy(), log_cond_b.double().cpu().numpy()
    log_sum = np.logaddexp(la, lb)
    target = np.exp(log_sum)  # A + B; J(q) = -sum (A + B) log q + sum_j log q_.j + sum_i log q_i. + const

    def margins(logq):
        return _lse(logq, 1), _lse(logq, 0)  # (K_a, 1), (1, K_b)

    def step(logq):
        rows, cols = margins(logq)
        new = log_sum - np.logaddexp(-rows, -cols)
        return new - _lse(new, None)

    def objective(logq) -> float:  # J(q) up to a constant
        rows, cols = margins(logq)
        return float(-(target * logq).sum() + cols.sum() + rows.sum())

    def residual(logq) -> float:
        rows, cols = margins(logq)
        return float(np.abs(np.exp(logq + np.logaddexp(-rows, -cols)) - target).max())

    logq = np.full(la.shape, -math.log(la.size))
    evaluations = 0
    converged = residual(logq) <= tol
    while not converged and evaluations < max_iter:
        if not accelerate or max_iter - evaluations < 3:  # plain steps
            logq = step(logq)
            evaluations += 1
        else:
            x1 = step(logq)
            x2 = step(x1)
            r, v = x1 - logq, x2 - 2 * x1 + logq
            vn = float(np.sqrt((v * v).sum()))
            alpha = min(-float(np.sqrt((r * r).sum())) / vn, -1.0) if vn > 0 else -1.0
            jump = logq - 2 * alpha * r + alpha**2 * v
            candidate = step(jump - _lse(jump, None))
            evaluations += 3
            ok = bool(np.isfinite(candidate).all()) and objective(candidate) <= objective(x2)
            logq = candidate if ok else x2
        converged = residual(logq) <= tol
    return torch.from_numpy(logq), converged, evaluations


def _lse(x, axis):
    """log-sum-exp over ``axis`` (None: all), keeping dimensions for an axis."""
    m = x.max() if axis is None else x.max(axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = m + np.log(np.exp(x - m).sum(axis=axis, keepdims=axis is not None))
    return float(out) if axis is None else out


def summed_kl(log_joint: Tensor, log_cond_a: Tensor, log_cond_b: Tensor) -> Tensor:
    """The Arnold-Gokhale objective ``J(q)``: summed forward KL from the MLM's conditionals to ``q``'s."""
    qa = torch.log_softmax(log_joint, 0)
    qb = torch.log_softmax(log_joint, 1)
    kl_a = (log_cond_a.exp() * (log_cond_a - qa)).sum()
    kl_b = (log_cond_b.exp() * (log_cond_b - qb)).sum()
    return kl_a + kl_b


# ---------------------------------------------------------------------- reading the MLM
def candidate_sets(
    observed: int, single: Tensor, marginal: Tensor, size: int, ordinary: Tensor
) -> Tensor:
    """Torroba Hennigen & Kim's restricted support of one position: ``size`` token ids.

    The observed token first, then the ``(size - 1) // 2`` most likely other tokens of the
    single-masked conditional ``single`` (V,), then the most likely remaining tokens of the
    both-masked marginal ``marginal`` (V,); ordinary tokens only.
    """
    chosen = [int(observed)]
    taken = ~ordinary.clone()
    taken[int(observed)] = True
    for logits, count in ((single, (size - 1) // 2), (marginal, size - 1 - (size - 1) // 2)):
        if count == 0:
            continue
        order = torch.argsort(logits.masked_fill(taken, float("-inf")), descending=True, stable=True)[:count]
        chosen.extend(order.tolist())
        taken[order] = True
    return torch.tensor(chosen, dtype=torch.long)


def pair_conditionals(
    mlm: "MaskedLM",
    sequence: str | Tensor,
    a: int,
    b: int,
    *,
    support: int | tuple[Sequence[int], Sequence[int]] | None = None,
    progress: bool = False,
) -> PairConditionals:
    """Read the MLM's conditionals at positions ``a`` and ``b`` of ``sequence`` over a support.

    Parameters
    ----------
    mlm : MaskedLM
    sequence : str or Tensor
        A sequence (encoded with the model's special tokens) or its ``(L,)`` token ids.
    a, b : int
        Distinct ordinary token positions of the encoded sequence (``[CLS]`` is 0, so residue
        ``i`` of an AntiBERTy sequence is position ``i + 1``).
    support : None, int, or (list, list)
        None: every ordinary token of the vocabulary at both positions (``2V + 1`` masked
        copies). An int ``K``: ``K`` candidates per position chosen as in the paper (see
        :func:`candidate_sets`). A pair of token-id lists: those candidates.
    progress : bool
        Progress bar over the masked copies.

    Notes
    -----
    Copies are batched through :meth:`MaskedLM.masked_logits`; each distinct context is run
    once (the context with one position masked and the other at its observed token serves
    both the candidate selection and the conditional matrix).
    """
    ids = _sequence_ids(mlm, sequence)
    L = ids.numel()
    for name, p in (("a", a), ("b", b)):
        if isinstance(p, bool) or not isinstance(p, int):
            raise TypeError(f"position {name} must be an int, got {p!r}")
        if not 0 <= p < L or not bool(mlm.ordinary_mask[ids[p]]):
            ok = mlm.ordinary_mask[ids].nonzero().flatten().tolist()
            raise ValueError(
                f"position {name}={p} is not an ordinary token of the sequence; positions run from 0 ([CLS]) "
                f"and the ordinary ones are {ok[0]}..{ok[-1]}"
            )
    if a == b:
        raise ValueError(f"positions a and b must differ, got {a} twice")
    ordinary = mlm.ordinary_mask.cpu()
    n_ordinary = int(ordinary.sum())
    fixed = _check_support(support, ordinary, n_ordinary)
    obs_a, obs_b = int(ids[a]), int(ids[b])
    both = torch.tensor([a, b])

    def copy(mask_at: list[int], set_at: int | None = None, value: int | None = None) -> tuple[Tensor, Tensor]:
        x = ids.clone()
        if set_at is not None:
            x[set_at] = value
        m = torch.zeros(L, dtype=torch.bool)
        m[mask_at] = True
        return x, m

    # stage 1: both masked, a alone masked, b alone masked (3 copies, each read at a and b)
    first = [copy([a, b]), copy([a]), copy([b])]
    x1 = torch.stack([c[0] for c in first])
    m1 = torch.stack([c[1] for c in first])
    out1 = mlm.masked_logits(x1, m1, both.expand(3, 2)).double()  # (3, 2, V)
    marg_a, marg_b = out1[0, 0], out1[0, 1]
    single_a, single_b = out1[1, 0], out1[2, 1]
    if fixed is not None:
        cand_a, cand_b = fixed
    elif support is None:
        cand_a = cand_b = ordinary.nonzero().flatten()
    else:
        cand_a = candidate_sets(obs_a, single_a, marg_a, int(support), ordinary)
        cand_b = candidate_sets(obs_b, single_b, marg_b, int(support), ordinary)

    # stage 2: a masked with b = each candidate, b masked with a = each candidate; skip the
    # contexts equal to stage 1's single-masked copies
    need_a = [j for j, t in enumerate(cand_b.tolist()) if t != obs_b]
    need_b = [i for i, t in enumerate(cand_a.tolist()) if t != obs_a]
    copies = [copy([a], b, int(cand_b[j])) for j in need_a] + [copy([b], a, int(cand_a[i])) for i in need_b]
    V = mlm.vocab_size
    col_a = single_a.expand(len(cand_b), V).clone()  # (K_b, V): logits at a for each b candidate
    row_b = single_b.expand(len(cand_a), V).clone()  # (K_a, V): logits at b for each a candidate
    if copies:
        x2 = torch.stack([c[0] for c in copies])
        m2 = torch.stack([c[1] for c in copies])
        read = torch.tensor([a] * len(need_a) + [b] * len(need_b))[:, None]
        out2 = mlm.masked_logits(x2, m2, read, progress=progress)[:, 0].double()  # (n, V)
        col_a[need_a] = out2[: len(need_a)]
        row_b[need_b] = out2[len(need_a):]
    return PairConditionals(
        positions=(a, b),
        candidates_a=cand_a,
        candidates_b=cand_b,
        logits_a=col_a[:, cand_a].T.contiguous(),
        logits_b=row_b[:, cand_b].contiguous(),
        marginal_a=marg_a[cand_a],
        marginal_b=marg_b[cand_b],
        single_a=single_a[cand_a],
        single_b=single_b[cand_b],
        observed=(obs_a, obs_b),
        copies=3 + len(copies),
    )


def derive_pair_joint(
    mlm: "MaskedLM",
    sequence: str | Tensor,
    a: int,
    b: int,
    *,
    method: str,
    support: int | tuple[Sequence[int], Sequence[int]] | None = None,
    pivot: str | int | None = None,
    pivot_side: str | None = None,
    tol: float | None = None,
    max_iter: int | None = None,
    accelerate: bool | None = None,
    progress: bool = False,
) -> PairJoint:
    """An explicit, normalised joint over positions ``a`` and ``b`` of ``sequence``.

    Reads the MLM's conditionals with :func:`pair_conditionals` and combines them with
    ``method`` (see :func:`pair_joint` and the module docstring). To compare several
    methods on the same pair, call :func:`pair_conditionals` once and then
    :meth:`PairConditionals.joint` per method: the forward passes are the expensive part.

    Examples
    --------
    >>> joint = derive_pair_joint(mlm, "EVQLVESGGG", 3, 4, method="ag")  # doctest: +SKIP
    >>> joint.tokens(joint.sample((5,)))                                  # doctest: +SKIP
    """
    _check_options(method, pivot, pivot_side, tol, max_iter, accelerate)  # before any forward pass
    cond = pair_conditionals(mlm, sequence, a, b, support=support, progress=progress)
    return pair_joint(cond, method, pivot=pivot, pivot_side=pivot_side, tol=tol, max_iter=max_iter,
                      accelerate=accelerate)


def _sequence_ids(mlm: "MaskedLM", sequence: str | Tensor) -> Tensor:
    if isinstance(sequence, str):
        enc = mlm.encode(sequence)
        return enc.input_ids[0, : int(enc.lengths[0])].clone()
    ids = torch.as_tensor(sequence)
    if ids.dim() != 1:
        raise ValueError(f"token ids must have shape (L,), got {tuple(ids.shape)}")
    return mlm.encoding_from_ids(ids[None]).input_ids[0].clone()


def _check_support(support, ordinary: Tensor, n_ordinary: int):
    if support is None:
        return None
    if isinstance(support, bool):
        raise TypeError("support must be None, an int K or a pair of token-id lists, got a bool")
    if isinstance(support, int):
        if not 1 <= support <= n_ordinary:
            raise ValueError(f"support K must be in [1, {n_ordinary}] (the ordinary tokens), got {support}")
        return None
    if not (isinstance(support, (tuple, list)) and len(support) == 2):
        raise TypeError(f"support must be None, an int K or a pair of token-id lists, got {support!r}")
    out = []
    for name, tokens in zip(_SIDES, support):
        t = torch.as_tensor(list(tokens), dtype=torch.long)
        if t.dim() != 1 or t.numel() == 0:
            raise ValueError(f"support of position {name} must be a non-empty list of token ids")
        if t.unique().numel() != t.numel():
            raise ValueError(f"support of position {name} repeats a token id: {t.tolist()}")
        if ((t < 0) | (t >= ordinary.numel())).any() or not bool(ordinary[t].all()):
            raise ValueError(f"support of position {name} must hold ordinary token ids only, got {t.tolist()}")
        out.append(t)
    return tuple(out)
