"""What every kernel shares: the kernel contract, the one accept, proposal log-probabilities,
scans over the free positions, starting states and annealing.

A kernel holds configuration only. ``init(tokens) -> state`` and
``step(state, streams) -> (state, info)``, with states and infos as NamedTuples; chains are
the leading batch dimension of every tensor, so ``C`` chains advance in one batched forward
pass, while each draws its random numbers from its own stream
(:class:`~mlm_ppl.inference.streams.ChainStreams`). A kernel moves the states of a
:class:`~mlm_ppl.models.Target` and relies on nothing else of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

from .._checks import MIN_TEMPERATURE, check_choice, check_count
from ..models.gap_target import GapTarget
from ..models.target import Target, log_density
from .annealing import GeometricAnnealing
from .spec import KernelBase
from .starts import check_start, repair_start
from .streams import ChainStreams

__all__ = [
    "SCANS",
    "PARALLEL_SCANS",
    "INITS",
    "Kernel",
    "StepInfo",
    "accept",
    "acceptance_probability",
    "mh_log_ratio",
    "proposal_log_probs",
    "sample_tokens",
    "select_sites",
    "num_blocks",
    "check_states",
    "check_init",
    "fill_template",
    "fill_gap",
    "start_lengths",
    "initial_tokens",
    "geometric_annealing",
    "annealed_log_density",
    "scheduled_log_density",
    "ANNEAL_TERMS",
    "state_rows",
    "cat_states",
    "choose_rows",
]

SCANS = ("random", "random_sweep", "left_to_right")
"""How a kernel picks the free positions to update: one uniformly random block per step, a
fresh random permutation per sweep, or left to right."""
PARALLEL_SCANS = ("parallel_masked", "parallel_unmasked")
"""Pseudo-Gibbs only: every free position redrawn in one step, each from its own singly-masked
conditional (``parallel_masked``), or all from one forward pass of the current, unmasked
sequence (``parallel_unmasked``, bert-gen's ``parallel_generation``)."""

INITS = ("sample", "greedy", "uniform")
"""How the free positions are first filled (:func:`fill_template`)."""


class StepInfo(Protocol):
    """What every kernel's Info reports about one step of C chains.

    A protocol: each kernel's Info (a NamedTuple such as :class:`~mlm_ppl.inference.MHInfo`) has
    these fields, and :func:`~mlm_ppl.inference.step_stats` reads them. It is not instantiated.

    Parameters
    ----------
    *args, **kwargs
        None: a protocol cannot be instantiated (a TypeError).
    """

    @property
    def lp(self) -> Tensor:
        """``(C,)`` log target density after the step, NaN where the kernel does not compute it."""
        ...

    @property
    def n_changed(self) -> Tensor:
        """``(C,)`` positions the step changed."""
        ...


Kernel = KernelBase
"""The kernel contract: :class:`~mlm_ppl.inference.spec.KernelBase`, which every kernel subclasses,
declaring its name, ``Options``, ``State``, ``Info`` and ``capabilities`` once (:mod:`.spec`)."""


# ---------------------------------------------------------------------- accept and proposals
def accept(log_ratio: Tensor, streams: ChainStreams) -> Tensor:
    """The one Metropolis-Hastings accept test of every kernel, one uniform draw per chain.

    Accepts where ``log(u) < log_ratio`` with ``u ~ U[0, 1)``, ``u`` of chain ``c`` from its
    stream. A NaN ratio rejects; ``-inf`` rejects; a ratio ``>= 0`` always accepts.

    Parameters
    ----------
    log_ratio : torch.Tensor
        Shape ``(C, ...)``: the log acceptance ratios, chains first.
    streams : ChainStreams
        The chains' random streams (:class:`~mlm_ppl.inference.ChainStreams`), one per row of
        ``log_ratio``.

    Returns
    -------
    torch.Tensor
        Bool, the shape of ``log_ratio``: True where the move is accepted.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.inference import ChainStreams, accept
    >>> accept(torch.tensor([0.0, float("-inf"), float("nan")]), ChainStreams(0, 3))
    tensor([ True, False, False])
    """
    log_u = streams.rand(log_ratio.shape).log()
    return log_u < log_ratio  # NaN compares False: reject


def acceptance_probability(log_ratio: Tensor) -> Tensor:
    """``min(1, exp(log_ratio))``, 0 for a NaN ratio (which :func:`accept` rejects): the
    ``acceptance_rate`` statistic and the exact matrices' acceptance, written once."""
    return torch.nan_to_num(log_ratio.clamp(max=0).exp(), nan=0.0)


def mh_log_ratio(lp_new: Tensor, lp_old: Tensor, log_correction: Tensor, changed: Tensor) -> Tensor:
    """The log acceptance ratio of moves ``x -> x'``, defined where a state has density 0.

    ``lp_new - lp_old + log_correction`` (the proposal's ``log q(x|x') - log q(x'|x)``, or
    surrogate-MH's surrogate term) where both states have density > 0; where one has density 0
    (``lp = -inf``: it breaks a hard rule):

    * a move from such a state to one of density > 0 is always accepted (``+inf``);
    * a move to a state of density 0 is always rejected (``-inf``), from any state, and a
      proposal equal to a state of density 0 (``changed`` False) is rejected too: the chain
      stayed off the target's support, and its statistics say so;
    * a proposal equal to a state of density > 0 is accepted (``0``).

    Rows of states of density 0 carry no weight in ``pi P``, so every kernel's exact transition
    matrix is unchanged on the states of density > 0 (and there is never a NaN ratio, from
    ``-inf - (-inf)``, that :func:`accept` rejects while the statistics count something else).
    """
    ok_old, ok_new = lp_old > float("-inf"), lp_new > float("-inf")
    ratio = lp_new - lp_old + log_correction  # NaN where both are -inf: replaced below
    inf = torch.full_like(ratio, float("inf"))
    moved = torch.where(ok_old & ok_new, ratio, torch.where(ok_new, inf, -inf))
    return torch.where(changed, moved, torch.where(ok_old, torch.zeros_like(ratio), -inf))


def proposal_log_probs(
    logits: Tensor,
    allowed: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Tensor:
    """Log-probabilities of a (possibly truncated) MLM proposal, ``-inf`` outside its support.

    The one way every kernel restricts its proposals: renormalised over the ``allowed`` tokens of
    each site (its alphabet, :attr:`~mlm_ppl.models.Target.allowed`), then truncated. A kernel
    takes both ``log q(x'_B)`` and ``log q(x_B)`` from the result, so its Hastings ratio is that
    of the restricted proposal.

    Parameters
    ----------
    logits : torch.Tensor
        Shape ``(..., V)``: MLM logits.
    allowed : torch.Tensor
        Bool, shape ``(..., V)``, broadcastable to ``logits``: the tokens each site may be given (the
        target's ``allowed`` rows of the proposed sites; never a special token). A ``(V,)``
        mask (e.g. ``ordinary_mask``) applies to every site.
    temperature : float, optional
        ``q ∝ exp(logit / temperature)`` (default 1).
    top_k : int or None, optional
        Keep the ``top_k`` most likely allowed tokens (ties at the boundary kept; all of them
        where fewer are allowed). None (the default): no such cut.
    top_p : float or None, optional
        Keep the smallest set of tokens whose probability reaches ``top_p`` (nucleus), after
        ``top_k``. None (the default) or a value >= 1: no such cut. Tokens cut by either get ``-inf``, so a
        move whose reverse needs one of them is rejected.

    Returns
    -------
    torch.Tensor
        Shape ``(..., V)``: log-probabilities that sum to 1 over each site's kept tokens,
        ``-inf`` elsewhere.

    Examples
    --------
    >>> import torch
    >>> from mlm_ppl.inference import proposal_log_probs
    >>> logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    >>> allowed = torch.tensor([True, True, True, False])
    >>> logq = proposal_log_probs(logits, allowed, top_k=2)
    >>> logq.isfinite()
    tensor([[ True,  True, False, False]])
    >>> round(float(logq.exp().sum()), 4)
    1.0
    """
    lg = logits / temperature
    lg = lg.masked_fill(~allowed.to(lg.device), float("-inf"))
    if top_k is not None:
        k = min(int(top_k), lg.shape[-1])  # a site with fewer allowed tokens: its k-th is -inf, all kept
        kth = lg.topk(k, dim=-1).values[..., -1:]
        lg = lg.masked_fill(lg < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        probs = torch.softmax(lg, -1)
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
        keep_sorted = before < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        lg = lg.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(lg, -1)


def sample_tokens(log_probs: Tensor, streams: ChainStreams) -> Tensor:
    """One categorical draw per row of ``log_probs`` ``(C, ..., V)`` -> ``(C, ...)``, chain ``c``'s
    from its stream."""
    return streams.categorical(log_probs.exp())


# ---------------------------------------------------------------------- scans
def num_blocks(num_free: int, block_size: int) -> int:
    """Blocks of ``block_size`` in one sweep over ``num_free`` positions."""
    return -(-num_free // block_size)


def select_sites(
    scan: str, step: int, order: Tensor, num_chains: int, num_free: int, block_size: int, streams: ChainStreams
) -> tuple[Tensor, Tensor]:
    """Free-position indices ``(C, b)`` to update at ``step``, and the sweep order to keep.

    ``order`` ``(C, F)`` is the current random-sweep permutation (empty for the other scans).
    """
    n_blocks = num_blocks(num_free, block_size)
    j = step % n_blocks
    if scan == "left_to_right":
        sites = torch.arange(j * block_size, min(num_free, (j + 1) * block_size))
        return sites.expand(num_chains, -1), order
    if scan == "random":
        keys = streams.rand((num_chains, num_free))
        return keys.argsort(-1)[:, :block_size], order
    # random_sweep: a fresh random permutation per chain at the start of every sweep
    if j == 0 or order.numel() == 0:
        order = streams.rand((num_chains, num_free)).argsort(-1)
    return order[:, j * block_size : (j + 1) * block_size], order


# ---------------------------------------------------------------------- starting states
def check_states(target: Target, tokens: Any) -> Tensor:
    """Complete states ``(C, L)`` of ``target`` on the CPU, or a clear error."""
    if not isinstance(tokens, Tensor):
        raise TypeError(f"initial tokens must be a (C, L) torch.long tensor, got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(f"initial tokens must have shape (C, L), got {tuple(tokens.shape)}")
    target.validate_tokens(tokens)
    return tokens.cpu()


def check_init(method: str) -> str:
    """A starting-state method name: one of :data:`INITS`."""
    return check_choice(method, "init", INITS)


def fill_template(target: Target, num_chains: int, streams: ChainStreams, method: str = "sample") -> Tensor:
    """Complete starting states ``(C, L)``: fill the free positions left to right from the MLM.

    Each position is drawn (``"sample"``) or taken as the argmax (``"greedy"``) from the MLM
    conditional with the positions to its right still masked: one forward per free position,
    all chains batched. These fill-in steps are warm-up, never MH draws. ``"uniform"`` draws
    ordinary tokens uniformly (no forward). Every position is filled within its alphabet
    (the target's ``allowed``: its ordinary tokens, narrowed by a constraint spec's alphabets);
    pattern rules are :func:`initial_tokens`' concern.

    Parameters
    ----------
    target : Target
        The target whose template is filled (a :class:`~mlm_ppl.MaskedLMDistribution` or any
        :class:`~mlm_ppl.models.Target`).
    num_chains : int
        Chains ``C``: one filled state each.
    streams : ChainStreams
        The chains' random streams (:class:`~mlm_ppl.inference.ChainStreams`), ``C`` of them.
    method : {"sample", "greedy", "uniform"}, optional
        How each free position is filled (default ``"sample"``; :data:`~mlm_ppl.inference.INITS`).

    Returns
    -------
    torch.Tensor
        Shape ``(C, L)``, long: the template with every free position filled.

    Raises
    ------
    ValueError
        Where ``method`` is not one of :data:`~mlm_ppl.inference.INITS` or ``num_chains`` is
        below 1.
    TypeError
        Where ``num_chains`` is not an integer.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import ChainStreams, fill_template
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> mlm = tiny_residue_bert("ACDE", seed=1)
    >>> target = MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]")
    >>> tokens = fill_template(target, 2, ChainStreams(0, 2), "uniform")
    >>> tokens.shape
    torch.Size([2, 7])
    >>> bool((tokens == mlm.mask_id).any())
    False
    """
    check_init(method)
    C = check_count(num_chains, "num_chains")
    tokens = target.template.expand(C, -1).clone()
    alphabets = target.allowed  # (F, V): the ordinary tokens, narrowed by any alphabets
    if method == "uniform":
        logq = proposal_log_probs(torch.zeros(C, target.num_free, target.vocab_size), alphabets.cpu())
        return tokens.scatter(1, target.free_positions.expand(C, -1), sample_tokens(logq, streams))
    for k, p in enumerate(target.free_positions.tolist()):
        logits = target.site_logits(tokens, torch.full((C, 1), p))[:, 0]  # (C, V)
        logq = proposal_log_probs(logits, alphabets[k].to(logits.device))
        tokens[:, p] = logq.argmax(-1) if method == "greedy" else sample_tokens(logq, streams)
    return tokens


def initial_tokens(kernel: Kernel, num_chains: int, streams: ChainStreams, init: str | Tensor) -> Tensor:
    """The tokens ``(C, L)`` that ``kernel.init`` starts from, each breaking no hard rule of the target.

    Given tokens are used as they are, and refused (a ValueError naming the chain and the rule)
    when one breaks a rule (``mlm_ppl.inference.starts.check_start``); otherwise the
    template is filled with :func:`fill_template` (``init`` names the method) and a fill that
    breaks a rule is repaired (``mlm_ppl.inference.starts.repair_start``, from the chain's
    stream), or the run stops here, before any step. A variable gap's chains start at lengths
    spread over its prior, each filled and repaired at its own length. A kernel that does not need
    a complete start gets the masked template.

    Parameters
    ----------
    kernel : KernelBase
        The kernel whose target is filled (:class:`~mlm_ppl.inference.KernelBase`); its
        ``capabilities.complete_start`` says whether it needs a complete start.
    num_chains : int
        Chains ``C``.
    streams : ChainStreams
        The chains' random streams (:class:`~mlm_ppl.inference.ChainStreams`), ``C`` of them.
    init : {"sample", "greedy", "uniform"} or torch.Tensor
        How the free positions are filled (:func:`fill_template`), or starting tokens of shape
        ``(C, L)``.

    Returns
    -------
    torch.Tensor
        Shape ``(C, L)``, long: the starting tokens (the masked template for a kernel that does
        not need a complete start).

    Raises
    ------
    ValueError
        Where ``num_chains`` is below 1, ``init`` names no method or gives tokens of another
        number of chains or shape, or tokens (given, or filled and not repaired) break a hard
        rule of the target.
    TypeError
        Where ``num_chains`` is not an integer or given tokens are not a tensor of token ids.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import ChainStreams, initial_tokens, make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> kernel = make_kernel("mh", MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK][MASK]"))
    >>> initial_tokens(kernel, 2, ChainStreams(0, 2), "sample").shape
    torch.Size([2, 7])
    """
    C = check_count(num_chains, "num_chains")
    if isinstance(init, Tensor):
        if init.dim() == 2 and init.shape[0] != C:
            raise ValueError(f"init has {init.shape[0]} chains but num_chains={C}")
        if kernel.capabilities.complete_start:
            check_start(kernel.target, check_states(kernel.target, init))
        return init
    if not kernel.capabilities.complete_start:
        check_init(init)
        return kernel.target.template.expand(C, -1).clone()
    if isinstance(kernel.target, GapTarget):
        return fill_gap(kernel.target, C, streams, init)
    return repair_start(kernel.target, fill_template(kernel.target, C, streams, init), streams)


def start_lengths(target: GapTarget, num_chains: int) -> list[int]:
    """The gap length each chain of a variable gap starts at: the prior's lengths spread evenly
    from the longest (chain 0) to the shortest (the last chain; one chain starts at the longest), so
    that the chains come to the length marginal from both ends and the R-hat of ``length`` shows
    whether they met."""
    lengths, C = target.lengths, check_count(num_chains, "num_chains")
    if C == 1:
        return [lengths[-1]]
    return [lengths[round((len(lengths) - 1) * (1 - c / (C - 1)))] for c in range(C)]


def fill_gap(target: GapTarget, num_chains: int, streams: ChainStreams, method: str = "sample") -> Tensor:
    """Padded starting states ``(C, T)`` of a variable gap that break no hard rule: chain ``c`` at
    its :func:`start_lengths` length ``L``, the length-``L`` target's template filled by
    :func:`fill_template` and repaired by :func:`~mlm_ppl.inference.starts.repair_start` at that
    length (so the search never writes a residue into a pad), from the chain's own stream."""
    rows = []
    for c, L in enumerate(start_lengths(target, num_chains)):
        own, stream = target.target(L), streams.subset([c])
        rows.append(target.pad(repair_start(own, fill_template(own, 1, stream, method), stream), L))
    return torch.cat(rows)


ANNEAL_TERMS = ("all", "mlm", "constraints")
"""What an annealing schedule divides by its temperature ``tau``: the whole log density, the MLM
term ``-E/T`` alone, or the log-factor (constraints' experts, likelihood terms) alone."""


def annealed_log_density(
    energy: Tensor, log_factor: Tensor, temperature: float, tau: float | Tensor, terms: str
) -> Tensor:
    """The log density at annealing temperature ``tau``: ``(-E/T + f) / tau`` (``terms="all"``),
    ``-E/(T tau) + f`` (``"mlm"``) or ``-E/T + f/tau`` (``"constraints"``). At ``tau = 1`` every
    form is the target's; as ``tau -> 0`` the chain seeks the mode of the annealed terms. A
    ``tau`` that is not a finite number >= :data:`~mlm_ppl._checks.MIN_TEMPERATURE` (from a schedule:
    any callable, so checked at each step) is a ValueError. ``tau`` may be a tensor, one per state."""
    low, high = (float(tau.min()), float(tau.max())) if isinstance(tau, Tensor) else (tau, tau)
    if not (math.isfinite(high) and low >= MIN_TEMPERATURE):
        raise ValueError(
            f"the annealing schedule gave tau={high if not math.isfinite(high) else low}; it must return a finite "
            f"number >= {MIN_TEMPERATURE:g} "
            "(smaller ones overflow float32 and freeze every chain)"
        )
    if terms == "all":
        return log_density(energy, log_factor, temperature) / tau
    if terms == "mlm":
        return log_density(energy, log_factor, temperature * tau)  # type: ignore[arg-type]  # a tensor: per state
    return log_density(energy, log_factor / tau, temperature)


def scheduled_log_density(
    energy: Tensor,
    log_factor: Tensor,
    temperature: float,
    schedule: Callable[[int], float] | None,
    terms: str,
    step: int | None,
) -> Tensor:
    """The log density a kernel's step ``step`` accepts by: the target's (``-E/T + f``) without a
    ``schedule`` or a ``step``, else its annealed form at ``tau = schedule(step)``
    (:func:`annealed_log_density`). The one place MH and surrogate-MH read their schedule."""
    if step is None or schedule is None:
        return log_density(energy, log_factor, temperature)
    return annealed_log_density(energy, log_factor, temperature, float(schedule(step)), terms)


def geometric_annealing(start: float, end: float, num_steps: int) -> GeometricAnnealing:
    """A temperature schedule ``step -> tau`` from ``start`` to ``end``, geometric, then constant.

    The schedule goes from ``start`` to ``end`` geometrically over ``num_steps`` steps, then stays
    at ``end`` (Goyal et al. 2021, section 7: anneal towards the mode); a
    :class:`~mlm_ppl.inference.GeometricAnnealing`, which a run records.

    Parameters
    ----------
    start : float
        The temperature at step 0.
    end : float
        The temperature from step ``num_steps`` on.
    num_steps : int
        Steps from ``start`` to ``end`` (0: ``end`` from the first step).

    Returns
    -------
    GeometricAnnealing
        The schedule, callable as a kernel's ``temperature_schedule``.

    Raises
    ------
    ValueError
        Where ``start`` or ``end`` is not a finite number >= 1e-6 (``MIN_TEMPERATURE``) or
        ``num_steps`` is below 0.
    TypeError
        Where ``start`` or ``end`` is not a number or ``num_steps`` not an integer.

    Examples
    --------
    >>> from mlm_ppl.inference import geometric_annealing
    >>> schedule = geometric_annealing(1.0, 0.1, 10)
    >>> schedule(0), schedule(10), schedule(50)
    (1.0, 0.1, 0.1)
    >>> round(schedule(5), 3)
    0.316
    """
    return GeometricAnnealing(start, end, num_steps)


# ---------------------------------------------------------------------- rows of a kernel's state
def _per_chain(field: Any, C: int) -> bool:
    """Whether a state's field holds one row per chain (the tokens, energies, conditionals), not a
    count or an empty sweep order."""
    return isinstance(field, Tensor) and field.dim() > 0 and field.shape[0] == C


def state_rows(state: Any, c: int, C: int) -> Any:
    """Chain ``c`` of an inner state (a NamedTuple of C chains) as a state of one chain."""
    return type(state)(*[f[c : c + 1] if _per_chain(f, C) else f for f in state])


def cat_states(states: list[Any]) -> Any:
    """One-chain inner states joined into one state of their chains, in order."""
    first = states[0]
    return type(first)(*[torch.cat(fields) if _per_chain(fields[0], 1) else fields[0] for fields in zip(*states)])


def choose_rows(take: Tensor, new: Any, old: Any) -> Any:
    """Per chain, the inner state ``new`` where ``take``, else ``old`` (the rest of ``new``: its step)."""
    C = take.shape[0]
    return type(new)(
        *[torch.where(take.reshape(C, *[1] * (a.dim() - 1)), a, b) if _per_chain(a, C) else a for a, b in zip(new, old)]
    )
