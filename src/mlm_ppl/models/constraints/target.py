"""The constrained target: a base target with a bound spec's log-factor and alphabets."""

from __future__ import annotations

from torch import Tensor

from ..target import ConstrainedTarget, Target
from .bound import BoundConstraints


class ConstraintTarget(ConstrainedTarget):
    """A target under a :class:`~mlm_ppl.ConstraintSpec`: the spec's log-factor and alphabets on a base target.

    A :class:`~mlm_ppl.models.ConstrainedTarget` whose log-factor is
    :meth:`~mlm_ppl.models.constraints.BoundConstraints.log_factor` and whose :attr:`allowed`
    (the :class:`~mlm_ppl.models.Target` protocol's alphabets) are the spec's.

    Every kernel proposes within :attr:`allowed`, renormalised, with the Hastings ratio of that
    restricted proposal; the other rules (:class:`~mlm_ppl.models.constraints.Forbid`,
    :class:`~mlm_ppl.models.constraints.Require`, :class:`~mlm_ppl.models.constraints.OddCount`)
    give ``-inf``, and :meth:`forbidden` finds them from the rules alone, which MH reads before
    running a proposal's masked copies. A kernel that does not sample log-factors
    (pseudo-Gibbs, mask-predict) accepts it when
    ``alphabets_only`` of its :class:`~mlm_ppl.models.constraints.BoundConstraints`: its restricted proposals
    then honour the whole spec.

    Parameters
    ----------
    base : Target
        The target the spec was bound to.
    constraints : BoundConstraints
        The spec bound to ``base`` (:meth:`~mlm_ppl.ConstraintSpec.bind`); kept as the attribute
        ``constraints``. :meth:`~mlm_ppl.ConstraintSpec.constrain` binds and wraps in one call.

    Raises
    ------
    ValueError
        When ``constraints`` were bound to another target than ``base``.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Allowed, Forbid
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> prior = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "AC[MASK][MASK]E")
    >>> target = ConstraintSpec([Allowed("no-c", "ADE"), Forbid("no-dd", "DD")]).constrain(prior)
    >>> target.allowed.sum(-1)  # A, D and E at each free position
    tensor([3, 3])
    >>> target.forbidden(prior.encode(["ACADE", "ACDDE", "ACCAE"]))
    tensor([False,  True,  True])
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
        """Which states break a rule of the spec or are forbidden by the base.

        The rules are read alone (:meth:`~mlm_ppl.models.constraints.BoundConstraints.feasible`):
        no expert, no forward pass.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states, shape ``(N, L)``.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)`` bool, True where a state breaks a rule or the base forbids it.

        Raises
        ------
        ValueError, TypeError
            When ``tokens`` are not complete states ``(N, L)`` of the target.
        """
        return self.base.forbidden(tokens) | ~self.constraints.feasible(tokens)

    def __repr__(self) -> str:
        return f"ConstraintTarget({self.base!r}, {self.constraints.spec!r})"
