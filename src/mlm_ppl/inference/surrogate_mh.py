"""Surrogate-transition Metropolis-Hastings: a cheap inner chain, one exact correction per move.

**The argument** (the surrogate transition method, Liu 2001, *Monte Carlo Strategies in
Scientific Computing*, section 9.4; delayed acceptance, Christen & Fox 2005). Let
``p(x) ∝ exp(-E(x)/T + log_factor(x))`` be the target and ``p~(x) ∝ exp(-E~(x)/T + log_factor(x))``
any surrogate with the same support. Let ``Q`` be a Markov kernel that is *reversible* for
``p~``: ``p~(x) Q(x, y) = p~(y) Q(y, x)``. Propose ``y ~ Q(x, .)`` and accept with

    log a = [log p(y) - log p(x)] - [log p~(y) - log p~(x)].

The MH ratio of the proposal ``Q`` for the target is ``p(y) Q(y, x) / (p(x) Q(x, y))``, and
reversibility gives ``Q(y, x) / Q(x, y) = p~(x) / p~(y)``: exactly the ratio above. So the
chain leaves ``p`` invariant whatever the surrogate; a good surrogate only makes ``a`` close to 1.

**Here**: ``E~`` is the target's own energy restricted to the scored positions within
``surrogate_window`` of a free position (window 0: the free positions' own terms), optionally
with the model in ``surrogate_dtype`` and its copies cropped to the tokens within
``surrogate_context`` of a free position (read at their own position ids; with
``surrogate_frame="frozen"`` beside the rest of a fixed reference sequence, frozen); ``Q`` is
``inner_steps`` steps of :class:`~mlm_ppl.inference.MetropolisHastings` on ``p~`` with random
scan: single sites or ``block_size`` blocks, and with probability ``p_unmask`` unmask
proposals (a run of free positions redrawn one at a time in a random order), every proposal
read from the surrogate's own copies. Each MH step with a given block, or a given run and
order, is reversible for ``p~`` (detailed balance); a random-scan step chooses among them
independently of the state, so it is a fixed mixture of reversible kernels and reversible; and
a power of a reversible kernel is reversible. Each inner proposal costs one pass over the
window's masked copies (13 for the 13 free positions of a CDR-H3) instead of the whole
sequence's (120), plus what its proposal reads (an unmask proposal of ``b`` positions: ``2b - 1``
surrogate copies), and the move is corrected with one evaluation of the full energy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._checks import check_interval, count_at_least
from ..models.gap_target import GapTarget
from ..models.surrogate import SurrogateTarget
from ..models.target import Target
from .anneal_floor import chain_taus, start_thermostat, thermostat
from .annealing import GeometricAnnealing
from .base import (
    accept,
    acceptance_probability,
    annealed_log_density,
    cat_states,
    check_states,
    choose_rows,
    fill_template,
    mh_log_ratio,
    scheduled_log_density,
    state_rows,
)
from .jump import MOVE_OPTIONS, RUN_RECORDS, GapJump, check_moves, move_options, move_settings
from .mh import LIBRARY_RECORDS, MetropolisHastings, MHState
from .spec import Capabilities, KernelBase, option
from .streams import ChainStreams
from .surrogate_exact import SurrogateMatrices
from .tempering import ReplicaMH, ReplicaState, TemperingOptions

__all__ = [
    "SurrogateOptions",
    "SurrogateMH",
    "SurrogateState",
    "SurrogateInfo",
    "SurrogateTarget",
    "SURROGATE_DTYPES",
    "SURROGATE_FRAMES",
]

SURROGATE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Dtypes the surrogate's model may run in (``surrogate_dtype``); None: the target model's own."""

SURROGATE_FRAMES = ("crop", "frozen")
"""What the surrogate's copies see outside ``surrogate_context`` (``surrogate_frame``)."""


_UPDATE, _INSERT, _DELETE, _INSERT_RUN, _DELETE_RUN, _MAX_RUN = move_options()  # the inner chain's, on a gap


@dataclass(frozen=True)
class SurrogateOptions(TemperingOptions):
    """Options of :class:`SurrogateMH`, each checked when they are made.

    :class:`SurrogateMH` says what each does in full, and checks them against its target.

    Parameters
    ----------
    block_size : int, optional
        Free positions an inner proposal redraws together (default 1).
    proposal_temperature : float, optional
        Temperature of the inner MLM proposals (default None: the target's temperature where above
        1, else 1).
    top_k : int, optional
        Truncate the inner proposals to the ``k`` most likely tokens (default None: no truncation).
    top_p : float, optional
        Nucleus truncation of the inner proposals, in ``(0, 1]`` (default None: none).
    p_unmask : float, optional
        Probability in ``[0, 1]`` that an inner step proposes a run of ``unmask_size`` free positions
        by unmasking them one by one in a random order (default 0).
    unmask_size : int, optional
        Free positions an unmask proposal redraws, a run of neighbours (default None: all).
    library : str, optional
        Deep states an unmask proposal may propose: loops of the free positions separated by
        commas (default None).
    library_weight : float, optional
        Share of unmask proposals that put a library loop, drawn uniformly, on their run
        (default 0.5).
    temperature_schedule : callable, optional
        ``outer step -> tau``, the annealing temperature (mode seeking; Python only; default None).
    anneal_terms : str, optional
        What the schedule anneals: ``"all"`` (the default), ``"mlm"`` or ``"constraints"``.
    replicas : int, optional
        Replicas of the inner chain at temperatures ``T * replica_spacing**k``,
        ``k = 0 .. replicas - 1``, exchanging states (default 1: none).
    replica_spacing : float, optional
        Ratio of neighbouring replicas' temperatures (default 1.5; needs ``replicas``).
    p_swap : float, optional
        Probability that an inner step proposes to exchange the states of a random pair of
        neighbouring replicas (default 0.2; needs ``replicas``).
    inner_steps : int, optional
        Surrogate steps per exact correction (default None: 4 x the free positions).
    surrogate_window : int, optional
        The surrogate scores the positions within this many columns of a free position
        (default 0).
    surrogate_dtype : str, optional
        The surrogate model's dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``
        (``SURROGATE_DTYPES``; default None: the target model's own).
    surrogate_context : int, optional
        The surrogate's copies run only the tokens within this many columns of a free position,
        at least ``surrogate_window`` (default None: all; with ``surrogate_frame="frozen"``, the
        window).
    surrogate_frame : str, optional
        What those copies see of the other tokens: nothing (``"crop"``, the default), or a fixed
        reference's, frozen (``"frozen"``).
    anneal_floor : float, optional
        Annealing stops cooling at this ``tau`` (default None: each chain where its outer
        acceptance falls below 0.2, except with ``anneal_terms="constraints"`` or a warming
        schedule, which run the whole schedule; 0: the whole schedule).
    p_update, p_insert, p_delete : float, optional
        On a variable gap, the probabilities of the inner gap-jump chain's update, insert and
        delete moves (defaults 0.5, 0.25, 0.25).
    p_insert_run, p_delete_run : float, optional
        On a variable gap, the probabilities of its moves adding or removing a run of
        ``2 .. max_run`` gap positions (default 0; both 0 or both > 0).
    max_run : int, optional
        The longest run a run move adds or removes (default 2).

    Raises
    ------
    TypeError
        Where an option has the wrong type.
    ValueError
        Where an option is out of range or not one of its choices, ``surrogate_context`` is below
        ``surrogate_window``, the move probabilities do not sum to 1, one run move is on without
        the other, ``max_run`` is given without them, or the replicas' options do not fit together
        (``replica_spacing`` or ``p_swap`` without replicas, the hottest replica too hot, replicas
        with an annealing schedule).
    """

    inner_steps: int | None = option(
        None, "surrogate steps per exact correction (default 4 x free positions)", check=count_at_least(1)
    )
    surrogate_window: int = option(
        0, "the surrogate scores the positions within this many columns of a free position", check=count_at_least(0)
    )
    surrogate_dtype: str | None = option(
        None, "the surrogate's dtype (float32, bfloat16, float16)", choices=tuple(SURROGATE_DTYPES)
    )
    surrogate_context: int | None = option(
        None,
        "the surrogate's copies run only the tokens within this many columns of a free position "
        "(default: all; with --surrogate-frame frozen, the window)",
        check=count_at_least(0),
    )
    surrogate_frame: str = option(
        "crop",
        "what those copies see of the other tokens: nothing (crop), or a fixed reference's, frozen (frozen)",
        choices=SURROGATE_FRAMES,
    )
    anneal_floor: float | None = option(
        None,
        "annealing stops cooling at this tau (default: each chain where its outer acceptance falls below 0.2; "
        "0: the whole schedule)",
        check=check_interval,
    )
    p_update: float = _UPDATE
    p_insert: float = _INSERT
    p_delete: float = _DELETE
    p_insert_run: float = _INSERT_RUN
    p_delete_run: float = _DELETE_RUN
    max_run: int = _MAX_RUN

    def __post_init__(self) -> None:
        super().__post_init__()
        check_moves(self)
        if self.surrogate_context is not None and self.surrogate_context < self.surrogate_window:
            raise ValueError(
                f"surrogate_context ({self.surrogate_context}) must be at least surrogate_window "
                f"({self.surrogate_window}): the surrogate scores the positions within the window and reads them "
                "from the cropped context; widen the context or narrow the window"
            )


class SurrogateState(NamedTuple):
    """State of C surrogate-MH chains: the target's energy of the current tokens, and the inner chain's state there.

    The inner chain's state holds the surrogate energy and the conditionals the next proposals use.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, L)`` long token ids, the chains' current states.
    energy : torch.Tensor
        Shape ``(C,)``: the target's energy ``E(x)`` of each.
    log_factor : torch.Tensor
        Shape ``(C,)``: the extra log terms of each.
    inner : MHState or ReplicaState
        The surrogate chain at ``tokens`` (a ``GapJumpState`` on a variable gap).
    step : int
        Outer steps taken.
    hold : torch.Tensor or None, optional
        Annealed: shape ``(C,)``, the ``tau`` each chain stopped cooling at (0: none yet); None
        without the annealing thermostat.
    recent : torch.Tensor or None, optional
        Annealed: shape ``(C,)``, each chain's moving average of outer acceptance; None without
        the thermostat.
    """

    tokens: Tensor  # (C, L) long
    energy: Tensor  # (C,) E(x), the target's
    log_factor: Tensor  # (C,)
    inner: MHState | ReplicaState  # the surrogate chain at tokens (a GapJumpState on a variable gap)
    step: int
    hold: Tensor | None = None  # (C,) annealed: the tau each chain stopped cooling at (0: none yet)
    recent: Tensor | None = None  # (C,) annealed: its moving average of outer acceptance


class SurrogateInfo(NamedTuple):
    """Per-step statistics of C chains.

    Parameters
    ----------
    lp : torch.Tensor
        Shape ``(C,)``: the log target density after the step.
    is_accepted : torch.Tensor
        Shape ``(C,)`` bool, the outer (exact) acceptance: True for a move that changed nothing
        from a state of density > 0, False for every move but one to density > 0 from a state of
        density 0.
    acceptance_rate : torch.Tensor
        Shape ``(C,)``: ``min(1, exp(log a))`` of the outer correction.
    n_changed : torch.Tensor
        Shape ``(C,)``: the positions that differ before and after the step.
    n_moves : torch.Tensor
        Shape ``(C,)``: the accepted single-site changes along an accepted move's path, else 0.
    inner_acceptance : torch.Tensor
        Shape ``(C,)``: the fraction of the inner proposals accepted (on the surrogate).
    masked_copies : torch.Tensor
        Shape ``(C,)``: the masked copies run by the step, inner proposals and the correction.
    """

    lp: Tensor  # (C,) log target density after the step
    is_accepted: Tensor  # (C,) bool, the outer (exact) acceptance; True for a move that changed nothing from a
    # state of density > 0, False for every move but one to density > 0 from a state of density 0
    acceptance_rate: Tensor  # (C,) min(1, exp(log a)) of the outer correction
    n_changed: Tensor  # (C,) positions that differ before and after the step
    n_moves: Tensor  # (C,) accepted single-site changes along an accepted move's path, else 0
    inner_acceptance: Tensor  # (C,) fraction of the inner proposals accepted (on the surrogate)
    masked_copies: Tensor  # (C,) masked copies run by the step: inner proposals and the correction


class SurrogateMH(SurrogateMatrices, KernelBase[SurrogateOptions]):
    """Surrogate-transition Metropolis-Hastings (Liu 2001, section 9.4): exact for the target.

    **Target**: ``p(x) ∝ exp(-E(x)/T + log_factor(x))`` of the target (a
    :class:`~mlm_ppl.MaskedLMDistribution`, optionally a
    :class:`~mlm_ppl.models.ConstrainedTarget` over one).

    **One step**: ``inner_steps`` random-scan MH steps on the surrogate
    ``p~(x) ∝ exp(-E~(x)/T + log_factor(x))``, with the proposals of
    :class:`~mlm_ppl.inference.MetropolisHastings` (MLM conditionals at ``proposal_temperature``,
    ``top_k``, ``top_p``; single sites, ``block_size`` blocks and, with probability
    ``p_unmask``, runs of ``unmask_size`` free positions unmasked one by one) read from the
    surrogate's copies; then the whole move ``x -> y`` is accepted with
    ``log a = [log p(y) - log p(x)] - [log p~(y) - log p~(x)]``. See the module docstring for
    why this is exact whatever the surrogate (tests check the transition matrix by enumeration).
    The surrogate has the target's log-factor, so the same states have density 0 under both; from
    one of them the inner and the outer step accept a move to a state of density > 0 and reject
    every other (``mh_log_ratio``): no ``-inf - (-inf)``.

    **On a variable gap** (a :class:`~mlm_ppl.models.gap_target.GapTarget`): the inner chain is
    gap-jump's (:class:`~mlm_ppl.inference.jump.GapJump`: update, with unmask proposals at
    ``p_unmask``, insert and delete moves at ``p_update``, ``p_insert``, ``p_delete``) on each
    length's surrogate, each calibrated once at a fixed state of its length
    (:meth:`SurrogateTarget.calibrate`); its chains step one at a time; one exact evaluation per
    outer step corrects whatever it did to the length (``gap_matrix()`` is its exact matrix).
    ``block_size``, ``proposal_temperature``, ``top_k``, ``top_p``, ``replicas``, a library and annealing
    are refused there.

    **Cost**: each inner proposal that changes the state runs the window's masked copies,
    unless it breaks a hard rule (``target.forbidden``: rejected unrun, as in MH), plus what the
    proposal reads (a block: one copy; an unmask proposal of ``b`` positions: ``2b - 1``; a jump's
    ``q``: one); each step whose inner chain moved runs the whole sequence's once (``masked_copies``
    counts them all). The inner proposals keep to the target's
    alphabets (``target.allowed``), so the whole move does.

    Parameters
    ----------
    target : WindowedTarget
        What is sampled: a :class:`~mlm_ppl.MaskedLMDistribution`, or a
        :class:`~mlm_ppl.models.ConstrainedTarget` over one (a target whose energy is a sum of
        per-position terms: :class:`~mlm_ppl.models.WindowedTarget`), of a fixed template or a
        variable gap.
    **options
        The fields of :class:`~mlm_ppl.inference.SurrogateOptions`:

        inner_steps : int, optional
            Surrogate steps per move; default ``4 * num_free`` (four sweeps' worth).
        surrogate_window : int
            ``E~`` sums the energy terms of the scored positions within this many columns of a free
            position (default 0: the free positions' own terms).
        surrogate_dtype : {"float32", "bfloat16", "float16"}, optional
            Run the surrogate's model in this dtype (a cached copy; the target keeps its own).
        surrogate_context : int, optional
            Crop the surrogate's copies to the tokens within this many columns of a free position
            (and the special tokens), each read at its own position id: shorter copies, a rougher
            surrogate (at least ``surrogate_window``; the model must take ``position_ids``).
            Default: the whole sequence (with ``surrogate_frame="frozen"``: ``surrogate_window``).
        surrogate_frame : {"crop", "frozen"}
            What the cropped copies see of the other tokens: nothing (``"crop"``), or, at every
            layer, the keys and values of a fixed reference sequence's other tokens
            (``"frozen"``; :meth:`~mlm_ppl.MaskedLMDistribution.frozen_reference`, BERT-like models):
            nearly the whole copy's conditionals at the crop's cost.
        block_size, p_unmask, unmask_size, proposal_temperature, top_k, top_p, library, library_weight
            The inner proposals, as for :class:`~mlm_ppl.inference.MetropolisHastings` (random scan).
        replicas, replica_spacing, p_swap
            Replica exchange of the inner chain at higher temperatures of the surrogate, as for
            :class:`~mlm_ppl.inference.ReplicaMH` (refused with annealing and on a variable gap).
        temperature_schedule, anneal_terms
            Annealing (mode seeking), as for MH: the inner chain runs at its outer step's ``tau``.
        anneal_floor : float, optional
            A fixed ``tau`` below which no chain cools (0: the whole schedule). Default: each chain
            stops cooling where its own outer acceptance falls below 0.2
            (``mlm_ppl.inference.anneal_floor``; not with ``anneal_terms="constraints"`` nor a
            warming schedule, which run the whole schedule); the run records where.
        p_update, p_insert, p_delete, p_insert_run, p_delete_run, max_run
            On a variable gap, the inner gap-jump chain's moves (refused on a fixed template).

    Raises
    ------
    TypeError
        Where an option is unknown or of the wrong type, or the target's energy is not a sum of
        per-position terms.
    ValueError
        Where an option is out of range or does not fit the target (:meth:`bind_target`).

    Warns
    -----
    TruncatedProposalWarning
        With ``top_k`` or ``top_p``: the inner chain's proposals are truncated.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, SurrogateMH, run_chains
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = SurrogateMH(target, inner_steps=3, surrogate_window=1)
    >>> kernel.inner  # the inner chain, on the surrogate
    MetropolisHastings()
    >>> run = run_chains(kernel, num_chains=4, num_samples=10, seed=0)
    >>> run.tokens.shape
    torch.Size([4, 10, 7])
    >>> rate, inner = run.stats["acceptance_rate"], run.stats["inner_acceptance"]
    >>> bool(((rate >= 0) & (rate <= 1) & (inner >= 0) & (inner <= 1)).all())
    True
    """

    name = "surrogate-mh"
    Options = SurrogateOptions
    State = SurrogateState
    Info = SurrogateInfo
    capabilities = Capabilities(log_factor=True, gibbs=True, complete_start=True, exact_matrix=True, lengths=True)
    older_records = {
        "surrogate_context": None,  # 0.3: the whole sequence
        "surrogate_frame": "crop",
        "block_size": 1,  # 0.4: the inner chain's moves, and gap-jump's around a variable gap
        "p_unmask": 0.0,
        "unmask_size": None,
        "p_update": 0.5,
        "p_insert": 0.25,
        "p_delete": 0.25,
        "replicas": 1,  # 0.5: replica exchange of the inner chain
        "replica_spacing": 1.5,
        "p_swap": 0.2,
        **RUN_RECORDS,  # 0.5 too: gap-jump's run moves
        **LIBRARY_RECORDS,  # 0.6: the library proposal
        "anneal_floor": 0.0,  # 0.8: an annealed run recorded before its chains stopped cooling where they stall
    }
    options: SurrogateOptions
    surrogate: Any  # SurrogateTarget, or a GapTarget of them (a variable gap)
    inner: Any  # MetropolisHastings, or GapJump (a variable gap)

    def bind_target(self, target: Target) -> None:
        """Build the surrogate and the inner chain on the target, checking the options against it.

        Called by ``__init__``. On a fixed template the inner chain is a
        :class:`~mlm_ppl.inference.MetropolisHastings` (a :class:`~mlm_ppl.inference.ReplicaMH`
        with ``replicas``) on the :class:`~mlm_ppl.models.SurrogateTarget`; on a variable gap, a
        :class:`~mlm_ppl.inference.GapJump` on each length's surrogate.

        Parameters
        ----------
        target : Target
            The kernel's target.

        Raises
        ------
        TypeError
            Where the target's energy is not a sum of per-position terms (no ``scored_positions``).
        ValueError
            Where a nonzero ``anneal_floor`` is given without a schedule; on a fixed template,
            where a gap-jump move option is given; on a variable gap, where an option its moves do
            not take is (``block_size``, ``proposal_temperature`` other than 1, ``top_k``,
            ``top_p``, ``replicas``, ``library``, ``library_weight``, a schedule); or where the
            inner chain refuses its options.
        """
        if not hasattr(target, "scored_positions"):  # a WindowedTarget (a Protocol check may not evaluate properties)
            raise TypeError(
                "SurrogateMH needs a target whose energy is a sum of per-position terms that it can restrict "
                f"(a MaskedLMDistribution, or a ConstrainedTarget over one); got {type(target).__name__}"
            )
        o = self.options
        dtype = None if o.surrogate_dtype is None else SURROGATE_DTYPES[o.surrogate_dtype]
        self.inner_steps = 4 * target.num_free if o.inner_steps is None else o.inner_steps
        if o.anneal_floor and o.temperature_schedule is None:  # (0, as older runs record it, asks nothing)
            raise ValueError(
                "anneal_floor is where an annealing schedule stops cooling: give the schedule (anneal) too"
            )
        # the annealing thermostat (a state per chain), where no fixed floor is given
        schedule = o.temperature_schedule
        warming = isinstance(schedule, GeometricAnnealing) and schedule.end >= schedule.start  # nothing to stop
        self.thermostat = schedule is not None and o.anneal_floor is None and o.anneal_terms != "constraints"
        self.thermostat = self.thermostat and not warming

        def surrogate_of(base: Target) -> SurrogateTarget:
            return SurrogateTarget(base, o.surrogate_window, dtype, o.surrogate_context, o.surrogate_frame)  # type: ignore[arg-type]

        if isinstance(target, GapTarget):
            self._bind_gap(target, surrogate_of)
            return
        if set(MOVE_OPTIONS) & set(o.given()):
            raise ValueError(
                f"{', '.join(MOVE_OPTIONS)} are the inner chain's moves over a variable gap's lengths; this "
                "template has no variable gap MASK{a,b}: leave them out"
            )
        self.surrogate = surrogate_of(target)
        moves = "block_size p_unmask unmask_size proposal_temperature top_k top_p library library_weight".split()
        proposals: dict[str, Any] = {name: getattr(o, name) for name in moves}
        if o.replicas > 1:  # replicas of the inner chain at higher temperatures of the surrogate
            exchanges = dict(replicas=o.replicas, replica_spacing=o.replica_spacing, p_swap=o.p_swap)
            self.inner = ReplicaMH(self.surrogate, **exchanges, **proposals)
            return
        self.inner_tau = 1.0  # what the inner chain runs at: its outer step's (its chain's) tau
        self.inner = MetropolisHastings(
            self.surrogate,
            scan="random",
            **proposals,
            # the inner chain runs at its outer step's tau, so the outer correction stays valid
            temperature_schedule=None if o.temperature_schedule is None else (lambda s: self.inner_tau),
            anneal_terms=o.anneal_terms,
        )

    def _bind_gap(self, target: GapTarget, surrogate_of: Callable[[Target], SurrogateTarget]) -> None:
        """On a variable gap: the surrogate of each length's target, and gap-jump's moves on them as
        the inner chain (reversible for the surrogate: each move is an MH step, chosen independently
        of the state), so one exact evaluation per outer step pays for every length change inside."""
        o = self.options
        given: list[str] = [
            name
            for name in ("block_size", "top_k", "top_p", "replicas", "library", "library_weight")
            if name in o.given()
        ]
        if o.proposal_temperature not in (None, 1.0):  # gap-jump's moves propose at 1 (records hold 1.0)
            given.insert(1, "proposal_temperature")
        if o.temperature_schedule is not None:
            given.append("annealing schedule")
        if given:
            raise ValueError(
                f"on a variable gap surrogate-MH's inner chain makes gap-jump's moves (single sites, unmask "
                f"proposals, inserts, deletes), which take no {', '.join(given)}; leave them out, or sample each "
                "length as a fixed template (--length-mode strata)"
            )
        self.surrogate = target.map_targets(surrogate_of)
        for surrogate in self._surrogates():  # each length's E~ set to E at its greedy fill (no random draw)
            surrogate.calibrate(fill_template(surrogate.base, 1, ChainStreams(0, 1), "greedy"))
        self.inner = GapJump(self.surrogate, **move_settings(o), p_unmask=o.p_unmask, unmask_size=o.unmask_size)

    def _surrogates(self) -> list[SurrogateTarget]:
        """The surrogate targets: one, or one per length of a variable gap."""
        if isinstance(self.surrogate, GapTarget):
            return [self.surrogate.target(L) for L in self.surrogate.lengths]  # type: ignore[misc]
        return [self.surrogate]

    def _full_copies(self, tokens: Tensor) -> Tensor:
        """``(N,)`` masked copies of one exact evaluation of each state: its length's scored positions."""
        target = self.target
        if not isinstance(target, GapTarget):
            return torch.full((tokens.shape[0],), target.scored_positions.numel())  # type: ignore[attr-defined]
        copies = torch.empty(tokens.shape[0], dtype=torch.long)
        for L, rows in target.groups(tokens):
            copies[rows] = target.target(L).scored_positions.numel()  # type: ignore[attr-defined]
        return copies

    def chains_batched(self) -> bool:
        """Say whether the chains advance in one batched forward pass.

        Returns
        -------
        bool
            False on a variable gap, where the inner gap-jump chain steps one chain at a time (its
            time estimate says so); True otherwise.
        """
        return not self.inner.capabilities.lengths

    def evaluations_per_step(self) -> float:
        """Say at most how much work one step does for one chain, in full evaluations of the target.

        ``inner_steps`` inner steps, each a pass over the window's copies (as long as the cropped
        context) and what its proposal reads, and one pass over the whole sequence's.

        Returns
        -------
        float
            The work in full evaluations (of the longest length, for a variable gap).
        """
        surrogate = self._surrogates()[-1]
        full = int(surrogate.base.scored_positions.numel())  # type: ignore[attr-defined]
        crop = surrogate.columns.numel() / surrogate.template.numel()
        if self.inner.capabilities.lengths:  # a surrogate evaluation per move, an update's reads, a jump's q copy
            reads = self.options.p_update * self.inner.kernel(self.surrogate.longest).proposal_cost()
            reads += self.inner.jump_reads()
            per_step = surrogate.positions.numel() + reads
        else:  # with replicas, a local step evaluates each replica's proposal; an exchange, none
            per_step = surrogate.positions.numel() * self.options.local_steps() + self.inner.proposal_cost()
        return (self.inner_steps * per_step * crop + full) / full

    # -- state
    def init(self, tokens: Tensor) -> SurrogateState:
        """Evaluate complete starting states under the target and the surrogate.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(C, L)`` long token ids, one complete state of the target per chain.

        Returns
        -------
        SurrogateState
            The chains' state at step 0, the inner chain's included.

        Raises
        ------
        TypeError, ValueError
            Where ``tokens`` is not a ``(C, L)`` tensor of complete states of the target.
        """
        tokens = check_states(self.target, tokens)
        ev = self.target.evaluate(tokens)
        hold, recent = start_thermostat(tokens.shape[0]) if self.thermostat else (None, None)
        return SurrogateState(tokens, ev.energy, ev.log_factor, self.inner.init(tokens), 0, hold, recent)

    def with_log_factor(self, state: SurrogateState, log_factor: Tensor) -> SurrogateState:
        """Give a state new extra log terms, in the target's and the surrogate's part alike.

        Parameters
        ----------
        state : SurrogateState
            The chains' state.
        log_factor : torch.Tensor
            Shape ``(C,)``: the new extra log terms.

        Returns
        -------
        SurrogateState
            ``state`` with ``log_factor`` replaced, in its inner chain's state too (no forward pass).
        """
        return state._replace(log_factor=log_factor, inner=self.inner.with_log_factor(state.inner, log_factor))

    def log_density(self, energy: Tensor, log_factor: Tensor, tau: Tensor | None = None) -> Tensor:
        """Compute the log density at the target's temperature, annealed at each chain's ``tau`` where given.

        The same form serves the target and the surrogate.

        Parameters
        ----------
        energy : torch.Tensor
            Shape ``(N,)``: the energies (the target's or the surrogate's).
        log_factor : torch.Tensor
            Shape ``(N,)``: the extra log terms.
        tau : torch.Tensor, optional
            Shape ``(N,)``: each state's annealing temperature (:meth:`taus`); None (the default):
            not annealed.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``.

        Raises
        ------
        ValueError
            Where a ``tau`` is not a finite temperature.
        """
        temperature, terms = self.target.temperature, self.options.anneal_terms
        if tau is None:
            return scheduled_log_density(energy, log_factor, temperature, None, terms, None)
        return annealed_log_density(energy, log_factor, temperature, tau.to(energy.dtype), terms)

    def taus(self, state: SurrogateState) -> Tensor | None:
        """Give the ``tau`` each chain's next step runs at.

        The schedule's, never below a given ``anneal_floor`` (or the schedule's first ``tau``,
        where that is lower), nor below where the chain stopped cooling (its hold).

        Parameters
        ----------
        state : SurrogateState
            The chains' current state (its step, and each chain's hold).

        Returns
        -------
        torch.Tensor or None
            Shape ``(C,)``; None where the kernel does not anneal.
        """
        o = self.options
        if o.temperature_schedule is None:
            return None
        tau = float(o.temperature_schedule(state.step))
        if o.anneal_floor:
            tau = max(tau, min(o.anneal_floor, float(o.temperature_schedule(0))))
        hold = torch.zeros(state.tokens.shape[0], dtype=torch.float64) if state.hold is None else state.hold
        return chain_taus(tau, hold)

    def annealing(self) -> dict[str, Any] | None:
        """Describe what a run records of its annealing: the schedule, and where it stops cooling.

        Returns
        -------
        dict or None
            The schedule's record (``annealing_record``, ``mlm_ppl.inference.annealing``) with
            ``floor``: ``"chains"`` (each chain where its outer acceptance falls,
            ``mlm_ppl.inference.anneal_floor``) or a fixed ``tau`` (0 for none); None when the
            kernel samples its target.
        """
        record = super().annealing()
        if record is None:
            return None
        return {**record, "floor": "chains" if self.thermostat else (self.options.anneal_floor or 0.0)}

    def annealing_end(self, state: SurrogateState) -> dict[str, Any]:
        """Describe what a run adds to its annealing record at its end, from its last state.

        Parameters
        ----------
        state : SurrogateState
            The run's last state.

        Returns
        -------
        dict
            ``stopped_at``: the ``tau`` each chain stopped cooling at (None for a chain that
            followed the whole schedule); empty without the annealing thermostat.
        """
        if state.hold is None:
            return {}
        return {"stopped_at": [round(float(h), 6) if h > 0 else None for h in state.hold]}

    def _run_inner(self, start: Any, streams: ChainStreams, taus: Tensor | None) -> tuple[Any, Tensor, Tensor, Tensor]:
        """``inner_steps`` of the inner chain from ``start`` (annealed at ``taus``): its end, and per
        chain the accepted single-site changes, the fraction of inner proposals accepted and the
        masked copies run."""
        C = start.tokens.shape[0]
        if taus is not None and not bool((taus == taus[0]).all()):  # chains at different taus: a batch per tau
            ends: list[Any] = [None] * C
            moves, accepted, copies = torch.zeros(C, dtype=torch.long), torch.zeros(C), torch.zeros(C, dtype=torch.long)
            for tau in torch.unique(taus):
                rows = (taus == tau).nonzero().flatten().tolist()
                group = cat_states([state_rows(start, c, C) for c in rows])
                end, moves[rows], accepted[rows], copies[rows] = self._run_inner(
                    group, streams.subset(rows), taus[rows]
                )
                for i, c in enumerate(rows):
                    ends[c] = state_rows(end, i, len(rows))
            return cat_states(ends), moves, accepted, copies
        if taus is not None:
            self.inner_tau = float(taus[0])
        moves = torch.zeros(C, dtype=torch.long)
        accepted = torch.zeros(C)
        copies = torch.zeros(C, dtype=torch.long)
        if self.inner.capabilities.lengths:  # its chains step one at a time: each chain's copies counted as run
            ends = []
            for c in range(C):
                one, stream = state_rows(start, c, C), streams.subset([c])
                before = sum(t.copies for t in self._surrogates())
                for _ in range(self.inner_steps):
                    one, info = self.inner.step(one, stream)
                    moves[c] += int(info.n_changed[0])
                    accepted[c] += float(info.is_accepted[0])
                copies[c] = sum(t.copies for t in self._surrogates()) - before
                ends.append(one)
            return cat_states(ends), moves, accepted / self.inner_steps, copies
        inner = start
        window = self.surrogate.positions.numel()
        for _ in range(self.inner_steps):
            inner, info = self.inner.step(inner, streams)
            moves += info.n_changed
            accepted += info.is_accepted.float()
            copies += info.evaluated.long() * window  # the window's copies ran
            copies += self.inner.proposal_copies  # and those the proposal read (blocks, unmasking)
        return inner, moves, accepted / self.inner_steps, copies

    # -- one step
    def step(self, state: SurrogateState, streams: ChainStreams) -> tuple[SurrogateState, SurrogateInfo]:
        """Make ``inner_steps`` surrogate steps, then one exact accept/reject of the whole move.

        Parameters
        ----------
        state : SurrogateState
            The chains' current state.
        streams : ChainStreams
            One random stream per chain: chain ``c`` draws only from row ``c``.

        Returns
        -------
        state : SurrogateState
            The chains' new state.
        info : SurrogateInfo
            The step's statistics.

        Raises
        ------
        ValueError
            Where an annealing schedule gives a ``tau`` that is not a finite temperature.
        """
        start, taus = state.inner, self.taus(state)
        inner, moves, inner_acceptance, copies = self._run_inner(start, streams, taus)
        moved = (inner.tokens != state.tokens).any(-1)  # (C,)

        lp_x = self.log_density(state.energy, state.log_factor, taus)
        lp_y = lp_x.clone()
        energy, log_factor = state.energy.clone(), state.log_factor.clone()
        if moved.any():
            ev = self.target.evaluate(inner.tokens[moved])  # the step's one full-energy pass
            lp_y[moved] = self.log_density(ev.energy, ev.log_factor, None if taus is None else taus[moved])
            copies[moved] += self._full_copies(inner.tokens[moved])
        surrogate_gain = self.log_density(inner.energy, inner.log_factor, taus) - self.log_density(
            start.energy, start.log_factor, taus
        )
        log_a = mh_log_ratio(lp_y, lp_x, torch.where(moved, -surrogate_gain.to(lp_x.dtype), 0.0), moved)
        is_accepted = accept(log_a, streams)
        take = is_accepted & moved
        if take.any():
            kept = take[moved]
            energy[take], log_factor[take] = ev.energy[kept], ev.log_factor[kept]
        # with replicas the inner state also moves where replica 0 did not (the hotter ones did): that
        # move's outer ratio is 1 (the surrogate's hot terms are in both densities), so it is taken
        keep = take | ~moved if self.options.replicas > 1 else take
        new_inner = choose_rows(keep, inner, start)
        acceptance = acceptance_probability(log_a)
        hold, recent = state.hold, state.recent
        if hold is not None and recent is not None and taus is not None:  # the annealing thermostat
            first = float(self.options.temperature_schedule(0))  # type: ignore[misc]
            hold, recent = thermostat(hold, recent, taus, acceptance, moved, first)
        new = SurrogateState(new_inner.tokens, energy, log_factor, new_inner, state.step + 1, hold, recent)
        info = SurrogateInfo(
            lp=self.log_density(energy, log_factor),
            is_accepted=is_accepted,
            acceptance_rate=acceptance.float(),
            n_changed=(new.tokens != state.tokens).sum(-1),
            n_moves=torch.where(take, moves, torch.zeros_like(moves)),
            inner_acceptance=inner_acceptance,
            masked_copies=copies,
        )
        return new, info
