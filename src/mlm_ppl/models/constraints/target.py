"""The constrained target: a base target with a bound spec's log-factor and alphabets."""

from __future__ import annotations

from torch import Tensor

from ..target import ConstrainedTarget, Target
from .bound import BoundConstraints


class ConstraintTarget(ConstrainedTarget):
    """A target under a :class:`ConstraintSpec`: a :class:`~mlm_ppl.models.ConstrainedTarget` whose
    log-factor is :meth:`BoundConstraints.log_factor` and whose :attr:`allowed` (the
    :class:`~mlm_ppl.models.Target` protocol's alphabets) are the spec's.

    Every kernel proposes within :attr:`allowed`, renormalised, with the Hastings ratio of that
    restricted proposal; the other rules (:class:`Forbid`, :class:`Require`, :class:`OddCount`)
    give ``-inf``, and :meth:`forbidden` finds them from the rules alone, which MH reads before
    running a proposal's masked copies. A kernel that does not sample log-factors
    (pseudo-Gibbs, mask-predict) accepts it when :attr:`BoundConstraints.alphabets_only`: its
    restricted proposals then honour the whole spec.
    """

    def __init__(self, base: Target, constraints: BoundConstraints) -> None:
        if constraints.target is not base:
            raise ValueError("constraints were bound to another target; bind them to this one (spec.constrain(base))")
        super().__init__(base, constraints.log_factor)
        self.constraints = constraints

    @property
    def allowed(self) -> Tensor:
        """``(F, V)`` bool, the tokens each free position may hold."""
        return self.constraints.allowed

    def forbidden(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where the states break a rule (:meth:`BoundConstraints.feasible`: the
        rules alone, no expert, no forward pass) or the base forbids them."""
        return self.base.forbidden(tokens) | ~self.constraints.feasible(tokens)

    def __repr__(self) -> str:
        return f"ConstraintTarget({self.base!r}, {self.constraints.spec!r})"
