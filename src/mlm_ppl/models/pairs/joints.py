"""Explicit joints over two positions built from an MLM's conditionals: one function per method.

Torroba Hennigen & Kim (2023). Given :class:`~mlm_ppl.models.pairs.PairConditionals` (the
MLM's ``P_a(x_a | x_b)`` and ``P_b(x_b | x_a)`` over a support of candidates), each method
builds a normalised joint ``q(x_a, x_b)``:

``naive``      ``q = P_a(x_a) P_b(x_b)``, the two marginals read with *both* positions masked.
``mrf``        ``q ∝ P_a(x_a | x_b) P_b(x_b | x_a)`` (a pairwise MRF on log-conditionals).
``mrf_logit``  ``q ∝ exp(logit_a(x_a | x_b) + logit_b(x_b | x_a))`` (raw logits).
``hcb``        Hammersley-Clifford-Besag:
               ``q ∝ P_a(x_a | x_b) / P_a(a* | x_b) * P_b(x_b | a*)`` for a pivot ``a*``
               (or the same with the roles of ``a`` and ``b`` swapped); options :class:`HCBOptions`.
``ag``         Arnold-Gokhale: the joint whose conditionals are closest to the MLM's
               (:mod:`mlm_ppl.models.pairs.arnold_gokhale`); options :class:`AGOptions`.

If the conditionals are compatible (derived from one joint ``p``), ``hcb`` (any pivot) and
``ag`` recover ``p`` exactly; ``mrf`` gives ``p(x_a,x_b)^2 / (p(x_a) p(x_b))`` normalised,
which equals ``p`` only when ``x_a`` and ``x_b`` are independent, and ``mrf_logit`` depends
on the per-context offsets of the logits, which the conditionals do not fix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import pyro.distributions as dist
import torch
from torch import Tensor

from .arnold_gokhale import AGOptions, solve_arnold_gokhale

if TYPE_CHECKING:  # pragma: no cover
    from .conditionals import PairConditionals

__all__ = [
    "PAIR_METHODS",
    "PIVOTS",
    "HCBOptions",
    "AGOptions",
    "PairJoint",
    "joint_options",
    "pair_joint",
    "build_joint",
    "naive_joint",
    "mrf_joint",
    "mrf_logit_joint",
    "hcb_joint",
    "ag_joint",
    "index_of",
]

PAIR_METHODS = ("naive", "mrf", "mrf_logit", "hcb", "ag")
"""The joints over two positions of Torroba Hennigen & Kim (2023): the product of the two
marginals read with both positions masked (naive), the MRF of the conditionals' probabilities or
of their logits, Hammersley-Clifford-Besag and Arnold-Gokhale."""
PIVOTS = ("both", "one")
"""How Hammersley-Clifford-Besag's pivot candidate is chosen: the most likely with both positions
masked (``"both"``), or with only the pivot side masked (``"one"``); an int names the token."""
SIDES = ("a", "b")


def index_of(candidates: Tensor, token: int) -> int | None:
    """Index of a token id among candidates (distinct ids), or None."""
    hit = (candidates == int(token)).nonzero().flatten()
    return int(hit[0]) if hit.numel() else None


class PairJoint(dist.Categorical):
    """A normalised joint over the candidate pairs ``(x_a, x_b)`` of two positions.

    A :class:`pyro.distributions.Categorical` over ``K_a * K_b`` outcomes: outcome
    ``i * K_b + j`` is the pair ``(candidates_a[i], candidates_b[j])``. Use :meth:`tokens` to
    turn samples into token ids and :meth:`log_prob_tokens` to score token pairs. Made by
    :func:`~mlm_ppl.derive_pair_joint` and :meth:`~mlm_ppl.PairConditionals.joint`; every argument
    but ``log_joint`` and ``validate_args`` is kept as an attribute of the same name.

    Parameters
    ----------
    log_joint : torch.Tensor
        Shape ``(K_a, K_b)``, ``log q(x_a, x_b)`` up to a constant (normalised here, as
        :class:`pyro.distributions.Categorical` normalises its logits); kept as float64.
    candidates_a, candidates_b : torch.Tensor
        Shapes ``(K_a,)`` and ``(K_b,)``, the candidate token ids of the two positions.
    positions : tuple of int, optional
        ``(a, b)`` (default ``(0, 1)``).
    method : str, optional
        How the joint was derived (default ``""``).
    converged : bool, optional
        For ``ag``, whether the fixed-point iteration met its tolerance; True otherwise (the
        default).
    iterations : int, optional
        For ``ag``, iterations run; 0 otherwise (the default).
    pivot : int or None, optional
        For ``hcb``, the pivot token id; None otherwise (the default).
    validate_args : bool or None, optional
        Passed to :class:`pyro.distributions.Categorical`.

    Raises
    ------
    ValueError
        When ``log_joint`` is not of shape ``(K_a, K_b)``.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl import PairJoint
    >>> q = torch.tensor([[0.5, 0.1], [0.1, 0.3]])
    >>> joint = PairJoint(q.log(), torch.tensor([5, 6]), torch.tensor([7, 8]), positions=(2, 3))
    >>> joint.tokens(torch.tensor([0, 3]))  # outcomes 0 and 3: the pairs (5, 7) and (6, 8)
    tensor([[5, 7],
            [6, 8]])
    >>> round(float(joint.log_prob_tokens(6, 8).exp()), 2)
    0.3
    >>> joint.log_prob_tokens(5, 5)  # 5 is not a candidate of b
    tensor(-inf, dtype=torch.float64)
    >>> joint.sample((4,)).shape
    torch.Size([4])
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
        """``(K_a, K_b)``, the numbers of candidates of the two positions."""
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
        """Token ids of outcomes: the pair ``(x_a, x_b)`` of each flat outcome index.

        Parameters
        ----------
        outcome : torch.Tensor
            Flat outcome indices in ``[0, K_a * K_b)`` of any shape ``(...)``, as :meth:`sample`
            draws them.

        Returns
        -------
        torch.Tensor
            Shape ``(..., 2)``, long token ids: ``x_a`` then ``x_b``.
        """
        outcome = torch.as_tensor(outcome, dtype=torch.long)
        kb = len(self.candidates_b)
        return torch.stack([self.candidates_a[outcome // kb], self.candidates_b[outcome % kb]], dim=-1)

    def log_prob_tokens(self, x_a: int, x_b: int) -> Tensor:
        """``log q(x_a, x_b)`` of a pair of token ids; ``-inf`` outside the support.

        Parameters
        ----------
        x_a : int
            Token id at position ``a``.
        x_b : int
            Token id at position ``b``.

        Returns
        -------
        torch.Tensor
            A scalar, float64: the normalised log-probability of the pair, ``-inf`` when either
            token is not a candidate.
        """
        i, j = index_of(self.candidates_a, x_a), index_of(self.candidates_b, x_b)
        if i is None or j is None:
            return torch.tensor(float("-inf"), dtype=self.logits.dtype)
        return self.log_joint[i, j]

    def expand(self, batch_shape, _instance=None):
        """The joint as a plain :class:`pyro.distributions.Categorical` with ``batch_shape``.

        A pair joint has no batch of its own; the result is a Categorical over the same
        ``K_a * K_b`` outcomes, without the candidates and the other attributes.

        Parameters
        ----------
        batch_shape : torch.Size or tuple of int
            The batch shape of the result.
        _instance : None, optional
            Pyro's and torch's argument for subclasses; not used.

        Returns
        -------
        pyro.distributions.Categorical
            The joint's outcomes with ``batch_shape``.
        """
        return dist.Categorical(logits=self.logits).expand(batch_shape)


# ---------------------------------------------------------------------- options
@dataclass(frozen=True)
class HCBOptions:
    """Options of the ``hcb`` joint, checked when built.

    Parameters
    ----------
    pivot : {"both", "one"} or int, optional
        ``"both"`` (the default): the most likely candidate of the pivot side with both positions
        masked; ``"one"``: the most likely candidate with only the pivot side masked (the other
        position at its observed token); an int: that token id (a candidate).
    pivot_side : {"a", "b"}, optional
        The position whose value is pivoted (default ``"a"``). ``"a"`` gives
        ``q ∝ P_a(x_a|x_b) / P_a(a*|x_b) * P_b(x_b|a*)``; ``"b"`` swaps the roles.

    Raises
    ------
    ValueError
        When ``pivot_side`` is not ``"a"`` or ``"b"``, or ``pivot`` is neither one of
        :data:`~mlm_ppl.models.pairs.PIVOTS` nor an int.

    Examples
    --------
    >>> from mlm_ppl.models.pairs import HCBOptions
    >>> HCBOptions(pivot="one", pivot_side="b")
    HCBOptions(pivot='one', pivot_side='b')
    """

    pivot: str | int = "both"
    pivot_side: str = "a"

    def __post_init__(self) -> None:
        if self.pivot_side not in SIDES:
            raise ValueError(f"pivot_side must be 'a' or 'b', got {self.pivot_side!r}")
        p = self.pivot
        if isinstance(p, bool) or not isinstance(p, (str, int)) or (isinstance(p, str) and p not in PIVOTS):
            raise ValueError(f"pivot must be one of {PIVOTS} or a token id, got {p!r}")


@dataclass(frozen=True)
class _NoOptions:
    """The methods without options."""


_OPTIONS: dict[str, type] = {
    "naive": _NoOptions,
    "mrf": _NoOptions,
    "mrf_logit": _NoOptions,
    "hcb": HCBOptions,
    "ag": AGOptions,
}


def joint_options(method: str, **options: Any) -> Any:
    """Check ``method`` and its options (before any forward pass) and return them filled in.

    ``hcb`` takes ``pivot`` and ``pivot_side`` (:class:`~mlm_ppl.models.pairs.HCBOptions`); ``ag``
    takes ``tol``, ``max_iter`` and ``accelerate`` (:class:`~mlm_ppl.models.pairs.AGOptions`); the
    others take none. An option given as None takes its default.

    Parameters
    ----------
    method : {"naive", "mrf", "mrf_logit", "hcb", "ag"}
        The joint's method (:data:`~mlm_ppl.models.pairs.PAIR_METHODS`).
    **options
        The method's options by name; None for an option takes its default.

    Returns
    -------
    HCBOptions or AGOptions or object
        The checked options: an :class:`~mlm_ppl.models.pairs.HCBOptions` for ``hcb``, an
        :class:`~mlm_ppl.models.pairs.AGOptions` for ``ag``, an empty options object for the
        others.

    Raises
    ------
    ValueError
        When ``method`` is unknown, an option belongs to another method, or an option's value is
        invalid.
    TypeError
        When an option belongs to no method, or an option's value has the wrong type.

    Examples
    --------
    >>> from mlm_ppl.models.pairs import joint_options
    >>> joint_options("ag", tol=1e-4, max_iter=None)
    AGOptions(tol=0.0001, max_iter=20000, accelerate=True)
    """
    if method not in PAIR_METHODS:
        raise ValueError(f"method must be one of {PAIR_METHODS}, got {method!r}")
    given = {k: v for k, v in options.items() if v is not None}
    cls = _OPTIONS[method]
    allowed = {f.name for f in fields(cls)}
    for name in given:
        if name not in allowed:
            owner = next((m for m, c in _OPTIONS.items() if name in {f.name for f in fields(c)}), None)
            if owner is None:
                raise TypeError(f"unknown option {name!r} of method {method!r}")
            raise ValueError(f"{name} applies to method {owner!r} only, not {method!r}")
    return cls(**given)


# ---------------------------------------------------------------------- the methods
def naive_joint(cond: "PairConditionals") -> Tensor:
    """``log q = log P_a(x_a) + log P_b(x_b)`` from the both-masked marginals, ``(K_a, K_b)``."""
    return torch.log_softmax(cond.marginal_a, 0)[:, None] + torch.log_softmax(cond.marginal_b, 0)[None, :]


def mrf_joint(cond: "PairConditionals") -> Tensor:
    """Unnormalised ``log q = log P_a(x_a | x_b) + log P_b(x_b | x_a)``, ``(K_a, K_b)``."""
    return cond.log_cond_a + cond.log_cond_b


def mrf_logit_joint(cond: "PairConditionals") -> Tensor:
    """Unnormalised ``log q = logit_a(x_a | x_b) + logit_b(x_b | x_a)``, ``(K_a, K_b)``."""
    return cond.logits_a + cond.logits_b


def hcb_joint(cond: "PairConditionals", options: HCBOptions = HCBOptions()) -> tuple[Tensor, int]:
    """Unnormalised Hammersley-Clifford-Besag ``log q`` ``(K_a, K_b)`` and the pivot token id."""
    pivot, side = options.pivot, options.pivot_side
    if side == "a":
        lead, other, candidates, marginal, single = (
            cond.log_cond_a,
            cond.log_cond_b,
            cond.candidates_a,
            cond.marginal_a,
            cond.single_a,
        )
    else:  # transpose so that rows index the pivot side
        lead, other, candidates, marginal, single = (
            cond.log_cond_b.T,
            cond.log_cond_a.T,
            cond.candidates_b,
            cond.marginal_b,
            cond.single_b,
        )
    if isinstance(pivot, str):
        k = int(torch.argmax(marginal if pivot == "both" else single))
    else:
        found = index_of(candidates, pivot)
        if found is None:
            raise ValueError(f"pivot token id {pivot} is not a candidate of position {side}: {candidates.tolist()}")
        k = found
    # q(x, y) ∝ P(x | y) / P(x* | y) * P(y | x*), rows x on the pivot side
    logq = lead - lead[k][None, :] + other[k][None, :]
    return (logq if side == "a" else logq.T), int(candidates[k])


def ag_joint(cond: "PairConditionals", options: AGOptions = AGOptions()) -> tuple[Tensor, bool, int]:
    """Arnold-Gokhale ``log q`` ``(K_a, K_b)``, whether it converged, and the map evaluations."""
    return solve_arnold_gokhale(cond.log_cond_a, cond.log_cond_b, options)


def pair_joint(cond: "PairConditionals", method: str, **options: Any) -> PairJoint:
    """The joint of ``method`` built from the conditionals ``cond``.

    Parameters
    ----------
    cond : PairConditionals
        The MLM's conditionals at the two positions (:func:`~mlm_ppl.pair_conditionals`).
    method : {"naive", "mrf", "mrf_logit", "hcb", "ag"}
        How to combine them (:data:`~mlm_ppl.models.pairs.PAIR_METHODS`).
    **options
        ``hcb``: ``pivot``, ``pivot_side`` (:class:`~mlm_ppl.models.pairs.HCBOptions`; defaults
        ``"both"``, ``"a"``). ``ag``: ``tol``, ``max_iter``, ``accelerate``
        (:class:`~mlm_ppl.models.pairs.AGOptions`; defaults 1e-6, 20000,
        True): stop when the fixed-point equation holds to ``tol``, or after ``max_iter``
        evaluations of the map (then the joint's ``converged`` is False); the reference code
        (``ltorroba/lms-from-mlms``, ``--iter-steps`` default) runs 40 plain steps, which is
        ``max_iter=40, accelerate=False``. The other methods take no options.

    Returns
    -------
    PairJoint
        The normalised joint over the candidate pairs.

    Raises
    ------
    ValueError, TypeError
        When ``method`` or an option is unknown or invalid, or an option belongs to another
        method (:func:`~mlm_ppl.models.pairs.joint_options`); ValueError when an ``hcb`` pivot
        token id is not a candidate.

    Examples
    --------
    >>> from mlm_ppl.models import pair_joint
    >>> from mlm_ppl.testing import goyal_counterexample, table_pair_conditionals
    >>> cond = table_pair_conditionals(goyal_counterexample())  # two binary tokens
    >>> joint = pair_joint(cond, "hcb", pivot_side="b")
    >>> joint.method, joint.log_joint.shape
    ('hcb', torch.Size([2, 2]))
    >>> pair_joint(cond, "ag", max_iter=40, accelerate=False).iterations <= 40
    True
    """
    return build_joint(cond, method, joint_options(method, **options))


def build_joint(cond: "PairConditionals", method: str, options: Any) -> PairJoint:
    """:func:`pair_joint` with options already checked by :func:`joint_options`."""
    extra: dict[str, Any] = {}
    if method == "hcb":
        logq, extra["pivot"] = hcb_joint(cond, options)
    elif method == "ag":
        logq, extra["converged"], extra["iterations"] = ag_joint(cond, options)
    else:
        simple: dict[str, Callable[[PairConditionals], Tensor]] = {
            "naive": naive_joint,
            "mrf": mrf_joint,
            "mrf_logit": mrf_logit_joint,
        }
        logq = simple[method](cond)
    logq = logq - torch.logsumexp(logq.reshape(-1), 0)
    return PairJoint(logq, cond.candidates_a, cond.candidates_b, positions=cond.positions, method=method, **extra)
