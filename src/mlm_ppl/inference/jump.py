"""Trans-dimensional MH over the lengths of a variable gap: insert and delete moves on the energy itself.

The target is ``p(L, x) ∝ pi(L) exp(-E(x)/T)`` over every loop of a
:class:`~mlm_ppl.models.gaps.GapTemplate` with length ``L`` in ``lo..hi`` (``x`` the whole
sequence of the length-``L`` template), so that the model's own energy decides the lengths, up to
the prior ``pi`` (:class:`~mlm_ppl.models.gaps.LengthPrior`; its lengths contiguous: a chain
moves one length at a time). No constraints yet: ``p~`` below is ``exp(-E/T)``, its log-factor 0.
One step picks a move:

* **update** (probability ``p_update``): one step of plain MH (:class:`~.mh.MetropolisHastings`,
  single-site random scan) on the length-``L`` target, the length kept;
* **insert** (``p_insert``; refused at ``L = hi``): a slot ``j`` of the gap's ``L + 1``, uniformly;
  ``y`` is ``x`` with a new position at ``j``, its token ``t`` drawn from the MLM's conditional
  there ``q(t | y_{-j})`` (the length-``L+1`` target's alphabet at that site). Accepted with
  probability ``min(1, A)``,

      A = pi(L+1) p~(y) / (pi(L) p~(x))  x  [p_delete / (L+1)] / ([p_insert / (L+1)] q(t | y_{-j}))

  (``p~ = exp(-E/T + log_factor)``; the slot's ``1/(L+1)`` and the reverse delete's ``1/(L+1)``
  cancel);
* **delete** (``p_delete``; refused at ``L = lo``): a gap position ``j`` of ``L``, uniformly; ``z``
  is ``x`` without it, accepted with the reciprocal of the insert ratio from ``z`` back to ``x``:
  ``A = pi(L-1) p~(z) q(x_j | x_{-j}) p_insert / (pi(L) p~(x) p_delete)``.

A refused move type (insert at ``hi``, delete at ``lo``) leaves the state where it is, so the
move probabilities do not depend on ``L`` and the ratios above hold everywhere. Each insert path
``(x, j, t)`` and the delete path ``(y, j)`` that undoes it are in one-to-one correspondence, so
the ratios (per path) give detailed balance of the whole kernel, also where two slots give the
same ``y``. The conditional ``q`` of both directions is computed the same way (one masked
copy of ``y`` at ``j``), and :meth:`GapJump.step` and the exact matrix share the proposal code
and the ratio (:meth:`GapJump.log_ratio`).

Here one chain at a time (:meth:`GapJump.step`) and the exact transition matrix on the union of
lengths (:meth:`GapJump.transition_matrix`), for tiny models: the kernel's exactness is tested
by enumeration.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._checks import check_temperature
from ..models.distribution import MaskedLMDistribution
from ..models.gaps import GapTemplate, LengthPrior
from ..models.masked_lm import MaskedLM
from ..models.target import log_density
from .base import proposal_log_probs
from .exact import enumerate_states, state_index, transition_matrix
from .registry import make_kernel
from .spec import KernelBase
from .streams import ChainStreams

__all__ = ["GapJump", "JumpState", "MOVES"]

MOVES = ("update", "insert", "delete")


class JumpState(NamedTuple):
    """One chain: its gap length and its tokens ``(1, T_L)``, with the MH state of that length."""

    length: int
    mh: Any  # MHState of the length-L target (energy, log-factor and conditionals cached)


class GapJump:
    """Trans-dimensional MH on ``pi(L) exp(-E/T)`` over the lengths of ``gap``.

    Parameters
    ----------
    mlm : MaskedLM
    gap : GapTemplate
        From :func:`~mlm_ppl.models.gaps.parse_gap`; every length's template is checked by its target.
    prior : LengthPrior
        ``pi(L)`` over contiguous lengths of the gap (a hole is refused: no chain could cross it).
    energy, temperature :
        As :class:`~mlm_ppl.MaskedLMDistribution`'s.
    p_update, p_insert, p_delete : float
        Move probabilities, each > 0, summing to 1 (default 1/2, 1/4, 1/4).
    """

    def __init__(
        self,
        mlm: MaskedLM,
        gap: GapTemplate,
        prior: LengthPrior,
        *,
        energy: str = "norm",
        temperature: float = 1.0,
        p_update: float = 0.5,
        p_insert: float = 0.25,
        p_delete: float = 0.25,
    ) -> None:
        probs = (p_update, p_insert, p_delete)
        if not all(isinstance(p, (int, float)) and p > 0 for p in probs) or not math.isclose(sum(probs), 1.0):
            raise ValueError(f"move probabilities {probs} must each be > 0 and sum to 1")
        lengths = sorted(prior.weights)
        if not set(lengths) <= set(gap.lengths):
            raise ValueError(f"the prior names lengths outside the gap's {gap.lo}..{gap.hi}")
        if lengths != list(range(lengths[0], lengths[-1] + 1)):
            raise ValueError(
                f"the prior's lengths {lengths} have a hole: a chain moves one length at a time and could never "
                "cross it; give every length between the shortest and the longest a weight > 0"
            )
        self.mlm, self.gap, self.prior = mlm, gap, prior
        self.energy, self.temperature = energy, check_temperature(temperature, "temperature")
        self.p_update, self.p_insert, self.p_delete = (float(p) for p in probs)
        self._targets: dict[int, MaskedLMDistribution] = {}
        self._kernels: dict[int, KernelBase] = {}
        self._gap_start = gap.before.count(gap.mask)  # the gap's first free site among every length's free sites
        self.target(lengths[-1])  # the longest length's template checked now, not when a chain reaches it

    # -------------------------------------------------------------- targets of each length
    def target(self, length: int) -> MaskedLMDistribution:
        if length not in self._targets:
            t = MaskedLMDistribution(
                self.mlm, self.gap.template(length), energy=self.energy, temperature=self.temperature
            )
            self._targets[length] = t
        return self._targets[length]

    def kernel(self, length: int) -> KernelBase:
        """The update move's kernel at ``length``: plain single-site MH, random scan."""
        if length not in self._kernels:
            self._kernels[length] = make_kernel("mh", self.target(length), scan="random")
        return self._kernels[length]

    def log_prior(self, length: int) -> float:
        w = self.prior.weights.get(length, 0.0)
        return math.log(w) if w > 0 else float("-inf")

    def gap_position(self, length: int, j: int) -> int:
        """The token index of gap position ``j`` (0-based) of the length-``length`` template."""
        target = self.target(length)
        return int(target.free_positions[self._gap_start + j])

    def log_density(self, length: int, energy: Tensor, log_factor: Tensor) -> Tensor:
        """``log pi(L) - E/T + log_factor`` (float64)."""
        return self.log_prior(length) + log_density(energy, log_factor, self.temperature).double()

    # -------------------------------------------------------------- the moves
    def _insert_log_q(self, y: Tensor, length: int, j: int) -> Tensor:
        """``(V,)`` log q(. | y_{-j}) at gap position ``j`` of ``y`` ``(1, T)`` of length ``length``."""
        target = self.target(length)
        pos = self.gap_position(length, j)
        logits = target.site_logits(y, torch.tensor([[pos]]))[0, 0]  # (V,)
        allowed = target.allowed[self._gap_start + j]
        return proposal_log_probs(logits, allowed).double()

    def _insert(self, x: Tensor, length: int, j: int) -> Tensor:
        """``x`` ``(1, T)`` with a masked position at gap slot ``j`` (0..L): ``(1, T+1)``."""
        at = self.gap_position(length, j) if j < length else self.gap_position(length, length - 1) + 1
        mask = torch.tensor([[self.mlm.mask_id]], dtype=x.dtype)
        return torch.cat([x[:, :at], mask, x[:, at:]], 1)

    def _delete(self, x: Tensor, length: int, j: int) -> Tensor:
        at = self.gap_position(length, j)
        return torch.cat([x[:, :at], x[:, at + 1 :]], 1)

    def log_ratio(self, kind: str, lp_new: Tensor, lp_old: Tensor | float, logq: Tensor) -> Tensor:
        """The log Hastings ratio of an insert (``logq``: ``log q(t | y_{-j})`` of the new token) or a
        delete (``logq``: ``log q(x_j | x_{-j})`` of the removed one), from the log densities
        (:meth:`log_density`) of the new and the old state; the one formula :meth:`step` and
        :meth:`move_matrices` use."""
        if kind == "insert":
            return lp_new - lp_old + math.log(self.p_delete) - math.log(self.p_insert) - logq
        return lp_new - lp_old + math.log(self.p_insert) - math.log(self.p_delete) + logq

    def init(self, length: int, tokens: Tensor) -> JumpState:
        """A chain at ``length`` with complete ``tokens`` ``(1, T_L)``."""
        if self.log_prior(length) == float("-inf"):
            raise ValueError(f"length {length} has prior weight 0")
        return JumpState(length, self.kernel(length).init(tokens))

    def lp(self, state: JumpState) -> float:
        return float(self.log_density(state.length, state.mh.energy, state.mh.log_factor)[0])

    def step(self, state: JumpState, streams: ChainStreams) -> tuple[JumpState, str, bool]:
        """One step of one chain (``streams`` of one chain): ``(new state, move, accepted)``."""
        L, x = state.length, state.mh.tokens
        u = float(streams.rand((1,))[0])
        if u < self.p_update:
            new, info = self.kernel(L).step(state.mh, streams)
            return JumpState(L, new), "update", bool(info.is_accepted[0])
        lp_x = self.lp(state)
        if u < self.p_update + self.p_insert:
            if self.log_prior(L + 1) == float("-inf"):  # past the prior's longest (within the gap)
                return state, "insert", False
            j = int(streams.randint(L + 1)[0])
            y = self._insert(x, L, j)
            logq = self._insert_log_q(y, L + 1, j)
            t = int(streams.categorical(logq.exp()[None])[0])
            y[0, self.gap_position(L + 1, j)] = t
            new = self.kernel(L + 1).init(y)
            log_a = self.log_ratio("insert", self.log_density(L + 1, new.energy, new.log_factor)[0], lp_x, logq[t])
            moved = JumpState(L + 1, new)
            kind = "insert"
        else:
            if self.log_prior(L - 1) == float("-inf"):  # below the prior's shortest
                return state, "delete", False
            j = int(streams.randint(L)[0])
            token = int(x[0, self.gap_position(L, j)])
            z = self._delete(x, L, j)
            logq = self._insert_log_q(self._insert(z, L - 1, j), L, j)  # the reverse insert's q(x_j | x_{-j})
            new = self.kernel(L - 1).init(z)
            log_a = self.log_ratio("delete", self.log_density(L - 1, new.energy, new.log_factor)[0], lp_x, logq[token])
            moved = JumpState(L - 1, new)
            kind = "delete"
        accept = bool(torch.log(streams.rand((1,))[0].double()) < log_a)
        return (moved if accept else state), kind, accept

    # -------------------------------------------------------------- exact, for tiny models
    def states(self) -> list[tuple[int, Tensor]]:
        """Every ``(L, tokens (T_L,))`` of the lengths the prior weighs, in order of length, then as
        :func:`~mlm_ppl.inference.exact.enumerate_states` orders each length's."""
        return [(L, s) for L in sorted(self.prior.weights) for s in enumerate_states(self.target(L))]

    def exact_log_probs(self) -> Tensor:
        """``(S,)`` normalised log p(L, x) over :meth:`states`."""
        parts = []
        for L in sorted(self.prior.weights):
            target = self.target(L)
            ev = target.evaluate(enumerate_states(target))
            parts.append(self.log_density(L, ev.energy, ev.log_factor))
        return torch.log_softmax(torch.cat(parts), 0)

    def transition_matrix(self) -> Tensor:
        """``(S, S)`` float64 exact matrix of one :meth:`step` over :meth:`states`:
        ``p_update M_update + p_insert M_insert + p_delete M_delete`` (:meth:`move_matrices`)."""
        m = self.move_matrices()
        return self.p_update * m["update"] + self.p_insert * m["insert"] + self.p_delete * m["delete"]

    def move_matrices(self) -> dict[str, Tensor]:
        """Each move's ``(S, S)`` float64 exact matrix over :meth:`states`, given that move is chosen:
        the update's from each length's MH kernel (:func:`~mlm_ppl.inference.exact.transition_matrix`),
        insert and delete built from the moves' own proposal and density code."""
        lengths = sorted(self.prior.weights)
        offset, n = {}, 0
        for L in lengths:
            offset[L] = n
            n += enumerate_states(self.target(L)).shape[0]
        M = {move: torch.zeros((n, n), dtype=torch.float64) for move in MOVES}
        for L in lengths:
            target = self.target(L)
            states = enumerate_states(target)
            ev = target.evaluate(states)
            lp = self.log_density(L, ev.energy, ev.log_factor)
            o, S = offset[L], states.shape[0]
            M["update"][o : o + S, o : o + S] = transition_matrix(self.kernel(L), states)
            for s in range(S):
                x = states[s : s + 1]
                for kind, Lnew, slots in (("insert", L + 1, L + 1), ("delete", L - 1, L)):
                    P = M[kind]
                    if Lnew not in offset:  # refused: a bound, or a length of prior weight 0
                        P[o + s, o + s] += 1.0
                        continue
                    index = state_index(self.target(Lnew))
                    for j in range(slots):
                        if kind == "insert":
                            y = self._insert(x, L, j)
                            logq = self._insert_log_q(y, Lnew, j)
                            ys = y.repeat(len(logq), 1)
                            ys[:, self.gap_position(Lnew, j)] = torch.arange(len(logq))
                            ok = logq > float("-inf")
                            ys, probs, logq_move = ys[ok], logq[ok].exp(), logq[ok]
                        else:
                            token = int(x[0, self.gap_position(L, j)])
                            ys = self._delete(x, L, j)
                            logq = self._insert_log_q(self._insert(ys, Lnew, j), L, j)
                            probs = torch.ones(1, dtype=torch.float64)
                            logq_move = logq[token].reshape(1)
                        evy = self.target(Lnew).evaluate(ys)
                        log_a = self.log_ratio(
                            kind, self.log_density(Lnew, evy.energy, evy.log_factor), lp[s], logq_move
                        )
                        a = torch.exp(torch.clamp(log_a, max=0.0))
                        w = probs / slots
                        P[o + s].index_add_(0, offset[Lnew] + index(ys), w * a)
                        P[o + s, o + s] += float((w * (1 - a)).sum())
        return M
