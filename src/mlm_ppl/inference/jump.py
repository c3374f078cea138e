"""Trans-dimensional MH over the lengths of a variable gap: insert and delete moves on the energy itself.

The target is ``p(L, x) ∝ pi(L) exp(-E(x)/T)`` over every loop of a
:class:`~mlm_ppl.models.gaps.GapTemplate` with length ``L`` in the prior's lengths (``x`` the
whole sequence of the length-``L`` template), so that the model's own energy decides the lengths,
up to the prior ``pi`` (:class:`~mlm_ppl.models.gaps.LengthPrior`; its lengths contiguous: a
chain's one-residue moves go one length at a time). With constraints (bound to each length by the
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
  ``A = pi(L-1) p~(z) q(x_j | x_{-j}) p_insert / (pi(L) p~(x) p_delete)``;
* **insert run** (``p_insert_run``; default 0, off): ``k`` drawn uniformly from ``2..max_run``,
  refused where ``L + k`` has prior weight 0; a slot ``j`` of the gap's ``L + 1`` and an order ``s``
  of the ``k`` new positions, each uniformly; ``y`` is ``x`` with ``k`` new positions at gap
  positions ``j .. j+k-1``, unmasked one at a time along ``s`` (each read with the later ones still
  masked, the earlier draws in place): ``q_s(t | y)``, the product of the ``k`` conditionals.
  Accepted with probability ``min(1, A)``,

      A = pi(L+k) p~(y) / (pi(L) p~(x))  x  [p_delete_run w(k) / ((L+1) k!)]
                                            / ([p_insert_run w(k) / ((L+1) k!)] q_s(t | y))

  (``w(k)``, the slots and the orders cancel: a length-``L+k`` gap has ``L + 1`` runs of ``k``);
* **delete run** (``p_delete_run``; default 0): ``k`` as above, refused where ``L - k`` has prior
  weight 0; a start ``j`` of the ``L - k + 1`` runs and an order ``s``, uniformly; ``z`` is ``x``
  without gap positions ``j .. j+k-1``, accepted with the reciprocal of the insert-run ratio from
  ``z`` back to ``x``: ``A = pi(L-k) p~(z) q_s(x_run | x) p_insert_run / (pi(L) p~(x) p_delete_run)``,
  ``q_s(x_run | x)`` read along ``s`` with ``x``'s own tokens in place of the draws.

A run crosses a light length between two heavy ones in one step, which the one-residue moves
cross only by stopping on it (:mod:`.jump_runs` has the run moves' code and exact matrices).
A refused move type (insert at ``hi``, delete at ``lo``, a run past a bound) leaves the state where
it is, so the move probabilities do not depend on ``L`` and the ratios above hold everywhere.
Each insert path ``(x, j, t)`` (a run's ``(x, k, j, s, t)``) and the delete path ``(y, j)``
(``(y, k, j, s)``) that undoes it are in one-to-one correspondence, so the ratios (per path) give
detailed balance of the whole kernel, also where two slots give the same ``y``. The conditional
``q`` of both directions is computed the same way (masked copies of ``y`` at the new positions),
and :meth:`GapJump.step` and the exact matrix share the proposal code and the ratio
(:meth:`GapJump.log_ratio`).

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
from .jump_runs import RUN_MOVES, delete_run, insert_masks, run_matrices, run_sizes, unmask_run
from .mh import MetropolisHastings, MHState
from .spec import Capabilities, KernelBase, Options, option
from .streams import ChainStreams

__all__ = ["GapJump", "GapJumpOptions", "GapJumpState", "GapJumpInfo", "JumpState", "MOVES"]

MOVES = ("update", "insert", "delete") + RUN_MOVES
"""The moves, in the order of their codes in a run's ``move`` statistic (0 .. 4; the run moves,
added later, after the first three)."""

MOVE_OPTIONS = ("p_update", "p_insert", "p_delete", "p_insert_run", "p_delete_run", "max_run")
"""The fields of :func:`move_options`, in its order."""

RUN_RECORDS = {"p_insert_run": 0.0, "p_delete_run": 0.0, "max_run": 2}
"""What runs recorded before the run moves did (none): their kernels' ``older_records``."""


def move_options() -> tuple[Any, ...]:
    """The fields :data:`MOVE_OPTIONS` of an Options class whose kernel makes gap-jump's moves.

    Such a kernel is gap-jump itself, or surrogate-MH's inner chain on a variable gap.

    Returns
    -------
    tuple of dataclasses.Field
        The six fields made with :func:`~mlm_ppl.inference.option`, in the order of
        :data:`MOVE_OPTIONS`.
    """
    return (
        option(0.5, "probability of an update move (MH at the current length)", check=check_probability),
        option(0.25, "probability of an insert move (a gap position added)", check=check_probability),
        option(0.25, "probability of a delete move (a gap position removed)", check=check_probability),
        option(0.0, "probability of an insert-run move (a run of 2..max_run gap positions added)", check=check_share),
        option(0.0, "probability of a delete-run move (a run of 2..max_run gap positions removed)", check=check_share),
        option(2, "longest run a run move adds or removes (runs of 2..max_run, uniformly)", check=count_at_least(2)),
    )


def check_moves(options: Any) -> None:
    """Check that the move probabilities of ``options`` sum to 1 and that the run moves are consistent.

    The run moves must be both on or both off, and ``max_run`` given only with them.

    Parameters
    ----------
    options : object
        Options with the fields of :data:`MOVE_OPTIONS`.

    Raises
    ------
    ValueError
        When one of these fails (the message names the options).
    """
    probs = tuple(getattr(options, name) for name in MOVE_OPTIONS[:5])
    if not math.isclose(sum(probs), 1.0):
        raise ValueError(f"the move probabilities {', '.join(MOVE_OPTIONS[:5])} {probs} must sum to 1")
    runs = options.p_insert_run, options.p_delete_run
    if (runs[0] > 0) != (runs[1] > 0):
        raise ValueError(
            f"p_insert_run and p_delete_run {runs} must be both 0 or both > 0: each run move is the other's "
            "reverse, and a move whose reverse is never proposed is always refused"
        )
    if options.max_run != 2 and runs[0] == 0:
        raise ValueError(f"max_run={options.max_run} does nothing without p_insert_run and p_delete_run > 0")


def move_settings(options: Any) -> dict[str, Any]:
    """The :data:`MOVE_OPTIONS` of ``options``, as keyword arguments of :class:`GapJump`.

    Parameters
    ----------
    options : object
        Options with the fields of :data:`MOVE_OPTIONS`.

    Returns
    -------
    dict of str to object
        Each of those options' value by name.
    """
    return {name: getattr(options, name) for name in MOVE_OPTIONS}


_UPDATE, _INSERT, _DELETE, _INSERT_RUN, _DELETE_RUN, _MAX_RUN = move_options()


@dataclass(frozen=True)
class GapJumpOptions(Options):
    """Options of :class:`GapJump`: the move probabilities, the run moves and the update's unmask proposal.

    Parameters
    ----------
    p_update : float, optional
        Probability of an update move (MH at the current length), in (0, 1] (default 0.5).
    p_insert : float, optional
        Probability of an insert move (a gap position added), in (0, 1] (default 0.25).
    p_delete : float, optional
        Probability of a delete move (a gap position removed), in (0, 1] (default 0.25).
    p_insert_run : float, optional
        Probability of an insert-run move (a run of ``2..max_run`` gap positions added), in [0, 1]
        (default 0: off).
    p_delete_run : float, optional
        Probability of a delete-run move (a run of ``2..max_run`` gap positions removed), in [0, 1]
        (default 0: off); 0 exactly when ``p_insert_run`` is.
    max_run : int, optional
        Longest run a run move adds or removes (runs of ``2..max_run``, uniformly; default 2);
        another value only with the run moves on.
    p_unmask : float, optional
        Probability that an update move proposes a run of ``unmask_size`` free positions by
        unmasking them one by one (default 0).
    unmask_size : int or None, optional
        Free positions an update's unmask proposal redraws (default None: all).

    Raises
    ------
    TypeError
        When an option has the wrong type.
    ValueError
        When an option is out of range, the five move probabilities do not sum to 1, only one of
        the run moves is on, or ``max_run`` is given without them.

    Examples
    --------
    >>> from mlm_ppl.inference import GapJumpOptions
    >>> GapJumpOptions(p_update=0.6, p_insert=0.2, p_delete=0.2).given()
    {'p_update': 0.6, 'p_insert': 0.2, 'p_delete': 0.2}
    >>> GapJumpOptions(p_update=0.6)
    Traceback (most recent call last):
    ...
    ValueError: the move probabilities p_update, p_insert, p_delete, ... must sum to 1
    """

    p_update: float = _UPDATE
    p_insert: float = _INSERT
    p_delete: float = _DELETE
    p_insert_run: float = _INSERT_RUN
    p_delete_run: float = _DELETE_RUN
    max_run: int = _MAX_RUN
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
    """State of C gap-jump chains, as padded states of the :class:`~mlm_ppl.models.gap_target.GapTarget`.

    The energy, log-factor and conditionals are what
    :meth:`GapTarget.evaluate <mlm_ppl.models.gap_target.GapTarget.evaluate>` gives of the
    tokens: the log-factor is ``log pi(L)`` plus the length's own (0 without constraints).

    Parameters
    ----------
    tokens : torch.Tensor
        The states, long, padded to the longest template, shape ``(C, T)``.
    energy : torch.Tensor
        Each state's energy at its own length, shape ``(C,)``.
    log_factor : torch.Tensor
        Each state's log-factor, ``log pi(L)`` plus the length's own, shape ``(C,)``.
    cond_logits : torch.Tensor
        The conditionals of the free sites each chain has (zeros elsewhere), shape ``(C, F, V)``.
    """

    tokens: Tensor  # (C, T) long, padded
    energy: Tensor  # (C,)
    log_factor: Tensor  # (C,) log pi(L)
    cond_logits: Tensor  # (C, F, V) conditionals of the free sites each chain has (zeros elsewhere)


class GapJumpInfo(NamedTuple):
    """Per-step statistics of C gap-jump chains.

    Parameters
    ----------
    lp : torch.Tensor
        ``log pi(L) - E/T`` (and the length's log-factor) after the step, shape ``(C,)``.
    is_accepted : torch.Tensor
        Whether the move made was accepted, bool, shape ``(C,)``.
    acceptance_rate : torch.Tensor
        ``min(1, exp(log ratio))`` of the move made (0 for a move refused at a bound), shape ``(C,)``.
    n_changed : torch.Tensor
        Positions the step changed (an accepted jump: the residues it added or removed), shape ``(C,)``.
    length : torch.Tensor
        Gap length after the step, shape ``(C,)``.
    move : torch.Tensor
        The move made: 0 update, 1 insert, 2 delete, 3 insert_run, 4 delete_run (the index in
        ``MOVES``), shape ``(C,)``.
    """

    lp: Tensor  # (C,) log pi(L) - E/T after the step
    is_accepted: Tensor  # (C,) bool
    acceptance_rate: Tensor  # (C,) min(1, exp(log ratio)) of the move made (0 for a move refused at a bound)
    n_changed: Tensor  # (C,) positions the step changed (an accepted jump: the residues it added or removed)
    length: Tensor  # (C,) gap length after the step
    move: Tensor  # (C,) 0 update, 1 insert, 2 delete, 3 insert_run, 4 delete_run (MOVES)


class JumpState(NamedTuple):
    """One chain: its gap length and the MH state of its length-``L`` target.

    Parameters
    ----------
    length : int
        The gap length ``L``.
    mh : MHState
        The chain's state on the length-``L`` target (tokens of shape ``(1, T_L)``).
    """

    length: int
    mh: MHState


class GapJump(KernelBase[GapJumpOptions]):
    """Trans-dimensional MH on ``pi(L) exp(-E/T)`` over the lengths of a variable gap (``gap-jump``).

    ``GapJump(GapTarget(mlm, template, prior), p_update=..., p_insert=..., p_delete=...)``: the
    move probabilities each in (0, 1), summing to 1 (default 1/2, 1/4, 1/4), with ``p_insert_run``
    and ``p_delete_run`` (default 0: off) runs of ``2..max_run`` positions. The update move is
    MH with random scan on the current length's target: single sites, and with probability
    ``p_unmask`` a run of ``unmask_size`` free positions unmasked one by one
    (:class:`~mlm_ppl.MetropolisHastings`). It is reversible for its target (every move
    is an MH step, chosen independently of the state), so surrogate-MH may run it as its inner chain.
    The moves and their Hastings ratios are in the module docstring of ``mlm_ppl.inference.jump``.

    Parameters
    ----------
    target : GapTarget
        The variable gap (:class:`~mlm_ppl.models.gap_target.GapTarget`); a fixed template is refused.
    **options
        The options of :class:`GapJumpOptions`: ``p_update``, ``p_insert``, ``p_delete``,
        ``p_insert_run``, ``p_delete_run``, ``max_run``, ``p_unmask`` and ``unmask_size``.

    Raises
    ------
    TypeError
        When an option is unknown or has the wrong type.
    ValueError
        When the target is not a variable gap; when an option is out of range or the move
        probabilities are inconsistent (see :class:`GapJumpOptions`); when the run moves are on
        and no run of 2 fits between the prior's shortest and longest lengths; or when the
        update's options do not fit the gap's shortest length.

    Examples
    --------
    >>> from mlm_ppl.inference import ChainStreams, GapJump, initial_tokens
    >>> from mlm_ppl.models.gap_target import GapTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> kernel = GapJump(GapTarget(tiny_residue_bert("ACDE", seed=1), "A[MASK]{1,3}C"))
    >>> streams = ChainStreams(0, 2)
    >>> state = kernel.init(initial_tokens(kernel, 2, streams, "uniform"))
    >>> state, info = kernel.step(state, streams)
    >>> state.tokens.shape, info.length.shape
    (torch.Size([2, 7]), torch.Size([2]))
    >>> all(1 <= int(length) <= 3 for length in info.length)
    True
    """

    name = "gap-jump"
    Options = GapJumpOptions
    State = GapJumpState
    Info = GapJumpInfo
    capabilities = Capabilities(
        log_factor=False, gibbs=False, complete_start=True, exact_matrix=False, lengths=True, batched=False, fixed=False
    )
    older_records = {"p_unmask": 0.0, "unmask_size": None, **RUN_RECORDS}  # unmask 0.4, runs 0.5
    target: GapTarget

    def bind_target(self, target: Any) -> None:
        """Take the move probabilities from the options and check them against the gap's lengths.

        Parameters
        ----------
        target : GapTarget
            The kernel's target.

        Raises
        ------
        ValueError
            When the run moves are on and no run of 2 fits between the prior's shortest and longest
            lengths, or when the update's options do not fit the gap's shortest length.
        """
        o = self.options
        self.p_update, self.p_insert, self.p_delete = o.p_update, o.p_insert, o.p_delete
        self.p_insert_run, self.p_delete_run, self.run_sizes = o.p_insert_run, o.p_delete_run, run_sizes(o.max_run)
        lengths = target.lengths
        if self.p_insert_run > 0 and lengths[-1] - lengths[0] < 2:
            raise ValueError(
                f"no run of 2..{o.max_run} residues fits between the prior's lengths {lengths[0]}..{lengths[-1]}: "
                "every run move would be refused; leave p_insert_run and p_delete_run at 0"
            )
        self._kernels: dict[int, MetropolisHastings] = {}
        try:  # the update's options checked against the fewest free positions
            self.kernel(target.shortest)
        except ValueError as err:
            raise ValueError(f"at the gap's shortest length, {target.shortest}: {err}") from None

    def kernel(self, length: int) -> MetropolisHastings:
        """The update move's kernel at ``length``: MH with random scan, single sites.

        With ``p_unmask``, it also makes unmask proposals. It proposes at temperature 1 as the
        insert moves do (gap-jump has no proposal temperature to record, so it keeps the one its
        runs always had). Made once per length.

        Parameters
        ----------
        length : int
            A gap length.

        Returns
        -------
        MetropolisHastings
            The MH kernel on the length-``length`` target.
        """
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
        """At most how much work one step does for one chain, in full evaluations of the target.

        Returns
        -------
        float
            One evaluation, plus a jump's masked copies for ``q`` (:meth:`jump_reads`) and an
            update's unmask reads (at the longest length, in evaluations of it).
        """
        longest = self.target.target(self.target.longest)
        copies = getattr(longest, "scored_positions", longest.free_positions).numel()
        reads = self.p_update * self.kernel(self.target.longest).proposal_cost()
        return 1.0 + self.jump_reads() + reads / copies

    def jump_reads(self) -> float:
        """Masked copies a step's jump reads for its ``q``, on average.

        Returns
        -------
        float
            One per insert or delete, ``k`` per run of ``k``, weighed by the moves' probabilities
            (the run length's mean over ``2..max_run``).
        """
        mean_k = sum(self.run_sizes) / len(self.run_sizes)
        return self.p_insert + self.p_delete + (self.p_insert_run + self.p_delete_run) * mean_k

    def log_density(self, length: int, energy: Tensor, log_factor: Tensor) -> Tensor:
        """The log density ``log pi(L) - E/T + log_factor`` of states of gap length ``length``.

        Parameters
        ----------
        length : int
            The gap length ``L``.
        energy : torch.Tensor
            The states' energies, shape ``(N,)``.
        log_factor : torch.Tensor
            The length's own log-factor of each state (0 without constraints), shape ``(N,)``.

        Returns
        -------
        torch.Tensor
            The log densities, float64, shape ``(N,)``.
        """
        return self.target.log_prior(length) + log_density(energy, log_factor, self.target.temperature).double()

    def gap_position(self, length: int, j: int) -> int:
        """The token index of gap position ``j`` (0-based) of the length-``length`` template.

        Parameters
        ----------
        length : int
            The gap length.
        j : int
            A gap position, ``0 .. length - 1``.

        Returns
        -------
        int
            Its index in the length-``length`` template's tokens.
        """
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
        """The log Hastings ratio of a jump, from the log densities of the new and the old state.

        The one formula :meth:`step_chain` and :meth:`move_matrices` use. Where a state has
        density 0 (it breaks a hard rule), as every kernel reads it
        (``mh_log_ratio``): a move out of density 0 is accepted, a
        move into it refused.

        Parameters
        ----------
        kind : {"insert", "delete", "insert_run", "delete_run"}
            The move.
        lp_new : torch.Tensor
            Log density (:meth:`log_density`) of each new state, shape ``(N,)``.
        lp_old : torch.Tensor or float
            Log density of the old state(s), broadcast to ``lp_new``.
        logq : torch.Tensor
            For an insert, ``log q(t | y_{-j})`` of the new token; for a delete,
            ``log q(x_j | x_{-j})`` of the removed one; for an insert run or a delete run,
            ``log q_s`` of the run's tokens along its order.

        Returns
        -------
        torch.Tensor
            The log ratios, float64, shape of ``lp_new``.
        """
        p = dict(zip(MOVES[1:], (self.p_insert, self.p_delete, self.p_insert_run, self.p_delete_run)))
        reverse = {"insert": "delete", "delete": "insert", "insert_run": "delete_run", "delete_run": "insert_run"}
        sign = -1.0 if kind in ("insert", "insert_run") else 1.0  # q is the forward move's, or the reverse's
        correction = math.log(p[reverse[kind]]) - math.log(p[kind]) + sign * logq
        lp_old = torch.as_tensor(lp_old, dtype=torch.float64).expand_as(lp_new)
        return mh_log_ratio(lp_new, lp_old, correction, torch.ones_like(lp_new, dtype=torch.bool))

    # -------------------------------------------------------------- one chain
    def init_chain(self, length: int, tokens: Tensor) -> JumpState:
        """A chain at gap length ``length`` with complete ``tokens``.

        Parameters
        ----------
        length : int
            The gap length.
        tokens : torch.Tensor
            A complete state of the length-``length`` template, shape ``(1, T_L)``.

        Returns
        -------
        JumpState
            The chain's state.

        Raises
        ------
        ValueError
            When the prior gives ``length`` weight 0.
        """
        if self.target.log_prior(length) == float("-inf"):
            raise ValueError(f"length {length} has prior weight 0")
        return JumpState(length, self.kernel(length).init(tokens))

    def lp(self, state: JumpState) -> float:
        """The log density (:meth:`log_density`) of one chain's state.

        Parameters
        ----------
        state : JumpState
            One chain.

        Returns
        -------
        float
            ``log pi(L) - E/T + log_factor`` of its state.
        """
        return float(self.log_density(state.length, state.mh.energy, state.mh.log_factor)[0])

    def step_chain(self, state: JumpState, streams: ChainStreams) -> tuple[JumpState, str, bool, float]:
        """One step of one chain: a move chosen by its probability, then proposed and accepted or not.

        Parameters
        ----------
        state : JumpState
            The chain's state.
        streams : ChainStreams
            The chain's stream (streams of one chain).

        Returns
        -------
        state : JumpState
            The new state (``state`` itself where the move was refused or rejected).
        move : str
            The move chosen, one of ``MOVES``: ``"update"``, ``"insert"``, ``"delete"``,
            ``"insert_run"`` or ``"delete_run"``.
        accepted : bool
            Whether it was accepted.
        acceptance_probability : float
            Its ``min(1, exp(log ratio))`` (0 for a move refused at a bound).
        """
        L, x = state.length, state.mh.tokens
        u = float(streams.rand((1,))[0])
        if u < self.p_update:
            new, info = self.kernel(L).step(state.mh, streams)
            return JumpState(L, new), "update", bool(info.is_accepted[0]), float(info.acceptance_rate[0])
        if u >= 1.0 - self.p_insert_run - self.p_delete_run:  # the run moves, last (never at their default 0)
            return self._run_move(state, "insert_run" if u < 1.0 - self.p_delete_run else "delete_run", streams)
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

    def _run_move(self, state: JumpState, kind: str, streams: ChainStreams) -> tuple[JumpState, str, bool, float]:
        """An insert run or a delete run (:mod:`.jump_runs`): ``k``, then a slot (a start), then an order."""
        L, x = state.length, state.mh.tokens
        k = self.run_sizes[int(streams.randint(len(self.run_sizes))[0])]
        Lnew = L + k if kind == "insert_run" else L - k
        if self.target.log_prior(Lnew) == float("-inf"):  # past a bound of the prior's lengths
            return state, kind, False, 0.0
        j = int(streams.randint(min(L, Lnew) + 1)[0])  # L + 1 slots; L - k + 1 starts of a run of k
        order = streams.rand((1, k))[0].argsort()
        if kind == "insert_run":
            y, logq = unmask_run(self.target, insert_masks(self.target, x, L, j, k), Lnew, j, order, streams)
        else:
            y, logq = delete_run(self.target, x, L, j, k), unmask_run(self.target, x, L, j, order)[1]
        new = self.kernel(Lnew).init(y)
        log_a = self.log_ratio(kind, self.log_density(Lnew, new.energy, new.log_factor)[0], self.lp(state), logq[0])
        accept = bool(torch.log(streams.rand((1,))[0].double()) < log_a)
        return (JumpState(Lnew, new) if accept else state), kind, accept, float(acceptance_probability(log_a))

    # -------------------------------------------------------------- C chains (the kernel contract)
    def init(self, tokens: Tensor) -> GapJumpState:
        """The state of chains starting at padded ``tokens``, each at its own length.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete states padded to the longest template, shape ``(C, T)`` (see
            :class:`~mlm_ppl.models.gap_target.GapTarget`).

        Returns
        -------
        GapJumpState
            The chains' state.

        Raises
        ------
        ValueError
            When ``tokens`` are not padded states of the target.
        """
        self.target.validate_tokens(tokens)
        ev = self.target.evaluate(tokens)
        return GapJumpState(tokens.cpu(), ev.energy, ev.log_factor, ev.cond_logits)

    def chain(self, state: GapJumpState, c: int) -> JumpState:
        """Chain ``c`` of ``state`` as one chain's :class:`JumpState` (nothing recomputed).

        Parameters
        ----------
        state : GapJumpState
            The chains' state.
        c : int
            A chain's row.

        Returns
        -------
        JumpState
            That chain at its own length.
        """
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
        """One step of every chain, one chain at a time, chain ``c`` from its own stream.

        Parameters
        ----------
        state : GapJumpState
            The chains' state.
        streams : ChainStreams
            One random stream per chain.

        Returns
        -------
        state : GapJumpState
            The new state.
        info : GapJumpInfo
            The step's statistics.
        """
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
            changed[c] = int((tokens[c] != state.tokens[c]).sum()) if kind == "update" else abs(L - old.length) * ok
        return GapJumpState(tokens, energy, factor, cond), GapJumpInfo(lp, accepted, rate, changed, length, move)

    # -------------------------------------------------------------- exact, for tiny models
    def states(self) -> list[tuple[int, Tensor]]:
        """Every state of every length the prior weighs, for the exact matrices.

        Returns
        -------
        list of tuple of (int, torch.Tensor)
            Each state as ``(L, tokens)``, tokens of shape ``(T_L,)``, in order of length, then as
            :func:`~mlm_ppl.inference.exact.enumerate_states` orders each length's.
        """
        return [(L, s) for L in self.target.lengths for s in enumerate_states(self.target.target(L))]

    def exact_log_probs(self) -> Tensor:
        """The normalised log probabilities ``log p(L, x)`` of the target over :meth:`states`.

        Returns
        -------
        torch.Tensor
            Shape ``(S,)``, float64.
        """
        parts = []
        for L in self.target.lengths:
            target = self.target.target(L)
            ev = target.evaluate(enumerate_states(target))
            parts.append(self.log_density(L, ev.energy, ev.log_factor))
        return torch.log_softmax(torch.cat(parts), 0)

    def exact_matrix(self) -> Tensor:
        """The exact transition matrix of one :meth:`step_chain` over :meth:`states`, for tiny models.

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)``, float64: the sum of each move's probability times its matrix
            (:meth:`move_matrices`).
        """
        p = dict(zip(MOVES, (self.p_update, self.p_insert, self.p_delete, self.p_insert_run, self.p_delete_run)))
        return sum((p[move] * M for move, M in self.move_matrices().items()), torch.zeros(()))

    def move_matrices(self) -> dict[str, Tensor]:
        """Each move's exact matrix over :meth:`states`, given that move is chosen, for tiny models.

        The update's comes from each length's MH kernel
        (:func:`~mlm_ppl.inference.exact.transition_matrix`); insert's and delete's are built from
        the moves' own proposal and density code; with the run moves on (``p_insert_run > 0``),
        theirs too (``run_matrices``, ``mlm_ppl.inference.jump_runs``).

        Returns
        -------
        dict of str to torch.Tensor
            Each move's matrix, shape ``(S, S)``, float64, by its name in ``MOVES`` (the run
            moves only when on).
        """
        lengths = self.target.lengths
        offset, n = {}, 0
        for L in lengths:
            offset[L] = n
            n += enumerate_states(self.target.target(L)).shape[0]
        M = {move: torch.zeros((n, n), dtype=torch.float64) for move in MOVES[:3]}
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
        return {**M, **run_matrices(self, offset, n)} if self.p_insert_run > 0 else M
