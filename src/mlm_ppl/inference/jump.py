"""Trans-dimensional MH over the lengths of a variable gap: insert and delete moves on the energy itself.

The target is ``p(L, x) ∝ pi(L) exp(-E(x)/T)`` over every loop of a
:class:`~mlm_ppl.models.gaps.GapTemplate` with length ``L`` in the prior's lengths (``x`` the
whole sequence of the length-``L`` template), so that the model's own energy decides the lengths,
up to the prior ``pi`` (:class:`~mlm_ppl.models.gaps.LengthPrior`; its lengths contiguous: a
chain moves one length at a time). With constraints (bound to each length by the
:class:`~mlm_ppl.models.gap_target.GapTarget`), ``p~`` below is ``exp(-E/T + log_factor_L)``;
without, ``exp(-E/T)``.
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

The target is a :class:`~mlm_ppl.models.gap_target.GapTarget` (states padded to the longest
template), and :class:`GapJump` is a registered kernel (``gap-jump``): ``run_chains``, checkpoints,
``--resume`` and ``run.nc`` treat it as any other. Its chains step one at a time
(:meth:`GapJump.step_chain`: the lengths differ, so their forward passes do not batch), each from
its own stream. :meth:`GapJump.move_matrices` gives each move's exact matrix on the union of
lengths, for tiny models: the kernel's exactness is tested by enumeration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._checks import check_probability, check_share, count_at_least
from ..models.gap_target import GapTarget
from ..models.target import Evaluation, log_density
from .base import acceptance_probability, mh_log_ratio, proposal_log_probs
from .exact import enumerate_states, state_index, transition_matrix
from .mh import MetropolisHastings, MHState
from .spec import Capabilities, KernelBase, Options, option
from .streams import ChainStreams

__all__ = ["GapJump", "GapJumpOptions", "GapJumpState", "GapJumpInfo", "JumpState", "MOVES"]

MOVES = ("update", "insert", "delete")
"""The moves, in the order of their codes in a run's ``move`` statistic (0, 1, 2)."""


def move_options() -> tuple[Any, Any, Any]:
    """The fields ``p_update``, ``p_insert``, ``p_delete`` of an Options class whose kernel makes
    gap-jump's moves (gap-jump's own, surrogate-MH's inner chain on a variable gap)."""
    return (
        option(0.5, "probability of an update move (MH at the current length)", check=check_probability),
        option(0.25, "probability of an insert move (a gap position added)", check=check_probability),
        option(0.25, "probability of a delete move (a gap position removed)", check=check_probability),
    )


def check_moves(options: Any) -> None:
    """The move probabilities of ``options`` sum to 1 (a ValueError naming them otherwise)."""
    probs = (options.p_update, options.p_insert, options.p_delete)
    if not math.isclose(sum(probs), 1.0):
        raise ValueError(f"the move probabilities p_update, p_insert, p_delete {probs} must sum to 1")


_UPDATE, _INSERT, _DELETE = move_options()


@dataclass(frozen=True)
class GapJumpOptions(Options):
    p_update: float = _UPDATE
    p_insert: float = _INSERT
    p_delete: float = _DELETE
    p_unmask: float = option(
        0.0,
        "probability that an update move proposes a run of unmask_size free positions by unmasking them one by one",
        check=check_share,
    )
    unmask_size: int | None = option(
        None, "free positions an update's unmask proposal redraws (default: all)", check=count_at_least(1)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_moves(self)


class GapJumpState(NamedTuple):
    """C chains as padded states of the :class:`~mlm_ppl.models.gap_target.GapTarget` (what
    :meth:`GapTarget.evaluate` gives of them: the log-factor is ``log pi(L)``)."""

    tokens: Tensor  # (C, T) long, padded
    energy: Tensor  # (C,)
    log_factor: Tensor  # (C,) log pi(L)
    cond_logits: Tensor  # (C, F, V) conditionals of the free sites each chain has (zeros elsewhere)


class GapJumpInfo(NamedTuple):
    lp: Tensor  # (C,) log pi(L) - E/T after the step
    is_accepted: Tensor  # (C,) bool
    acceptance_rate: Tensor  # (C,) min(1, exp(log ratio)) of the move made (0 for a move refused at a bound)
    n_changed: Tensor  # (C,) positions the step changed (1 for an accepted insert or delete)
    length: Tensor  # (C,) gap length after the step
    move: Tensor  # (C,) 0 update, 1 insert, 2 delete (MOVES)


class JumpState(NamedTuple):
    """One chain: its gap length and the MH state of its length-``L`` target (tokens ``(1, T_L)``)."""

    length: int
    mh: MHState


class GapJump(KernelBase[GapJumpOptions]):
    """Trans-dimensional MH on ``pi(L) exp(-E/T)`` over the lengths of a variable gap (``gap-jump``).

    ``GapJump(GapTarget(mlm, template, prior), p_update=..., p_insert=..., p_delete=...)``: the
    move probabilities each in (0, 1), summing to 1 (default 1/2, 1/4, 1/4). The update move is
    MH with random scan on the current length's target: single sites, and with probability
    ``p_unmask`` a run of ``unmask_size`` free positions unmasked one by one
    (:class:`~mlm_ppl.inference.MetropolisHastings`). It is reversible for its target (every move
    is an MH step, chosen independently of the state), so surrogate-MH may run it as its inner chain.
    """

    name = "gap-jump"
    Options = GapJumpOptions
    State = GapJumpState
    Info = GapJumpInfo
    capabilities = Capabilities(
        log_factor=False, gibbs=False, complete_start=True, exact_matrix=False, lengths=True, batched=False, fixed=False
    )
    older_records = {"p_unmask": 0.0, "unmask_size": None}  # unmask proposals came with 0.4
    target: GapTarget

    def bind_target(self, target: Any) -> None:
        o = self.options
        self.p_update, self.p_insert, self.p_delete = o.p_update, o.p_insert, o.p_delete
        self._kernels: dict[int, MetropolisHastings] = {}
        try:  # the update's options checked against the fewest free positions
            self.kernel(target.shortest)
        except ValueError as err:
            raise ValueError(f"at the gap's shortest length, {target.shortest}: {err}") from None

    def kernel(self, length: int) -> MetropolisHastings:
        """The update move's kernel at ``length``: MH with random scan, single sites (and unmask
        proposals with ``p_unmask``), proposing at temperature 1 as the insert moves do (gap-jump
        has no proposal temperature to record, so it keeps the one its runs always had)."""
        if length not in self._kernels:
            o = self.options
            self._kernels[length] = MetropolisHastings(
                self.target.target(length),
                scan="random",
                p_unmask=o.p_unmask,
                unmask_size=o.unmask_size,
                proposal_temperature=1.0,
            )
        return self._kernels[length]

    def evaluations_per_step(self) -> float:
        """One evaluation, plus a jump's masked copy for ``q`` and an update's unmask reads (at the
        longest length, in evaluations of it)."""
        longest = self.target.target(self.target.longest)
        copies = getattr(longest, "scored_positions", longest.free_positions).numel()
        reads = self.p_update * self.kernel(self.target.longest).proposal_cost()
        return 1.0 + self.p_insert + self.p_delete + reads / copies

    def log_density(self, length: int, energy: Tensor, log_factor: Tensor) -> Tensor:
        """``log pi(L) - E/T + log_factor`` (float64), ``log_factor`` the length's own (0 here)."""
        return self.target.log_prior(length) + log_density(energy, log_factor, self.target.temperature).double()

    def gap_position(self, length: int, j: int) -> int:
        """The token index of gap position ``j`` (0-based) of the length-``length`` template."""
        return int(self.target.target(length).free_positions[self.target.gap_start + j])

    # -------------------------------------------------------------- the moves
    def _insert_log_q(self, y: Tensor, length: int, j: int) -> Tensor:
        """``(V,)`` log q(. | y_{-j}) at gap position ``j`` of ``y`` ``(1, T)`` of length ``length``."""
        target = self.target.target(length)
        logits = target.site_logits(y, torch.tensor([[self.gap_position(length, j)]]))[0, 0]  # (V,)
        return proposal_log_probs(logits, target.allowed[self.target.gap_start + j]).double()

    def _insert(self, x: Tensor, length: int, j: int) -> Tensor:
        """``x`` ``(1, T)`` with a masked position at gap slot ``j`` (0..L): ``(1, T+1)``."""
        at = self.gap_position(length, j) if j < length else self.gap_position(length, length - 1) + 1
        mask = torch.tensor([[self.target.mlm.mask_id]], dtype=x.dtype)
        return torch.cat([x[:, :at], mask, x[:, at:]], 1)

    def _delete(self, x: Tensor, length: int, j: int) -> Tensor:
        at = self.gap_position(length, j)
        return torch.cat([x[:, :at], x[:, at + 1 :]], 1)

    def log_ratio(self, kind: str, lp_new: Tensor, lp_old: Tensor | float, logq: Tensor) -> Tensor:
        """The log Hastings ratio of an insert (``logq``: ``log q(t | y_{-j})`` of the new token) or a
        delete (``logq``: ``log q(x_j | x_{-j})`` of the removed one), from the log densities
        (:meth:`log_density`) of the new and the old state; the one formula :meth:`step_chain` and
        :meth:`move_matrices` use. Where a state has density 0 (it breaks a hard rule), as every
        kernel reads it (:func:`~mlm_ppl.inference.base.mh_log_ratio`): a move out of density 0 is
        accepted, a move into it refused."""
        if kind == "insert":
            correction = math.log(self.p_delete) - math.log(self.p_insert) - logq
        else:
            correction = math.log(self.p_insert) - math.log(self.p_delete) + logq
        lp_old = torch.as_tensor(lp_old, dtype=torch.float64).expand_as(lp_new)
        return mh_log_ratio(lp_new, lp_old, correction, torch.ones_like(lp_new, dtype=torch.bool))

    # -------------------------------------------------------------- one chain
    def init_chain(self, length: int, tokens: Tensor) -> JumpState:
        """A chain at ``length`` with complete ``tokens`` ``(1, T_L)``."""
        if self.target.log_prior(length) == float("-inf"):
            raise ValueError(f"length {length} has prior weight 0")
        return JumpState(length, self.kernel(length).init(tokens))

    def lp(self, state: JumpState) -> float:
        return float(self.log_density(state.length, state.mh.energy, state.mh.log_factor)[0])

    def step_chain(self, state: JumpState, streams: ChainStreams) -> tuple[JumpState, str, bool, float]:
        """One step of one chain (``streams`` of one chain): ``(new state, move, accepted, acceptance
        probability)``."""
        L, x = state.length, state.mh.tokens
        u = float(streams.rand((1,))[0])
        if u < self.p_update:
            new, info = self.kernel(L).step(state.mh, streams)
            return JumpState(L, new), "update", bool(info.is_accepted[0]), float(info.acceptance_rate[0])
        lp_x = self.lp(state)
        if u < self.p_update + self.p_insert:
            if self.target.log_prior(L + 1) == float("-inf"):  # past the prior's longest
                return state, "insert", False, 0.0
            j = int(streams.randint(L + 1)[0])
            y = self._insert(x, L, j)
            logq = self._insert_log_q(y, L + 1, j)
            t = int(streams.categorical(logq.exp()[None])[0])
            y[0, self.gap_position(L + 1, j)] = t
            new = self.kernel(L + 1).init(y)
            log_a = self.log_ratio("insert", self.log_density(L + 1, new.energy, new.log_factor)[0], lp_x, logq[t])
            moved, kind = JumpState(L + 1, new), "insert"
        else:
            if self.target.log_prior(L - 1) == float("-inf"):  # below the prior's shortest
                return state, "delete", False, 0.0
            j = int(streams.randint(L)[0])
            token = int(x[0, self.gap_position(L, j)])
            z = self._delete(x, L, j)
            logq = self._insert_log_q(self._insert(z, L - 1, j), L, j)  # the reverse insert's q(x_j | x_{-j})
            new = self.kernel(L - 1).init(z)
            log_a = self.log_ratio("delete", self.log_density(L - 1, new.energy, new.log_factor)[0], lp_x, logq[token])
            moved, kind = JumpState(L - 1, new), "delete"
        accept = bool(torch.log(streams.rand((1,))[0].double()) < log_a)
        return (moved if accept else state), kind, accept, float(acceptance_probability(log_a))

    # -------------------------------------------------------------- C chains (the kernel contract)
    def init(self, tokens: Tensor) -> GapJumpState:
        """Padded starting states ``(C, T)`` (each at its own length; see :class:`GapTarget`)."""
        self.target.validate_tokens(tokens)
        ev = self.target.evaluate(tokens)
        return GapJumpState(tokens.cpu(), ev.energy, ev.log_factor, ev.cond_logits)

    def chain(self, state: GapJumpState, c: int) -> JumpState:
        """Chain ``c`` of ``state`` as one chain's :class:`JumpState` (nothing recomputed)."""
        target = self.target
        L = int(target.length_of(state.tokens[c : c + 1])[0])
        own = state.log_factor[c : c + 1].double() - target.log_prior(L)  # the length's own log-factor: 0
        mh = MHState(
            target.unpad(state.tokens[c : c + 1], L),
            state.energy[c : c + 1],
            own.to(state.log_factor.dtype),
            state.cond_logits[c : c + 1, target.free_index(L)],
            0,  # random scan: the step count only schedules annealing, which this kernel does not do
            torch.empty(0, dtype=torch.long),
        )
        return JumpState(L, mh)

    def step(self, state: GapJumpState, streams: ChainStreams) -> tuple[GapJumpState, GapJumpInfo]:
        """One step of every chain, one chain at a time, chain ``c`` from its own stream."""
        target = self.target
        tokens, energy = state.tokens.clone(), state.energy.clone()
        factor, cond = state.log_factor.clone(), state.cond_logits.clone()
        C = tokens.shape[0]
        lp, rate = torch.empty(C), torch.empty(C)
        accepted = torch.zeros(C, dtype=torch.bool)
        changed, length, move = (torch.zeros(C, dtype=torch.long) for _ in range(3))
        for c in range(C):
            old = self.chain(state, c)
            new, kind, ok, prob = self.step_chain(old, streams.subset([c]))
            L = new.length
            if new is not old:
                tokens[c] = target.pad(new.mh.tokens, L)[0]
                ev = target.pad_evaluation(L, Evaluation(new.mh.energy, new.mh.log_factor, new.mh.cond_logits))
                energy[c], factor[c], cond[c] = ev.energy[0], ev.log_factor[0], ev.cond_logits[0]
            lp[c] = self.lp(new)
            accepted[c], rate[c], length[c], move[c] = ok, prob, L, MOVES.index(kind)
            changed[c] = int((tokens[c] != state.tokens[c]).sum()) if kind == "update" else int(ok)
        return GapJumpState(tokens, energy, factor, cond), GapJumpInfo(lp, accepted, rate, changed, length, move)

    # -------------------------------------------------------------- exact, for tiny models
    def states(self) -> list[tuple[int, Tensor]]:
        """Every ``(L, tokens (T_L,))`` of the lengths the prior weighs, in order of length, then as
        :func:`~mlm_ppl.inference.exact.enumerate_states` orders each length's."""
        return [(L, s) for L in self.target.lengths for s in enumerate_states(self.target.target(L))]

    def exact_log_probs(self) -> Tensor:
        """``(S,)`` normalised log p(L, x) over :meth:`states`."""
        parts = []
        for L in self.target.lengths:
            target = self.target.target(L)
            ev = target.evaluate(enumerate_states(target))
            parts.append(self.log_density(L, ev.energy, ev.log_factor))
        return torch.log_softmax(torch.cat(parts), 0)

    def exact_matrix(self) -> Tensor:
        """``(S, S)`` float64 exact matrix of one :meth:`step_chain` over :meth:`states`:
        ``p_update M_update + p_insert M_insert + p_delete M_delete`` (:meth:`move_matrices`)."""
        m = self.move_matrices()
        return self.p_update * m["update"] + self.p_insert * m["insert"] + self.p_delete * m["delete"]

    def move_matrices(self) -> dict[str, Tensor]:
        """Each move's ``(S, S)`` float64 exact matrix over :meth:`states`, given that move is chosen:
        the update's from each length's MH kernel (:func:`~mlm_ppl.inference.exact.transition_matrix`),
        insert and delete built from the moves' own proposal and density code."""
        lengths = self.target.lengths
        offset, n = {}, 0
        for L in lengths:
            offset[L] = n
            n += enumerate_states(self.target.target(L)).shape[0]
        M = {move: torch.zeros((n, n), dtype=torch.float64) for move in MOVES}
        for L in lengths:
            target = self.target.target(L)
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
                    index = state_index(self.target.target(Lnew))
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
                        evy = self.target.target(Lnew).evaluate(ys)
                        log_a = self.log_ratio(
                            kind, self.log_density(Lnew, evy.energy, evy.log_factor), lp[s], logq_move
                        )
                        a = acceptance_probability(log_a)
                        w = probs / slots
                        P[o + s].index_add_(0, offset[Lnew] + index(ys), w * a)
                        P[o + s, o + s] += float((w * (1 - a)).sum())
        return M
