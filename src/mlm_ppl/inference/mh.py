"""Metropolis-Hastings with MLM-conditional proposals (Goyal, Dyer & Berg-Kirkpatrick 2021).

The whole algorithm: :class:`MHState` caches the current state's single-site conditionals
(they are the next proposals), :meth:`MetropolisHastings.step` proposes a block (or, with
``p_unmask``, a run of free positions unmasked one by one: :meth:`MetropolisHastings.unmask`),
scores the proposed state in one batched pass, and accepts with
:func:`~mlm_ppl.inference.base.accept`; :meth:`MetropolisHastings.block_matrix` and
:meth:`MetropolisHastings.unmask_matrix` are the same moves as exact transition matrices.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from .._checks import check_probability, check_schedule, check_share, check_temperature, count_at_least
from ..models.target import Evaluation, Target
from .base import (
    ANNEAL_TERMS,
    SCANS,
    accept,
    acceptance_probability,
    check_states,
    mh_log_ratio,
    proposal_log_probs,
    sample_tokens,
    scheduled_log_density,
    select_sites,
)
from .exact import block_moves, scan_matrix
from .library import Library, check_library
from .spec import Capabilities, KernelBase, Options, option
from .streams import ChainStreams

__all__ = [
    "default_proposal_temperature",
    "ProposalOptions",
    "MHOptions",
    "MHState",
    "MHInfo",
    "MetropolisHastings",
    "TruncatedProposalWarning",
]


def default_proposal_temperature(temperature: float) -> float:
    """The proposals' temperature when none is given: the target's temperature ``T`` where it is
    above 1, else 1. Measured by the exact transition matrix on five 64-state models
    (``benchmarks/proposal_temperature.py``, docs/sampling.md): proposals at ``T`` relax 6.9-59x
    faster than at 1 when ``T = 3`` and 2.6-20x when ``T = 2``, but 1.1-91x slower when
    ``T = 0.5`` (sharpened proposals lock onto the MLM's favourites), where 1 does better."""
    return max(float(temperature), 1.0)


LIBRARY_RECORDS = {"library": None, "library_weight": 0.5}
"""What runs recorded before the library proposal did (none): their kernels' ``older_records``."""


class TruncatedProposalWarning(UserWarning):
    """MH (or surrogate-MH's inner chain) runs with ``top_k`` / ``top_p`` proposals."""


TRUNCATION_MESSAGE = (
    "top_k/top_p truncate the MH proposal: the target stays invariant, but a token outside the truncated set "
    "can never be proposed, so the chain may be reducible and never reach parts of the target (on a 64-state "
    "example, top_k=3 and top_p=0.9 left the chain at total variation 0.29 and 0.20 from the target after "
    "5000 steps from a uniform start, 0.9995 and 0.95 from the worst start; plain MH 0.0000). Leave them unset "
    "for draws from the target; use them to explore near the MLM's likely tokens"
)


@dataclass(frozen=True)
class ProposalOptions(Options):
    """The options of MH's proposals, declared once for every kernel that proposes as MH does.

    :class:`~mlm_ppl.MetropolisHastings`'s own (:class:`~mlm_ppl.inference.MHOptions`), the
    replicas' (:class:`~mlm_ppl.inference.TemperingOptions`) and surrogate-MH's inner chain's
    (:class:`~mlm_ppl.inference.SurrogateOptions`) subclass it. Each value is checked when the
    options are made; :class:`~mlm_ppl.MetropolisHastings` says what each does in full.

    Parameters
    ----------
    block_size : int, optional
        Free positions proposed together (default 1).
    proposal_temperature : float or None, optional
        Temperature of the MLM proposals (default None: the target's temperature where above 1,
        else 1).
    top_k : int or None, optional
        Truncate the proposals to the ``k`` most likely tokens (default None: no truncation).
    top_p : float or None, optional
        Nucleus truncation of the proposals, in ``(0, 1]`` (default None: none).
    p_unmask : float, optional
        Probability in ``[0, 1]`` that a step proposes a run of ``unmask_size`` free positions by
        unmasking them one by one in a random order (default 0; MH needs ``scan="random"``).
    unmask_size : int or None, optional
        Free positions an unmask proposal redraws, a run of neighbours (default None: all).
    library : str or None, optional
        Deep states an unmask proposal may propose (a fixed library, found before sampling):
        loops of the free positions separated by commas, recorded with the run (default None).
    library_weight : float, optional
        Share of unmask proposals that put a library loop, drawn uniformly, on their run
        (default 0.5).
    temperature_schedule : callable or None, optional
        ``step -> tau`` (surrogate-MH: its outer step), the annealing temperature (mode seeking;
        Python only, never recorded in a run's ``config.json``; default None: no annealing).
    anneal_terms : {"all", "mlm", "constraints"}, optional
        What the schedule anneals: the whole log density (the default), ``-E/T`` alone, or the
        log-factor alone.

    Raises
    ------
    TypeError
        When a value has the wrong type.
    ValueError
        When a value is out of range, or ``anneal_terms`` is not one of its choices.

    Examples
    --------
    >>> from mlm_ppl.inference import MHOptions, ProposalOptions
    >>> issubclass(MHOptions, ProposalOptions)
    True
    >>> ProposalOptions(top_k=5).given()
    {'top_k': 5}
    """

    block_size: int = option(1, "free positions proposed together", check=count_at_least(1))
    proposal_temperature: float | None = option(
        None,
        "temperature of the MLM proposals (default: the target's temperature where above 1, else 1)",
        check=check_temperature,
    )
    top_k: int | None = option(None, "truncate proposals to the k most likely tokens", check=count_at_least(1))
    top_p: float | None = option(None, "nucleus truncation of proposals", check=check_probability)
    p_unmask: float = option(
        0.0,
        "probability that a step proposes a run of unmask_size free positions by unmasking them one by one "
        "in a random order (MH: with scan random)",
        check=check_share,
    )
    unmask_size: int | None = option(
        None, "free positions an unmask proposal redraws, a run of neighbours (default: all)", check=count_at_least(1)
    )
    library: str | None = option(
        None,
        "deep states an unmask proposal may propose (a fixed library, found before sampling): loops of the free "
        "positions separated by commas, recorded with the run",
        check=check_library,
    )
    library_weight: float = option(
        0.5, "share of unmask proposals that put a library loop, drawn uniformly, on their run", check=check_share
    )
    temperature_schedule: Callable[[int], float] | None = option(
        None,
        "step (surrogate-MH: outer step) -> annealing temperature tau (mode seeking; Python only)",
        check=check_schedule,
        cli=False,
    )
    anneal_terms: str = option(
        "all",
        "what the schedule anneals: all (the whole log density), mlm (-E/T alone), constraints (the log-factor alone)",
        choices=ANNEAL_TERMS,
    )


@dataclass(frozen=True)
class MHOptions(ProposalOptions):
    """Options of :class:`MetropolisHastings`: its proposals' (:class:`ProposalOptions`) and the scan.

    Each is checked when the options are made; :class:`MetropolisHastings` says what each does in
    full, and checks them against its target.

    Parameters
    ----------
    block_size : int, optional
        Free positions proposed together (default 1).
    proposal_temperature : float, optional
        Temperature of the MLM proposals (default None: the target's temperature where above 1,
        else 1).
    top_k : int, optional
        Truncate the proposals to the ``k`` most likely tokens (default None: no truncation).
    top_p : float, optional
        Nucleus truncation of the proposals, in ``(0, 1]`` (default None: none).
    p_unmask : float, optional
        Probability in ``[0, 1]`` that a step proposes a run of ``unmask_size`` free positions by
        unmasking them one by one in a random order (default 0; needs ``scan="random"``).
    unmask_size : int, optional
        Free positions an unmask proposal redraws, a run of neighbours (default None: all).
    library : str, optional
        Deep states an unmask proposal may propose (a fixed library, found before sampling):
        loops of the free positions separated by commas, recorded with the run (default None).
    library_weight : float, optional
        Share of unmask proposals that put a library loop, drawn uniformly, on their run
        (default 0.5).
    temperature_schedule : callable, optional
        ``step -> tau``, the annealing temperature of each step (mode seeking; Python only, never
        recorded in a run's ``config.json``; default None: no annealing).
    anneal_terms : str, optional
        What the schedule anneals: ``"all"`` (the whole log density, the default), ``"mlm"``
        (``-E/T`` alone) or ``"constraints"`` (the log-factor alone).
    scan : str, optional
        Which free positions each step proposes: ``"random"`` (the default), ``"random_sweep"``
        or ``"left_to_right"`` (:data:`~mlm_ppl.inference.SCANS`).

    Raises
    ------
    TypeError
        Where an option has the wrong type.
    ValueError
        Where an option is out of range or not one of its choices.
    """

    scan: str = option("random", "which free positions each step proposes (random, random_sweep, left_to_right)",
                       choices=SCANS)  # fmt: skip


class MHState(NamedTuple):
    """State of C Metropolis-Hastings chains.

    ``cond_logits`` are the MLM conditionals of the current tokens at every free position
    (each with only that position masked); they are the next single-site proposals, so an MH
    step costs one pass over the proposed state's masked copies and nothing for the current one.

    Parameters
    ----------
    tokens : torch.Tensor
        Shape ``(C, L)`` long token ids, the chains' current states.
    energy : torch.Tensor
        Shape ``(C,)``: the target's energy ``E(x)`` of each.
    log_factor : torch.Tensor
        Shape ``(C,)``: the extra log terms of each (constraints, the rest of a Pyro model).
    cond_logits : torch.Tensor
        Shape ``(C, F, V)``: the MLM conditionals of the current tokens at each free position.
    step : int
        Steps taken (the scan position, and the annealing schedule's argument).
    order : torch.Tensor
        Shape ``(C, F)``: the current sweep order of ``scan="random_sweep"`` (empty otherwise).
    """

    tokens: Tensor  # (C, L) long
    energy: Tensor  # (C,) E(x)
    log_factor: Tensor  # (C,) extra log terms
    cond_logits: Tensor  # (C, F, V)
    step: int  # steps taken (scan position, annealing)
    order: Tensor  # (C, F) current random-sweep order (empty otherwise)


class MHInfo(NamedTuple):
    """Per-step statistics of C chains (ArviZ names).

    Parameters
    ----------
    lp : torch.Tensor
        Shape ``(C,)``: the log target density after the step (at the target temperature, also in
        an annealed run).
    is_accepted : torch.Tensor
        Shape ``(C,)`` bool: whether the proposal was accepted.
    acceptance_rate : torch.Tensor
        Shape ``(C,)``: ``min(1, exp(log ratio))``; 1 for a proposal equal to a state of
        density > 0.
    n_changed : torch.Tensor
        Shape ``(C,)``: the positions that changed in this step.
    evaluated : torch.Tensor
        Shape ``(C,)`` bool: whether the proposal's masked copies ran (it changed the state and
        broke no hard rule).
    """

    lp: Tensor  # (C,) log target density after the step (at the target temperature)
    is_accepted: Tensor  # (C,) bool
    acceptance_rate: Tensor  # (C,) min(1, exp(log ratio)); 1 for a proposal equal to a state of density > 0
    n_changed: Tensor  # (C,) positions that changed in this step
    evaluated: Tensor  # (C,) bool: the proposal's masked copies ran (it changed the state, broke no rule)


class MetropolisHastings(KernelBase[MHOptions]):
    """Metropolis-Hastings with MLM-conditional proposals (Goyal, Dyer & Berg-Kirkpatrick 2021).

    **Target**: ``p(x) ∝ exp(-E(x)/T + log_factor(x))`` of the target (a
    :class:`~mlm_ppl.MaskedLMDistribution`, optionally a :class:`~mlm_ppl.models.ConstrainedTarget`);
    the energy ``E_norm`` or ``E_raw`` and the temperature ``T`` are the target's.

    **Proposal**: pick a block ``B`` of free positions (``scan``: uniformly at random, a random
    permutation per sweep, or left to right; ``block_size`` positions). Mask ``B`` in the current
    state ``x`` and propose ``x'_B ~ q(.|x_{\\B}) = prod_{i in B} q_i(x'_i | x_{\\B})``, where
    ``q_i ∝ exp(logit_i / T_q)`` over the tokens position ``i`` may hold
    (``target.allowed``: the ordinary tokens, or a constraint spec's alphabet there),
    optionally truncated to ``top_k`` / ``top_p``. ``T_q`` is ``proposal_temperature``, by
    default ``max(T, 1)`` (``default_proposal_temperature``: measured by the exact
    transition matrix, docs/sampling.md "Proposal temperature"). For ``block_size=1`` the
    conditional is the cached one of the state.

    **Acceptance**: since ``x_{\\B} = x'_{\\B}``, the reverse proposal uses the same masked context:

        log α = [log p(x') - log p(x)] + [log q(x_B | x_{\\B}) - log q(x'_B | x_{\\B})].

    A truncated proposal gives ``log q(x_B) = -inf`` when the old tokens fall outside the
    truncated set, so such a move is rejected, never silently accepted. The restriction to the
    alphabets is part of ``q`` (both ``q`` terms come from the same restricted, renormalised
    distribution), so the ratio is that of the restricted proposal. The chain is exact for its
    target (tests check the transition matrix by enumeration). From a state of density 0
    (``log_factor = -inf``: it breaks a hard rule) a move to a state of density > 0 is always
    accepted and any other, a proposal equal to the state included, rejected
    (``mh_log_ratio``): the statistics never count a stuck step as
    accepted.

    **Cost**: one pass over the proposed state's masked copies for each chain whose proposal
    changed the state; nothing for the current state (its conditionals are cached in
    :class:`MHState`), nothing for a proposal equal to the state, and nothing for a proposal
    that breaks a hard rule (:meth:`~mlm_ppl.models.Target.forbidden`: a forbidden pattern, a
    required one missing): its log-factor is ``-inf``, so it is rejected before its forward
    pass (``info.evaluated`` says which chains ran one).

    Parameters
    ----------
    target : Target
        What is sampled: a :class:`~mlm_ppl.MaskedLMDistribution`, optionally a
        :class:`~mlm_ppl.models.ConstrainedTarget` (any :class:`~mlm_ppl.models.Target` of a
        fixed template).
    **options
        The fields of :class:`~mlm_ppl.inference.MHOptions`:

        scan : {"random", "random_sweep", "left_to_right"}
            Which free positions each step proposes (default ``"random"``).
        block_size : int
            Free positions proposed together (default 1; at most the template's free positions).
        proposal_temperature : float, optional
            Temperature of the proposals; None (the default) is the target's temperature where it
            is above 1, else 1 (``default_proposal_temperature``). Any value leaves the target
            exact: it changes how fast the chain mixes, not where it goes.
        top_k : int, optional
            Truncate the proposals to the ``k`` most likely tokens (a warning says what it costs).
        top_p : float in (0, 1], optional
            Nucleus truncation of the proposals (a warning too).
        p_unmask : float in [0, 1]
            Probability that a step proposes by sequential unmasking instead of a block: a run of
            ``unmask_size`` neighbouring free positions (default all), starting uniformly at random, is
            masked and redrawn one position at a time in a uniformly random order, each from the MLM's
            conditional given those already drawn; ``log q`` is the sum along the order, and its
            reverse reads the current tokens along the same order (:meth:`unmask`). Run and order are
            drawn independently of the state, so each is an MH kernel of its own and the mixture is
            exact and reversible (surrogate-MH's inner chain needs the latter). Needs ``scan="random"``.
            Cost: ``2b - 1`` masked copies for a run of ``b`` (in ``b`` passes), then the proposal's
            evaluation.
        unmask_size : int, optional
            Free positions an unmask proposal redraws (default all; needs ``p_unmask``).
        library : str, optional
            A fixed library of deep states, loops of the free positions separated by commas (found
            before sampling: an earlier run's :func:`~mlm_ppl.diagnostics.deep_states`, an annealed
            run's ends). An unmask proposal then draws its run from the mixture ``(1 - w) q_U + w
            n(y_R) / K``: with probability ``library_weight`` a library loop drawn uniformly is put on
            the run. Exact for any fixed library (``mlm_ppl.inference.library``); needs ``p_unmask``.
        library_weight : float in (0, 1)
            ``w`` above (default 0.5).
        temperature_schedule : callable, optional
            ``step -> tau``: anneal for mode seeking (Goyal et al. section 7): the step's acceptance
            uses the log density divided by ``tau`` (``anneal_terms="all"``: the MLM term and the
            constraints' experts together, so the chain seeks the mode of the product; ``"mlm"`` or
            ``"constraints"``: that term alone). The chain then no longer samples ``p``; the recorded
            ``lp`` is the target's. See :func:`~mlm_ppl.inference.geometric_annealing`.
        anneal_terms : {"all", "mlm", "constraints"}
            What the schedule anneals (default ``"all"``).

    Raises
    ------
    TypeError
        Where an option is unknown or of the wrong type.
    ValueError
        Where an option is out of range or does not fit the target (:meth:`bind_target`), or the
        target is a variable gap (``MASK{a,b}``: :class:`~mlm_ppl.inference.GapJump` and
        :class:`~mlm_ppl.SurrogateMH` sample one).

    Warns
    -----
    TruncatedProposalWarning
        With ``top_k`` or ``top_p``: the chain may then never reach parts of the target.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution, MetropolisHastings, run_chains
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]")
    >>> kernel = MetropolisHastings(target, block_size=2, p_unmask=0.3)
    >>> run = run_chains(kernel, num_chains=4, num_samples=10, seed=0)
    >>> run.tokens.shape  # (chains, draws, L)
    torch.Size([4, 10, 7])
    >>> rate = run.stats["acceptance_rate"]
    >>> bool(((rate >= 0) & (rate <= 1)).all())
    True

    One step by hand, from filled templates:

    >>> from mlm_ppl.inference import ChainStreams, fill_template
    >>> streams = ChainStreams(0, 3)
    >>> state = kernel.init(fill_template(target, 3, streams))
    >>> state.cond_logits.shape  # (C, F, V): the cached single-site proposals
    torch.Size([3, 3, 9])
    >>> state, info = kernel.step(state, streams)
    >>> state.tokens.shape, info.is_accepted.shape
    (torch.Size([3, 7]), torch.Size([3]))
    """

    name = "mh"
    Options = MHOptions
    State = MHState
    Info = MHInfo
    capabilities = Capabilities(log_factor=True, gibbs=True, complete_start=True, exact_matrix=True)
    older_records = {"p_unmask": 0.0, "unmask_size": None, **LIBRARY_RECORDS}  # unmask 0.4, library 0.6
    options: MHOptions

    def bind_target(self, target: Target) -> None:
        """Check the options against the target and derive what the kernel reads of it (called by ``__init__``).

        Parameters
        ----------
        target : Target
            The kernel's target.

        Raises
        ------
        ValueError
            Where ``block_size`` or ``unmask_size`` is larger than the target's free positions,
            ``p_unmask`` is given with a scan other than ``"random"``, ``unmask_size`` without
            ``p_unmask``, or a library that could do nothing (``library_weight`` without a library,
            a library without ``p_unmask`` or with ``library_weight`` outside ``(0, 1)``) or whose
            loops do not fit the target.

        Warns
        -----
        TruncatedProposalWarning
            With ``top_k`` or ``top_p``.
        """
        if self.options.block_size > target.num_free:
            raise ValueError(
                f"block_size={self.options.block_size} is larger than the {target.num_free} free positions "
                "of the template"
            )
        o = self.options
        if o.p_unmask > 0 and o.scan != "random":
            raise ValueError(
                f"p_unmask={o.p_unmask} needs scan='random' (each step then chooses a block or an unmask proposal "
                f"at random, independently of the state); got scan={o.scan!r}"
            )
        if o.unmask_size is not None and o.p_unmask == 0:
            raise ValueError(f"unmask_size={o.unmask_size} does nothing without p_unmask > 0: give p_unmask too")
        if o.unmask_size is not None and o.unmask_size > target.num_free:
            raise ValueError(
                f"unmask_size={o.unmask_size} is larger than the {target.num_free} free positions of the template"
            )
        self.unmask_size = target.num_free if o.unmask_size is None else o.unmask_size
        self.library = Library.bind(o, target)  # None without one
        self.proposal_copies = torch.zeros(0, dtype=torch.long)  # (C,) of the last step: see proposal_cost
        if o.top_k is not None or o.top_p is not None:
            warnings.warn(TruncatedProposalWarning(TRUNCATION_MESSAGE), stacklevel=3)

    # -- state
    def init(self, tokens: Tensor) -> MHState:
        """Evaluate complete starting states (see :func:`~mlm_ppl.inference.fill_template`).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(C, L)`` long token ids, one complete state of the target per chain.

        Returns
        -------
        MHState
            The chains' state at step 0: energies, log-factors and cached conditionals.

        Raises
        ------
        TypeError, ValueError
            Where ``tokens`` is not a ``(C, L)`` tensor of complete states of the target.
        """
        tokens = check_states(self.target, tokens)
        ev = self.target.evaluate(tokens)
        return MHState(tokens, ev.energy, ev.log_factor, ev.cond_logits, 0, torch.empty(0, dtype=torch.long))

    def with_log_factor(self, state: MHState, log_factor: Tensor) -> MHState:
        """Give a state new extra log terms (the rest of a model moved; the MLM terms did not).

        Parameters
        ----------
        state : MHState
            The chains' state.
        log_factor : torch.Tensor
            Shape ``(C,)``: the new extra log terms.

        Returns
        -------
        MHState
            ``state`` with ``log_factor`` replaced (no forward pass).
        """
        return state._replace(log_factor=log_factor)

    def log_density(self, energy: Tensor, log_factor: Tensor, step: int | None = None) -> Tensor:
        """Compute the target's log density, or at ``step`` of an annealed run its annealed form.

        The annealed form is ``annealed_log_density`` (``mlm_ppl.inference.base``) at
        ``tau = temperature_schedule(step)``.

        Parameters
        ----------
        energy : torch.Tensor
            Shape ``(C,)``: the energies ``E(x)``.
        log_factor : torch.Tensor
            Shape ``(C,)``: the extra log terms.
        step : int, optional
            The step of an annealed run; None (the default), or no schedule: the target's own
            ``-E/T + log_factor``.

        Returns
        -------
        torch.Tensor
            Shape ``(C,)``.

        Raises
        ------
        ValueError
            Where the schedule gives a ``tau`` that is not a finite temperature.
        """
        o = self.options
        return scheduled_log_density(
            energy, log_factor, self.target.temperature, o.temperature_schedule, o.anneal_terms, step
        )

    def _proposal(self, logits: Tensor, sites: Tensor) -> Tensor:
        """``(C, b, V)`` log q at free indices ``sites`` ``(C, b)``, within their alphabets."""
        o = self.options
        allowed = self.target.allowed[sites]  # (C, b, V)
        return proposal_log_probs(logits, allowed, temperature=self.proposal_temperature, top_k=o.top_k, top_p=o.top_p)

    @property
    def proposal_temperature(self) -> float:
        """The proposals' temperature, the ``proposal_temperature`` option or else ``max(T, 1)`` of the target's ``T``.

        The default is ``default_proposal_temperature`` of the target's temperature.
        """
        given = self.options.proposal_temperature
        return default_proposal_temperature(self.target.temperature) if given is None else given

    def _block_logits(self, tokens: Tensor, cond_logits: Tensor, sites: Tensor) -> Tensor:
        """``(C, b, V)`` proposal logits: the cached conditionals for single sites, else one block pass."""
        if sites.shape[1] == 1:
            return cond_logits.gather(1, sites[:, :, None].expand(-1, -1, cond_logits.shape[-1]))
        return self.target.site_logits(tokens, self.target.free_positions[sites])

    def proposal_cost(self) -> float:
        """Count the masked copies one step's proposal reads per chain, on average (its evaluation aside).

        One for a block of several positions (single sites read the cached conditionals),
        ``2b - 1`` for an unmask proposal of ``b`` positions (``2b`` where it puts a library
        loop). After a step, ``proposal_copies`` ``(C,)`` holds what each chain's proposal read
        (surrogate-MH counts its inner chain's copies from it).

        Returns
        -------
        float
            The expected copies, over the choice between a block and an unmask proposal.
        """
        o = self.options
        unmask = 2 * self.unmask_size - (1 if self.library is None else 1 - o.library_weight)
        return (1 - o.p_unmask) * int(o.block_size > 1) + o.p_unmask * unmask

    def _block_proposal(
        self, tokens: Tensor, cond_logits: Tensor, step: int, order: Tensor, streams: ChainStreams
    ) -> tuple[Tensor, Tensor, Tensor]:
        """A block proposal in each chain: the proposed states ``(C, L)``, ``log q(x_B | x_\\B) -
        log q(x'_B | x_\\B)`` ``(C,)`` and the sweep order to keep."""
        o = self.options
        sites, order = select_sites(o.scan, step, order, tokens.shape[0], self.target.num_free, o.block_size, streams)
        pos = self.target.free_positions[sites]  # (C, b)
        logq = self._proposal(self._block_logits(tokens, cond_logits, sites), sites)  # (C, b, V)
        new = sample_tokens(logq, streams)  # (C, b)
        log_fwd = logq.gather(-1, new[..., None]).sum((-1, -2))  # (C,) log q(x'_B | x_\B)
        log_rev = logq.gather(-1, tokens.gather(1, pos)[..., None]).sum((-1, -2))  # (C,) log q(x_B | x_\B)
        return tokens.scatter(1, pos, new), log_rev - log_fwd, order

    def unmask_orders(self, streams: ChainStreams) -> Tensor:
        """Draw the free indices an unmask proposal redraws, in the order it draws them.

        A run of ``b = unmask_size`` neighbouring free positions starting uniformly at random, in
        a uniformly random order (both independent of the state, so each step is a random choice
        among MH kernels, each reversible).

        Parameters
        ----------
        streams : ChainStreams
            One random stream per chain.

        Returns
        -------
        torch.Tensor
            Shape ``(C, b)`` long free indices.
        """
        C, F, b = len(streams), self.target.num_free, self.unmask_size
        first = streams.randint(F - b + 1) if b < F else torch.zeros(C, dtype=torch.long)
        return first[:, None] + streams.rand((C, b)).argsort(-1)

    def unmask(self, tokens: Tensor, order: Tensor, streams: ChainStreams | None) -> tuple[Tensor, Tensor, Tensor]:
        """Propose by sequential unmasking of the free indices ``order`` of states ``tokens``.

        Step ``i`` masks ``order[:, i:]`` and draws ``order[:, i]`` from the proposal there (the
        MLM's conditional, within the alphabet, at :attr:`proposal_temperature`, ``top_k``,
        ``top_p``). ``log q`` of a state is the sum of its tokens' proposal log-probabilities
        along the order, the reverse read with the current tokens in place of the drawn ones (one
        batched pass for both per step, one copy at the first: ``b`` passes, ``2b - 1`` copies
        in all). The proposal is normalised in float64, so the product of its ``b`` factors sums
        to 1 over the run's fills to rounding whatever the model's dtype (the exact matrix relies
        on it).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``: the current states.
        order : torch.Tensor
            Shape ``(N, b)``: the free indices to redraw, in the order they are drawn
            (:meth:`unmask_orders`).
        streams : ChainStreams or None
            One random stream per row; None draws nothing and scores ``tokens`` alone.

        Returns
        -------
        proposed : torch.Tensor
            Shape ``(N, L)``: the proposed states (``tokens`` when ``streams`` is None).
        log_q_proposed : torch.Tensor
            Shape ``(N,)`` float64: ``log q(proposed)`` (``log q(tokens)`` when ``streams`` is None).
        log_q_tokens : torch.Tensor
            Shape ``(N,)`` float64: ``log q(tokens)``, the reverse proposal's.
        """
        N, b = order.shape
        pos = self.target.free_positions[order]  # (N, b)
        new = tokens.clone()
        log_fwd = log_rev = torch.zeros(N, dtype=torch.float64)
        for i in range(b):  # at i = 0 nothing is drawn yet: the proposal's copy is the state's
            rows = torch.cat([new, tokens]) if streams is not None and i > 0 else tokens
            copies = rows.shape[0] // N
            logits = self.target.site_logits(rows, pos[:, i:].repeat(copies, 1))[:, :1].double()
            logq = self._proposal(logits, order[:, i : i + 1].repeat(copies, 1))[:, 0]  # (rows, V) at order[:, i]
            site = pos[:, i : i + 1]
            if streams is not None:
                new.scatter_(1, site, sample_tokens(logq[:N], streams)[:, None])
                log_fwd = log_fwd + logq[:N].gather(-1, new.gather(1, site)).squeeze(-1)
            log_rev = log_rev + logq[-N:].gather(-1, tokens.gather(1, site)).squeeze(-1)
        return new, (log_rev if streams is None else log_fwd), log_rev

    def _propose(self, state: MHState, streams: ChainStreams) -> tuple[Tensor, Tensor, Tensor]:
        """Each chain's proposal: a block (:meth:`_block_proposal`) or, with probability ``p_unmask``,
        an unmask proposal (:meth:`unmask`); the proposed states, the Hastings correction ``log q(x|.) -
        log q(x'|.)`` and the sweep order to keep. Without ``p_unmask`` every chain draws as plain MH."""
        tokens = state.tokens
        self.proposal_copies = torch.full((tokens.shape[0],), int(self.options.block_size > 1))
        if self.options.p_unmask == 0:
            return self._block_proposal(tokens, state.cond_logits, state.step, state.order, streams)
        use = streams.rand((len(streams),)) < self.options.p_unmask  # (C,) each chain from its own stream
        proposed, correction = tokens.clone(), torch.zeros(tokens.shape[0], dtype=torch.float64)
        blocks, unmasks = (~use).nonzero().flatten(), use.nonzero().flatten()
        if blocks.numel():
            prop, corr, _ = self._block_proposal(
                tokens[blocks], state.cond_logits[blocks], state.step, state.order, streams.subset(blocks.tolist())
            )
            proposed[blocks], correction[blocks] = prop, corr.double()
        if unmasks.numel():
            prop, corr, copies = self._unmask_proposal(tokens[unmasks], streams.subset(unmasks.tolist()))
            proposed[unmasks], correction[unmasks], self.proposal_copies[unmasks] = prop, corr, copies
        return proposed, correction, state.order

    def _unmask_proposal(self, tokens: Tensor, streams: ChainStreams) -> tuple[Tensor, Tensor, Tensor]:
        """An unmask proposal in each of ``N`` chains (with a library, its mixture with the library's
        loops: :meth:`Library.propose <.library.Library.propose>`): the proposed states, ``log q(x_R |
        .) - log q(y_R | .)`` (float64) and the masked copies each read."""
        order = self.unmask_orders(streams)
        if self.library is not None:
            return self.library.propose(self.unmask, tokens, order, streams)
        prop, log_fwd, log_rev = self.unmask(tokens, order, streams)
        return prop, (log_rev - log_fwd).double(), torch.full((len(order),), 2 * order.shape[1] - 1)

    # -- one step
    def step(self, state: MHState, streams: ChainStreams) -> tuple[MHState, MHInfo]:
        """Make one MH update of every chain: a block, or (``p_unmask``) a run of positions unmasked one by one.

        Parameters
        ----------
        state : MHState
            The chains' current state.
        streams : ChainStreams
            One random stream per chain: chain ``c`` draws only from row ``c``.

        Returns
        -------
        state : MHState
            The chains' new state.
        info : MHInfo
            The step's statistics.

        Raises
        ------
        ValueError
            Where an annealing schedule gives a ``tau`` that is not a finite temperature.
        """
        tokens = state.tokens
        C = tokens.shape[0]
        proposed, correction, order = self._propose(state, streams)
        changed = (proposed != tokens).any(-1)  # (C,) a proposal equal to the state is a no-op: no forward
        forbidden = torch.zeros(C, dtype=torch.bool)  # a rule is broken: log-factor -inf, rejected unrun
        if changed.any():
            forbidden[changed] = self.target.forbidden(proposed[changed])
        run = changed & ~forbidden  # (C,) the chains whose proposal's masked copies run

        lp_old = self.log_density(state.energy, state.log_factor, state.step)
        lp_new = lp_old.clone()
        lp_new[forbidden] = float("-inf")  # a broken rule: density 0, rejected without its pass
        if run.any():
            ev = self.target.evaluate(proposed[run])  # the step's one batched pass
            lp_new[run] = self.log_density(ev.energy, ev.log_factor, state.step)
        log_ratio = mh_log_ratio(lp_new, lp_old, torch.where(changed, correction, 0.0), changed)
        accepted = accept(log_ratio, streams)
        take = accepted & run
        energy, factor, cond = state.energy.clone(), state.log_factor.clone(), state.cond_logits.clone()
        if take.any():
            kept = take[run]  # which evaluated proposals were accepted
            energy[take], factor[take], cond[take] = ev.energy[kept], ev.log_factor[kept], ev.cond_logits[kept]
        new_state = MHState(torch.where(take[:, None], proposed, tokens), energy, factor, cond, state.step + 1, order)
        info = MHInfo(
            lp=self.log_density(new_state.energy, new_state.log_factor),
            is_accepted=accepted,
            acceptance_rate=acceptance_probability(log_ratio),
            n_changed=torch.where(take, (proposed != tokens).sum(-1), torch.zeros(C, dtype=torch.long)),
            evaluated=run,
        )
        return new_state, info

    # -- exact transition matrix of one block update (for exact enumeration)
    def block_matrix(self, states: Tensor, evaluation: Evaluation, sites: tuple[int, ...], index) -> Tensor:
        """Compute the exact transition matrix of updating the free-position block ``sites``.

        Uses the same proposal code as :meth:`step`.

        Parameters
        ----------
        states : torch.Tensor
            Shape ``(S, L)``: every state of the target
            (:func:`~mlm_ppl.inference.exact.enumerate_states`).
        evaluation : Evaluation
            The target's evaluation of ``states``.
        sites : tuple of int
            The free indices (``0 .. F-1``) of the block.
        index : callable
            Maps states ``(N, L)`` to their rows in ``states`` ``(N,)``
            (:func:`~mlm_ppl.inference.exact.state_index`).

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)`` float64, row ``s`` the law of the next state from state ``s``.
        """
        S = states.shape[0]
        site_t = torch.tensor(sites).expand(S, -1)
        pos = self.target.free_positions[site_t]
        logq = self._proposal(self._block_logits(states, evaluation.cond_logits, site_t), site_t)  # (S, b, V)
        lp = self.log_density(evaluation.energy, evaluation.log_factor).double()
        old = states.gather(1, pos)
        log_rev = logq.gather(-1, old[..., None]).sum((-1, -2)).double()
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for log_fwd, dest in block_moves(self.target, states, pos, logq, index):
            q = log_fwd.exp()
            a = acceptance_probability(mh_log_ratio(lp[dest], lp, log_rev - log_fwd, dest != rows))
            a = torch.where(dest == rows, torch.ones_like(a), a)
            P.index_put_((rows, dest), q * a, accumulate=True)
            P.index_put_((rows, rows), q * (1 - a), accumulate=True)
        return P

    def unmask_matrix(self, states: Tensor, evaluation: Evaluation, order: tuple[int, ...], index) -> Tensor:
        """Compute the exact transition matrix of an unmask proposal along the free indices ``order``.

        The proposal of a state ``y`` that agrees with ``x`` off the run is ``q(y)`` of
        :meth:`unmask` (it depends on ``x`` only through the tokens it keeps), so one pass over
        the states scores every move. Uses the same proposal code as :meth:`step`.

        Parameters
        ----------
        states : torch.Tensor
            Shape ``(S, L)``: every state of the target.
        evaluation : Evaluation
            The target's evaluation of ``states``.
        order : tuple of int
            The free indices of the run, in the order they are drawn.
        index : callable
            Maps states ``(N, L)`` to their rows in ``states`` ``(N,)``.

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)`` float64.
        """
        S = states.shape[0]
        order_t = torch.tensor(order).expand(S, -1)
        _, logq, _ = self.unmask(states, order_t, None)  # (S,) log q(z_run | z off the run) of every state z
        logq = logq.double() if self.library is None else self.library.log_q(logq, states, order_t)
        lp = self.log_density(evaluation.energy, evaluation.log_factor).double()
        pos = self.target.free_positions[order_t]
        ordinary = self.target.ordinary_mask.nonzero().flatten().tolist()
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for combo in itertools.product(ordinary, repeat=len(order)):
            dest = index(states.scatter(1, pos, torch.tensor(combo).expand(S, -1)))
            q = logq[dest].exp()
            a = acceptance_probability(mh_log_ratio(lp[dest], lp, logq - logq[dest], dest != rows))
            a = torch.where(dest == rows, torch.ones_like(a), a)
            P.index_put_((rows, dest), q * a, accumulate=True)
            P.index_put_((rows, rows), q * (1 - a), accumulate=True)
        return P

    def transition_matrix(self, states: Tensor, evaluation: Evaluation, index) -> Tensor:
        """Compute the exact transition matrix of one step (``scan="random"``) or one sweep (the other scans).

        Built from :meth:`block_matrix`; with ``p_unmask``, the mixture with :meth:`unmask_matrix`
        over every run and order. What :func:`~mlm_ppl.inference.exact.transition_matrix` returns
        for this kernel.

        Parameters
        ----------
        states : torch.Tensor
            Shape ``(S, L)``: every state of the target.
        evaluation : Evaluation
            The target's evaluation of ``states``.
        index : callable
            Maps states ``(N, L)`` to their rows in ``states`` ``(N,)``.

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)`` float64.
        """
        o = self.options
        P = scan_matrix(
            o.scan,
            self.target.num_free,
            o.block_size,
            lambda block: self.block_matrix(states, evaluation, block, index),
        )
        if o.p_unmask == 0:
            return P
        F, b = self.target.num_free, self.unmask_size
        orders = [
            tuple(first + j for j in perm) for first in range(F - b + 1) for perm in itertools.permutations(range(b))
        ]
        U = sum(self.unmask_matrix(states, evaluation, order, index) for order in orders) / len(orders)
        return (1 - o.p_unmask) * P + o.p_unmask * U
