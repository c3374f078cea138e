"""Surrogate-MH's exact transition matrices, from the kernels' own code (tests and checks on tiny targets).

:class:`SurrogateMatrices` is the part of :class:`~mlm_ppl.inference.SurrogateMH` that enumerates:
the inner chain's exact matrix to the power ``inner_steps``, each move corrected by the outer
acceptance as :meth:`SurrogateMH.step <mlm_ppl.inference.SurrogateMH.step>` corrects it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..models.gap_target import GapTarget
from ..models.target import Evaluation, Target
from .base import acceptance_probability, mh_log_ratio
from .exact import enumerate_states, transition_matrix
from .tempering import ReplicaMH

__all__ = ["SurrogateMatrices"]


class SurrogateMatrices:
    """Exact matrices of a :class:`~mlm_ppl.inference.SurrogateMH` (its base class: it reads the
    kernel's ``target``, ``surrogate``, ``inner``, ``inner_steps``, ``options`` and ``log_density``)."""

    target: Target
    surrogate: Any
    inner: Any
    inner_steps: int
    options: Any
    log_density: Any

    def transition_matrix(self, states: Tensor, evaluation: Evaluation, index) -> Tensor:
        """``(S, S)`` transition matrix of one step over all ``states`` (``evaluation`` is the
        target's of them): the inner chain's exact ``inner_steps``-step matrix on the
        surrogate, corrected by the outer acceptance. Uses the kernels' own code."""
        if isinstance(self.target, GapTarget):
            raise TypeError("on a variable gap the states have several lengths: use SurrogateMH.gap_matrix()")
        if self.options.replicas > 1:
            raise TypeError("with replicas the states are the replicas' joint states: use SurrogateMH.replica_matrix()")
        Q = torch.linalg.matrix_power(transition_matrix(self.inner, states), self.inner_steps)
        lp = self.log_density(evaluation.energy, evaluation.log_factor).double()
        sur = self.surrogate.evaluate(states)
        lp_sur = self.log_density(sur.energy, sur.log_factor).double()
        return self._corrected(Q, lp, lp_sur)

    def gap_matrix(self) -> tuple[Tensor, Tensor]:
        """On a variable gap: the ``(S, S)`` exact matrix of one step over every ``(L, x)`` of the
        prior's lengths (ordered as :meth:`GapJump.states <mlm_ppl.inference.jump.GapJump.states>`):
        the inner gap-jump chain's exact matrix on the surrogate to the power ``inner_steps``,
        corrected by the outer acceptance; and the target's exact ``(S,)`` log probabilities."""
        if not isinstance(self.target, GapTarget):
            raise TypeError("gap_matrix is for a variable gap; use exact.transition_matrix(kernel)")
        Q = torch.linalg.matrix_power(self.inner.exact_matrix(), self.inner_steps)
        lp: list[Tensor] = []
        lp_sur: list[Tensor] = []
        for L in self.target.lengths:
            states = enumerate_states(self.target.target(L))
            for gap, out in ((self.target, lp), (self.surrogate, lp_sur)):
                ev = gap.pad_evaluation(L, gap.target(L).evaluate(states))
                out.append(self.log_density(ev.energy, ev.log_factor).double())
        exact_lp = torch.cat(lp)
        return self._corrected(Q, exact_lp, torch.cat(lp_sur)), torch.log_softmax(exact_lp, 0)

    def replica_matrix(self) -> tuple[Tensor, Tensor]:
        """With replicas: the ``(S**K, S**K)`` exact matrix of one step over every joint state of the
        inner chain's replicas (ordered as :meth:`ReplicaMH.replica_matrix
        <mlm_ppl.inference.tempering.ReplicaMH.replica_matrix>`): the inner chain's exact matrix to
        the power ``inner_steps``, corrected by the outer acceptance; and the ``(S**K,)`` log
        probabilities of the law it leaves invariant, the target's in replica 0 and the tempered
        surrogate's in the others (its marginal over replica 0 is the target)."""
        if self.options.replicas == 1:
            raise TypeError("replica_matrix is for replicas > 1; use exact.transition_matrix(kernel)")
        inner: ReplicaMH = self.inner
        Q = torch.linalg.matrix_power(inner.replica_matrix()[0], self.inner_steps)
        states = enumerate_states(self.target)
        ev, sur = self.target.evaluate(states), self.surrogate.evaluate(states)
        lp, lp_sur = (self.log_density(e.energy, e.log_factor).double() for e in (ev, sur))
        hot = inner.hot_log_probs(states)  # the hot replicas' terms, the same in both
        joint = (lp[:, None] + hot[None, :]).flatten()
        joint_sur = (lp_sur[:, None] + hot[None, :]).flatten()
        return self._corrected(Q, joint, joint_sur), torch.log_softmax(joint, 0)

    def _corrected(self, Q: Tensor, lp: Tensor, lp_sur: Tensor) -> Tensor:
        """The inner chain's matrix ``Q`` with each move accepted as :meth:`step` accepts it, from the
        states' target and surrogate log densities ``lp`` and ``lp_sur``."""
        moved = ~torch.eye(lp.shape[0], dtype=torch.bool)
        # log a(x -> y) = [lp(y) - lp(x)] - [lp~(y) - lp~(x)], as in step
        A = acceptance_probability(mh_log_ratio(lp[None, :], lp[:, None], lp_sur[:, None] - lp_sur[None, :], moved))
        P = Q * A
        P.diagonal().zero_()
        P.diagonal().copy_(1 - P.sum(1))
        return P
