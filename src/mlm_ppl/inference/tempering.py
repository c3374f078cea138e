"""Replica exchange (parallel tempering) of MH chains: a chain at the target's temperature and
``replicas - 1`` copies of it at higher temperatures, which cross between modes and hand their
states down by exchanges.

**The argument** (Swendsen & Wang 1986; Geyer 1991). Each chain holds ``K = replicas`` states
``x_0 .. x_{K-1}``, replica ``k`` at temperature ``T t_k``, ``t_k = replica_spacing**k``; their
joint law is ``prod_k p_k(x_k)``, ``p_k(x) ∝ exp(-E(x)/(T t_k) + log_factor(x))`` (the log-factor,
hard rules included, is the same in every replica), so ``x_0`` alone follows the target. A step
is, with probability ``p_swap``, an exchange of the states of a uniformly chosen pair of
neighbouring replicas ``(j, j+1)``, accepted with

    log a = (E(x_j) - E(x_{j+1})) (1/(T t_j) - 1/(T t_{j+1}))

(the MH ratio of the joint law; the log-factors only change places), and otherwise one MH step in
every replica (:class:`~mlm_ppl.inference.MetropolisHastings` with random scan on
:class:`~mlm_ppl.models.TemperedTarget`, its proposals at ``proposal_temperature * t_k``). Each
alternative is reversible for the joint law and is chosen independently of the state, so the step
is a fixed mixture of reversible kernels and reversible: what surrogate-MH's inner chain must be
(``SurrogateMH(replicas=K)``: the exchanges happen on the cheap surrogate, one exact correction per
outer step). An exchange costs no forward pass (the energies are known). :meth:`ReplicaMH.replica_matrix`
is the exact matrix of one step over every joint state of a tiny target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from .._checks import check_share, check_type, count_at_least
from ..models.target import Target, TemperedTarget, log_density
from .base import accept, acceptance_probability, check_states
from .exact import enumerate_states, state_index, transition_matrix
from .mh import LIBRARY_RECORDS, MetropolisHastings, MHState, ProposalOptions
from .spec import Capabilities, KernelBase, option
from .streams import ChainStreams

__all__ = ["TemperingOptions", "ReplicaMH", "ReplicaState", "ReplicaInfo", "joint_index"]

MAX_TOP_TEMPERATURE = 1000.0
"""The hottest replica's temperature factor ``replica_spacing**(replicas - 1)`` at most."""


def _check_spacing(value: Any, name: str) -> float:
    value = check_type(value, name, float)
    if not 1 < value <= 100:
        raise ValueError(
            f"{name} must lie in (1, 100] (the ratio of neighbouring replicas' temperatures), got {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class TemperingOptions(ProposalOptions):
    """Options of MH's proposals and of the replicas: :class:`ReplicaMH`'s and surrogate-MH's inner chain's.

    MH's proposals (:class:`~mlm_ppl.inference.ProposalOptions`, as
    :class:`~mlm_ppl.MetropolisHastings` reads them) and the replicas, declared once.

    Parameters
    ----------
    block_size : int, optional
        Free positions proposed together (default 1).
    proposal_temperature : float or None, optional
        Temperature of the MLM proposals (default None: the target's temperature where above 1,
        else 1).
    top_k : int or None, optional
        Truncate proposals to the ``k`` most likely tokens.
    top_p : float or None, optional
        Nucleus truncation of proposals, in (0, 1].
    p_unmask : float, optional
        Probability that a step proposes a run of ``unmask_size`` free positions by unmasking them
        one by one in a random order (default 0).
    unmask_size : int or None, optional
        Free positions an unmask proposal redraws, a run of neighbours (default None: all).
    library : str or None, optional
        Deep states an unmask proposal may propose (a fixed library, found before sampling): loops
        of the free positions separated by commas, recorded with the run.
    library_weight : float, optional
        Share of unmask proposals that put a library loop, drawn uniformly, on their run (default
        0.5).
    temperature_schedule : callable or None, optional
        ``step -> tau``, an annealing temperature (mode seeking; Python only). Refused with
        ``replicas > 1``: replica exchange samples its target.
    anneal_terms : {"all", "mlm", "constraints"}, optional
        What the schedule anneals: the whole log density, ``-E/T`` alone, or the log-factor alone
        (default ``"all"``).
    replicas : int, optional
        Replicas of each chain, at temperatures ``T * replica_spacing**k``, ``k = 0 .. replicas - 1``,
        exchanging states (default 1: none).
    replica_spacing : float, optional
        Ratio of neighbouring replicas' temperatures, in (1, 100] (default 1.5); the hottest
        replica's factor ``replica_spacing**(replicas - 1)`` is at most 1000.
    p_swap : float, optional
        Probability that a step proposes to exchange the states of a random pair of neighbouring
        replicas, else every replica takes an MH step (default 0.2; in (0, 1) with ``replicas > 1``).

    Raises
    ------
    TypeError
        When an option has the wrong type.
    ValueError
        When an option is out of range; when ``replica_spacing`` or ``p_swap`` is given without
        ``replicas > 1``; when ``p_swap`` is not in (0, 1) with replicas; when the hottest
        replica's temperature factor exceeds 1000; or when a ``temperature_schedule`` is given
        with replicas.

    Examples
    --------
    >>> from mlm_ppl.inference import TemperingOptions
    >>> options = TemperingOptions(replicas=3)
    >>> options.factors()
    [1.0, 1.5, 2.25]
    >>> round(options.local_steps(), 2)
    2.4
    """

    replicas: int = option(
        1,
        "replicas of each chain at temperatures T * replica_spacing**k, k = 0 .. replicas - 1, exchanging "
        "states (1: none)",
        check=count_at_least(1),
    )
    replica_spacing: float = option(1.5, "ratio of neighbouring replicas' temperatures", check=_check_spacing)
    p_swap: float = option(
        0.2,
        "probability that a step proposes to exchange the states of a random pair of neighbouring replicas "
        "(else every replica takes an MH step)",
        check=check_share,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.replicas == 1:
            given = [name for name in ("replica_spacing", "p_swap") if name in self.given()]
            if given:
                raise ValueError(f"{' and '.join(given)} do nothing without replicas > 1: give replicas too")
            return
        if not 0 < self.p_swap < 1:
            raise ValueError(
                f"p_swap={self.p_swap} with {self.replicas} replicas: it must lie in (0, 1), so that the replicas "
                "both move and exchange"
            )
        log_top = (self.replicas - 1) * math.log(self.replica_spacing)  # logs: 1.5 ** 4999 overflows a float
        if log_top > math.log(MAX_TOP_TEMPERATURE):
            top = f"{math.exp(log_top):.3g}" if log_top < 700 else f"e^{log_top:.0f}"
            raise ValueError(
                f"replica_spacing={self.replica_spacing} with {self.replicas} replicas puts the hottest at "
                f"{top} times the temperature (at most {MAX_TOP_TEMPERATURE:g}); fewer replicas or a smaller spacing"
            )
        if self.temperature_schedule is not None:
            raise ValueError(
                "replica exchange samples its target; an annealing schedule seeks modes: leave out the schedule, "
                "or anneal without replicas (kernel 'mh' or 'surrogate-mh')"
            )

    def local_steps(self) -> float:
        """Replica MH steps per step, on average: what one step's evaluations and proposal reads scale with.

        Returns
        -------
        float
            ``replicas (1 - p_swap)`` (an exchange takes none); 1 without replicas.
        """
        return self.replicas * (1 - self.p_swap) if self.replicas > 1 else 1.0

    def factors(self) -> list[float]:
        """Each replica's temperature factor ``replica_spacing**k``: 1 first (the target's).

        Returns
        -------
        list of float
            One factor per replica, ``k = 0 .. replicas - 1``.
        """
        return [self.replica_spacing**k for k in range(self.replicas)]


class ReplicaState(NamedTuple):
    """State of C chains of K replicas each, replica 0 (the target's temperature) first.

    ``tokens``, ``energy`` and ``log_factor`` are replica 0's: what a run records and
    surrogate-MH corrects.

    Parameters
    ----------
    tokens : torch.Tensor
        Replica 0's tokens, shape ``(C, L)``.
    energy : torch.Tensor
        Replica 0's energy, shape ``(C,)``.
    log_factor : torch.Tensor
        Replica 0's log-factor, shape ``(C,)``.
    replica_tokens : torch.Tensor
        Every replica's tokens, shape ``(C, K, L)``.
    replica_energy : torch.Tensor
        Every replica's energy, shape ``(C, K)``.
    replica_log_factor : torch.Tensor
        Every replica's log-factor, shape ``(C, K)``.
    cond_logits : torch.Tensor
        Each replica's conditionals at the free positions (its next single-site proposals),
        shape ``(C, K, F, V)``.
    step : int
        Steps taken.
    """

    tokens: Tensor  # (C, L) replica 0's
    energy: Tensor  # (C,)
    log_factor: Tensor  # (C,)
    replica_tokens: Tensor  # (C, K, L)
    replica_energy: Tensor  # (C, K)
    replica_log_factor: Tensor  # (C, K)
    cond_logits: Tensor  # (C, K, F, V) each replica's conditionals (its next single-site proposals)
    step: int


class ReplicaInfo(NamedTuple):
    """Per-step statistics of C replica-exchange chains.

    Parameters
    ----------
    lp : torch.Tensor
        Log target density of replica 0 after the step, shape ``(C,)``.
    is_accepted : torch.Tensor
        Replica 0's MH step accepted, or (an exchange step) the exchange, bool, shape ``(C,)``.
    acceptance_rate : torch.Tensor
        Its ``min(1, exp(log a))``, shape ``(C,)``.
    n_changed : torch.Tensor
        Positions of replica 0 that changed, shape ``(C,)``.
    evaluated : torch.Tensor
        Replicas whose proposal ran its masked copies, long, shape ``(C,)``.
    is_swap : torch.Tensor
        Whether the step proposed an exchange, bool, shape ``(C,)``.
    """

    lp: Tensor  # (C,) log target density of replica 0 after the step
    is_accepted: Tensor  # (C,) replica 0's MH step accepted, or (an exchange step) the exchange
    acceptance_rate: Tensor  # (C,) its min(1, exp(log a))
    n_changed: Tensor  # (C,) positions of replica 0 that changed
    evaluated: Tensor  # (C,) long: replicas whose proposal ran its masked copies
    is_swap: Tensor  # (C,) bool: the step proposed an exchange


class ReplicaMH(KernelBase[TemperingOptions]):
    """Replica exchange of random-scan MH chains (``replica-mh``): exact for the target, which replica 0 samples.

    See the module docstring of ``mlm_ppl.inference.tempering`` for the argument (Swendsen &
    Wang 1986; Geyer 1991). Replica ``k`` is a random-scan :class:`~mlm_ppl.MetropolisHastings`
    chain on the target at temperature factor ``t_k = replica_spacing**k``
    (:class:`~mlm_ppl.models.TemperedTarget`).

    Parameters
    ----------
    target : Target
        What replica 0 samples.
    **options
        The options of :class:`TemperingOptions`:

        * ``replicas`` (int): replicas per chain, at temperatures ``T * replica_spacing**k``
          (default 1: plain MH);
        * ``replica_spacing`` (float): ratio of neighbouring replicas' temperatures, in (1, 100];
        * ``p_swap`` (float): probability that a step proposes an exchange (in (0, 1) with
          replicas > 1);
        * ``block_size``, ``p_unmask``, ``unmask_size``, ``proposal_temperature``, ``top_k``,
          ``top_p``, ``library``, ``library_weight``, ``anneal_terms``: each replica's MH
          proposals (:class:`~mlm_ppl.MetropolisHastings`), at ``proposal_temperature`` times the
          replica's temperature factor (by default the default of the replica's own temperature:
          ``max(T t, 1)``);
        * ``temperature_schedule``: refused (with any number of replicas: this kernel never
          anneals).

    Attributes
    ----------
    factors : list of float
        Each replica's temperature factor, 1 first.
    kernels : list of MetropolisHastings
        Each replica's MH kernel.

    Raises
    ------
    TypeError
        When an option is unknown or has the wrong type.
    ValueError
        When an option is out of range (see :class:`TemperingOptions`), a replica's MH refuses its
        options for the target, or the target is a variable gap.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import ChainStreams, ReplicaMH, initial_tokens
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]C")
    >>> kernel = ReplicaMH(target, replicas=3)
    >>> streams = ChainStreams(0, 2)
    >>> state = kernel.init(initial_tokens(kernel, 2, streams, "uniform"))
    >>> state, info = kernel.step(state, streams)
    >>> state.replica_tokens.shape, info.is_swap.shape
    (torch.Size([2, 3, 6]), torch.Size([2]))
    """

    name = "replica-mh"
    Options = TemperingOptions
    State = ReplicaState
    Info = ReplicaInfo
    capabilities = Capabilities(log_factor=True, gibbs=False, complete_start=True, exact_matrix=False)
    older_records = LIBRARY_RECORDS  # the library proposal came with 0.6
    options: TemperingOptions

    @classmethod
    def anneals(cls) -> bool:
        """Never: its options declare a schedule (MH's proposals), which it refuses.

        Returns
        -------
        bool
            False.
        """
        return False

    def bind_target(self, target: Target) -> None:
        """Build each replica's MH kernel: random scan on the target tempered by the replica's factor.

        Parameters
        ----------
        target : Target
            The kernel's target (replica 0's; replica ``k``'s is its
            :class:`~mlm_ppl.models.TemperedTarget` at factor ``replica_spacing**k``).

        Raises
        ------
        ValueError
            When a ``temperature_schedule`` is given, or a replica's MH refuses its options for
            the target.
        """
        o = self.options
        if o.temperature_schedule is not None:  # one replica is MH, but this kernel never anneals: it would drop it
            raise ValueError(
                "kernel 'replica-mh' samples its target and never anneals; for an annealing schedule use kernel "
                "'mh' or 'surrogate-mh'"
            )
        self.factors = o.factors()
        self.kernels = [
            MetropolisHastings(
                target if t == 1 else TemperedTarget(target, t),
                scan="random",
                block_size=o.block_size,
                p_unmask=o.p_unmask,
                unmask_size=o.unmask_size,
                proposal_temperature=None if o.proposal_temperature is None else o.proposal_temperature * t,
                top_k=o.top_k,
                top_p=o.top_p,
                library=o.library,
                library_weight=o.library_weight,
                anneal_terms=o.anneal_terms,
            )
            for t in self.factors
        ]
        self.proposal_copies = torch.zeros(0, dtype=torch.long)  # (C,) of the last step, all replicas'

    def evaluations_per_step(self) -> float:
        """At most how much work one step does for one chain, in full evaluations of the target.

        A local step evaluates every replica's proposal; an exchange evaluates nothing.

        Returns
        -------
        float
            :meth:`TemperingOptions.local_steps` times one evaluation plus the proposal's masked
            copies (in evaluations of the target).
        """
        return self.options.local_steps() * (1 + self.kernels[0].proposal_cost() / max(1, self.target.num_free))

    def proposal_cost(self) -> float:
        """Masked copies one step's proposals read per chain, on average, over its replicas.

        Returns
        -------
        float
            :meth:`TemperingOptions.local_steps` times one replica's MH proposal cost.
        """
        return self.options.local_steps() * self.kernels[0].proposal_cost()

    # -- state
    def init(self, tokens: Tensor) -> ReplicaState:
        """The state of chains starting at ``tokens``, every replica of a chain at that chain's tokens.

        One evaluation: the energy does not depend on the temperature.

        Parameters
        ----------
        tokens : torch.Tensor
            Complete starting states, shape ``(C, L)``.

        Returns
        -------
        ReplicaState
            The ``C`` chains, each with ``K`` replicas at its tokens, at step 0.

        Raises
        ------
        TypeError
            When ``tokens`` is not a tensor.
        ValueError
            When ``tokens`` are not ``(C, L)`` states of the target.
        """
        tokens = check_states(self.target, tokens)
        ev = self.target.evaluate(tokens)
        K = len(self.kernels)
        return ReplicaState(
            tokens,
            ev.energy,
            ev.log_factor,
            tokens[:, None].expand(-1, K, -1).clone(),
            ev.energy[:, None].expand(-1, K).clone(),
            ev.log_factor[:, None].expand(-1, K).clone(),
            ev.cond_logits[:, None].expand(-1, K, -1, -1).clone(),
            0,
        )

    def with_log_factor(self, state: ReplicaState, log_factor: Tensor) -> ReplicaState:
        """Refused: replica exchange does not sample a log-factor inside :class:`~mlm_ppl.MLMGibbs`.

        Its replicas at higher temperatures hold states whose log-factor a Gibbs update does not
        give.

        Parameters
        ----------
        state : ReplicaState
            The chains' state.
        log_factor : torch.Tensor
            New log-factors, shape ``(C,)``.

        Raises
        ------
        TypeError
            Always.
        """
        raise TypeError(
            "replica exchange holds states at higher temperatures whose log-factor a Gibbs update does not give; "
            "inside MLMGibbs leave out replicas (kernel 'mh' or 'surrogate-mh' without replicas)"
        )

    def _replica(self, state: ReplicaState, k: int, rows: Tensor) -> MHState:
        empty = torch.empty(0, dtype=torch.long)
        return MHState(
            state.replica_tokens[rows, k],
            state.replica_energy[rows, k],
            state.replica_log_factor[rows, k],
            state.cond_logits[rows, k],
            state.step,
            empty,
        )

    # -- one step
    def step(self, state: ReplicaState, streams: ChainStreams) -> tuple[ReplicaState, ReplicaInfo]:
        """One step of every chain: an exchange of neighbouring replicas, or one MH step of every replica.

        Per chain, with probability ``p_swap`` an exchange of a uniformly chosen pair of
        neighbouring replicas, otherwise one MH step of every replica; chain ``c`` draws from
        ``streams`` row ``c`` only.

        Parameters
        ----------
        state : ReplicaState
            The chains' state.
        streams : ChainStreams
            One random stream per chain.

        Returns
        -------
        state : ReplicaState
            The new state.
        info : ReplicaInfo
            The step's statistics.
        """
        C, K = state.replica_tokens.shape[:2]
        tokens, energy = state.replica_tokens.clone(), state.replica_energy.clone()
        factor, cond = state.replica_log_factor.clone(), state.cond_logits.clone()
        swap = streams.rand((C,)) < self.options.p_swap if K > 1 else torch.zeros(C, dtype=torch.bool)
        is_accepted = torch.zeros(C, dtype=torch.bool)
        rate = torch.zeros(C)
        evaluated = torch.zeros(C, dtype=torch.long)
        self.proposal_copies = torch.zeros(C, dtype=torch.long)
        local = (~swap).nonzero().flatten()
        if local.numel():
            sub = streams.subset(local.tolist())
            for k, kernel in enumerate(self.kernels):
                new, moved = kernel.step(self._replica(state, k, local), sub)
                tokens[local, k], energy[local, k], factor[local, k], cond[local, k] = (
                    new.tokens,
                    new.energy,
                    new.log_factor,
                    new.cond_logits,
                )
                evaluated[local] += moved.evaluated.long()
                self.proposal_copies[local] += kernel.proposal_copies
                if k == 0:
                    is_accepted[local], rate[local] = moved.is_accepted, moved.acceptance_rate.float()
        exchanges = swap.nonzero().flatten()
        if exchanges.numel():
            sub = streams.subset(exchanges.tolist())
            j = sub.randint(K - 1)  # (n,) the lower replica of each pair
            log_a = self._swap_ratio(energy[exchanges, j], energy[exchanges, j + 1], factor[exchanges, j],
                                     factor[exchanges, j + 1], j)  # fmt: skip
            ok = accept(log_a, sub)
            is_accepted[exchanges], rate[exchanges] = ok, acceptance_probability(log_a).float()
            rows, lo = exchanges[ok], j[ok]
            for field in (tokens, energy, factor, cond):
                a, b = field[rows, lo].clone(), field[rows, lo + 1].clone()
                field[rows, lo], field[rows, lo + 1] = b, a
        new_state = ReplicaState(tokens[:, 0], energy[:, 0], factor[:, 0], tokens, energy, factor, cond, state.step + 1)
        info = ReplicaInfo(
            lp=log_density(energy[:, 0], factor[:, 0], self.target.temperature),
            is_accepted=is_accepted,
            acceptance_rate=rate,
            n_changed=(tokens[:, 0] != state.tokens).sum(-1),
            evaluated=evaluated,
            is_swap=swap,
        )
        return new_state, info

    def _swap_ratio(
        self, energy_lo: Tensor, energy_hi: Tensor, factor_lo: Tensor, factor_hi: Tensor, lo: Tensor
    ) -> Tensor:
        """The exchange's MH log ratio for pairs of replicas ``(lo, lo + 1)`` ``(n,)`` holding states of
        these energies and log-factors (float64): the one formula of :meth:`step` and
        :meth:`replica_matrix`. The log-factors only change places; a state of density 0 stays where
        it is (-inf)."""
        T = self.target.temperature
        temps = torch.tensor([T * t for t in self.factors], dtype=torch.float64)
        log_a = (energy_lo.double() - energy_hi.double()) * (1 / temps[lo] - 1 / temps[lo + 1])
        feasible = (factor_lo > -math.inf) & (factor_hi > -math.inf)
        return torch.where(feasible, log_a, -math.inf)

    # -- exact transition matrix over the joint states (tiny targets)
    def replica_matrix(self) -> tuple[Tensor, Tensor]:
        """The exact matrix of one step over every joint state of a tiny target, and the joint law.

        The joint states ``(x_0, .., x_{K-1})`` run over the target's ``S`` states each
        (row-major, ``x_0`` slowest: index ``sum_k i_k S**(K-1-k)``, ``joint_index``); the
        matrix is built from the kernels' own code.

        Returns
        -------
        matrix : torch.Tensor
            Shape ``(S**K, S**K)``, float64: one step's exact transition matrix.
        log_probs : torch.Tensor
            Shape ``(S**K,)``: the joint law's log probabilities, whose marginal over ``x_0`` is
            the target; normalised with ``replicas > 1``, and with one replica the target's
            unnormalised log density.
        """
        states = enumerate_states(self.target)
        S, K = states.shape[0], len(self.kernels)
        local = transition_matrix(self.kernels[0], states)
        for k in range(1, K):
            local = torch.kron(local, transition_matrix(self.kernels[k], states))
        joint_lp = (self._log_probs(states, 0)[:, None] + self.hot_log_probs(states)[None, :]).flatten()
        if K == 1:
            return local, joint_lp
        ev = self.target.evaluate(states)
        energy, factor = ev.energy, ev.log_factor
        digits = torch.stack(torch.meshgrid(*[torch.arange(S)] * K, indexing="ij"), -1).reshape(-1, K)  # (S**K, K)
        weights = S ** torch.arange(K - 1, -1, -1)
        rows = torch.arange(S**K)
        exchange = torch.zeros((S**K, S**K), dtype=torch.float64)
        for j in range(K - 1):
            lo, hi = digits[:, j], digits[:, j + 1]
            swapped = digits.clone()
            swapped[:, j], swapped[:, j + 1] = hi, lo
            dest = (swapped * weights).sum(-1)
            a = acceptance_probability(
                self._swap_ratio(energy[lo], energy[hi], factor[lo], factor[hi], torch.full((S**K,), j))
            )
            exchange.index_put_((rows, dest), a / (K - 1), accumulate=True)
            exchange.index_put_((rows, rows), (1 - a) / (K - 1), accumulate=True)
        p = self.options.p_swap
        return (1 - p) * local + p * exchange, torch.log_softmax(joint_lp, 0)

    def hot_log_probs(self, states: Tensor) -> Tensor:
        """The hot replicas' joint unnormalised log density over every joint state of replicas 1 .. K-1.

        Parameters
        ----------
        states : torch.Tensor
            Every state of the target, shape ``(S, L)`` (as
            :func:`~mlm_ppl.inference.exact.enumerate_states` gives them).

        Returns
        -------
        torch.Tensor
            Shape ``(S**(K-1),)``, float64 (``[0.]`` without hot replicas), ordered as
            :meth:`replica_matrix` orders them.
        """
        hot = torch.zeros(1, dtype=torch.float64)
        for k in range(1, len(self.kernels)):
            hot = (hot[:, None] + self._log_probs(states, k)[None, :]).flatten()
        return hot

    def _log_probs(self, states: Tensor, k: int) -> Tensor:
        """``(S,)`` replica ``k``'s unnormalised log density of every state."""
        ev = self.kernels[k].target.evaluate(states)
        return self.kernels[k].log_density(ev.energy, ev.log_factor).double()


def joint_index(states: Tensor, target: Target, replicas: int) -> Any:
    """The row of joint states in :meth:`ReplicaMH.replica_matrix`.

    Parameters
    ----------
    states : torch.Tensor
        Joint states, shape ``(N, K, L)``.
    target : Target
        The target the replicas sample.
    replicas : int
        ``K``.

    Returns
    -------
    torch.Tensor
        Each joint state's row, long, shape ``(N,)``.
    """
    index = state_index(target)
    S = enumerate_states(target).shape[0]
    weights = S ** torch.arange(replicas - 1, -1, -1)
    N = states.shape[0]
    return (index(states.reshape(N * replicas, -1)).reshape(N, replicas) * weights).sum(-1)
