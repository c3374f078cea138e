"""MCMC kernels over token sequences: Metropolis-Hastings, pseudo-Gibbs, mask-predict.

A kernel holds configuration only. ``init(tokens) -> state`` and
``step(state, generator) -> (state, info)``, with states and infos as NamedTuples. Chains are
the leading batch dimension of every tensor: ``C`` chains advance in one batched forward pass.

A *target* is a :class:`mlm_ppl.MaskedLMDistribution` (or anything with the same
``evaluate`` / ``site_logits`` interface, such as the table fakes in :mod:`mlm_ppl.testing`,
or a :class:`ConstrainedTarget` that adds log-factors).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from ..models.distribution import Evaluation

__all__ = [
    "SCANS",
    "INITS",
    "check_count",
    "check_init",
    "accept",
    "proposal_log_probs",
    "ConstrainedTarget",
    "MHState",
    "MHInfo",
    "MetropolisHastings",
    "PseudoGibbsState",
    "PseudoGibbs",
    "MaskPredictState",
    "MaskPredict",
    "fill_template",
    "geometric_annealing",
]

SCANS = ("random", "random_sweep", "left_to_right")
INITS = ("sample", "greedy", "uniform")
_PG_SCANS = SCANS + ("parallel",)


def accept(log_ratio: Tensor, generator: torch.Generator) -> Tensor:
    """The one Metropolis-Hastings accept: ``log(u) < log_ratio`` with ``u ~ U[0, 1)``.

    A NaN ratio rejects; ``-inf`` rejects; a ratio ``>= 0`` always accepts.
    """
    log_u = torch.rand(log_ratio.shape, generator=generator).log()
    return log_u < log_ratio  # NaN compares False: reject


def proposal_log_probs(
    logits: Tensor,
    ordinary: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Tensor:
    """Log-probabilities of a (possibly truncated) MLM proposal, ``-inf`` outside its support.

    Parameters
    ----------
    logits : Tensor
        ``(..., V)`` MLM logits.
    ordinary : Tensor
        ``(V,)`` bool: special tokens are never proposed.
    temperature : float
        ``q ∝ exp(logit / temperature)``.
    top_k, top_p : optional
        Keep the ``top_k`` most likely tokens (ties at the boundary kept), and/or the smallest
        set whose probability reaches ``top_p`` (nucleus). Tokens outside get ``-inf``, so a
        move whose reverse needs one of them is rejected.
    """
    lg = logits / temperature
    lg = lg.masked_fill(~ordinary.to(lg.device), float("-inf"))
    if top_k is not None:
        k = min(int(top_k), int(ordinary.sum()))
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


def _sample(log_probs: Tensor, generator: torch.Generator) -> Tensor:
    """One categorical draw per row of ``log_probs`` (..., V) -> (...)."""
    flat = log_probs.reshape(-1, log_probs.shape[-1]).exp()
    return torch.multinomial(flat, 1, generator=generator).reshape(log_probs.shape[:-1])


class ConstrainedTarget:
    """A target with extra log-density terms: ``log p(x) = -E(x)/T + log_factor(x)``.

    Parameters
    ----------
    base : MaskedLMDistribution
    log_factor : callable
        ``tokens (N, L) -> (N,)`` extra log-density (constraints, likelihood terms that depend
        on the tokens); ``-inf`` forbids a state.
    """

    def __init__(self, base, log_factor: Callable[[Tensor], Tensor]) -> None:
        if not callable(log_factor):
            raise TypeError("log_factor must be a callable tokens (N, L) -> (N,)")
        self.base = base
        self.log_factor = log_factor

    def __getattr__(self, name):  # template, free_positions, temperature, site_logits ...
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def evaluate(self, tokens: Tensor) -> Evaluation:
        ev = self.base.evaluate(tokens)
        extra = torch.as_tensor(self.log_factor(tokens), dtype=torch.float32).reshape(-1)
        if extra.shape != ev.energy.shape:
            raise ValueError(f"log_factor must return shape ({tokens.shape[0]},), got {tuple(extra.shape)}")
        return ev._replace(log_factor=ev.log_factor + extra)


# ---------------------------------------------------------------------- scans
def _n_blocks(num_free: int, block_size: int) -> int:
    return -(-num_free // block_size)


def _check_scan(scan: str, allowed: tuple[str, ...]) -> str:
    if scan not in allowed:
        raise ValueError(f"unknown scan {scan!r}; choose one of {', '.join(map(repr, allowed))}")
    return scan


def check_count(value, name: str, minimum: int = 1) -> int:
    """An integer ``>= minimum`` (not a bool), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_init(method: str) -> str:
    """A starting-state method name: one of :data:`INITS`."""
    if method not in INITS:
        raise ValueError(f"unknown init {method!r}; choose 'sample', 'greedy' or 'uniform'")
    return method


def _check_top_p(top_p):
    if top_p is None:
        return None
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")
    return float(top_p)


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return float(value)


def _select_sites(
    scan: str, step: int, order: Tensor, num_chains: int, num_free: int, block_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Free-position indices ``(C, b)`` to update at this step, and the sweep order to keep."""
    n_blocks = _n_blocks(num_free, block_size)
    j = step % n_blocks
    if scan == "left_to_right":
        sites = torch.arange(j * block_size, min(num_free, (j + 1) * block_size))
        return sites.expand(num_chains, -1), order
    if scan == "random":
        keys = torch.rand((num_chains, num_free), generator=generator)
        return keys.argsort(-1)[:, :block_size], order
    # random_sweep: a fresh random permutation per chain at the start of every sweep
    if j == 0 or order.numel() == 0:
        order = torch.rand((num_chains, num_free), generator=generator).argsort(-1)
    return order[:, j * block_size : (j + 1) * block_size], order


def _all_blocks(scan: str, num_free: int, block_size: int) -> list[tuple[float, list[tuple[int, ...]]]]:
    """Every sequence of blocks one scan cycle can apply, with its probability (for exact matrices)."""
    if scan == "random":
        subsets = list(itertools.combinations(range(num_free), block_size))
        return [(1.0 / len(subsets), [s]) for s in subsets]
    n = _n_blocks(num_free, block_size)
    if scan == "left_to_right":
        return [(1.0, [tuple(range(j * block_size, min(num_free, (j + 1) * block_size))) for j in range(n)])]
    perms = list(itertools.permutations(range(num_free)))
    return [
        (1.0 / len(perms), [tuple(p[j * block_size : (j + 1) * block_size]) for j in range(n)]) for p in perms
    ]


def _block_moves(target, states: Tensor, pos: Tensor, logq: Tensor, index):
    """Every proposal for a block: for each combination of ordinary tokens ``y`` at positions
    ``pos`` (S, b), the float64 ``log q(y)`` (S,) under ``logq`` (S, b, V) and the row of the
    state it leads to (S,). Used by the kernels' exact transition matrices."""
    S = states.shape[0]
    ordinary = target.ordinary_mask.nonzero().flatten().tolist()
    for combo in itertools.product(ordinary, repeat=pos.shape[1]):
        y = torch.tensor(combo).expand(S, -1)
        yield logq.gather(-1, y[..., None]).sum((-1, -2)).double(), index(states.scatter(1, pos, y))


# ---------------------------------------------------------------------- Metropolis-Hastings
class MHState(NamedTuple):
    """State of C Metropolis-Hastings chains.

    ``cond_logits`` are the MLM conditionals of the current tokens at every free position
    (each with only that position masked); they are the next single-site proposals, so an MH
    step costs one pass over the proposed state's masked copies and nothing for the current one.
    """

    tokens: Tensor  # (C, L) long
    energy: Tensor  # (C,) E(x)
    log_factor: Tensor  # (C,) extra log terms
    cond_logits: Tensor  # (C, F, V)
    step: int  # steps taken (scan position, annealing)
    order: Tensor  # (C, F) current random-sweep order (empty otherwise)


class MHInfo(NamedTuple):
    """Per-step statistics of C chains (ArviZ names)."""

    lp: Tensor  # (C,) log target density after the step (at the target temperature)
    is_accepted: Tensor  # (C,) bool
    acceptance_rate: Tensor  # (C,) min(1, exp(log ratio)); 1 for a proposal equal to the state
    n_changed: Tensor  # (C,) positions that changed in this step


class MetropolisHastings:
    """Metropolis-Hastings with MLM-conditional proposals (Goyal, Dyer & Berg-Kirkpatrick 2021).

    **Target**: ``p(x) ∝ exp(-E(x)/T + log_factor(x))`` of the target (a
    :class:`~mlm_ppl.MaskedLMDistribution`, optionally a :class:`ConstrainedTarget`); the energy
    ``E_norm`` or ``E_raw`` is the target's.

    **Proposal**: pick a block ``B`` of free positions (``scan``: uniformly at random, a random
    permutation per sweep, or left to right; ``block_size`` positions). Mask ``B`` in the current
    state ``x`` and propose ``x'_B ~ q(.|x_{\\B}) = prod_{i in B} q_i(x'_i | x_{\\B})``, where
    ``q_i ∝ exp(logit_i / proposal_temperature)`` over ordinary tokens, optionally truncated to
    ``top_k`` / ``top_p``. For ``block_size=1`` the conditional is the cached one of the state.

    **Acceptance**: since ``x_{\\B} = x'_{\\B}``, the reverse proposal uses the same masked context:

        log α = [log p(x') - log p(x)] + [log q(x_B | x_{\\B}) - log q(x'_B | x_{\\B})].

    A truncated proposal gives ``log q(x_B) = -inf`` when the old tokens fall outside the
    truncated set, so such a move is rejected, never silently accepted. The chain is exact for
    its target (tests check the transition matrix by enumeration).

    Parameters
    ----------
    target : MaskedLMDistribution or ConstrainedTarget
    scan : {"random", "random_sweep", "left_to_right"}
    block_size : int
    proposal_temperature : float
    top_k : int, optional
    top_p : float in (0, 1], optional
    temperature_schedule : callable, optional
        ``step -> T``: anneal the target temperature for mode seeking (Goyal et al. section 7);
        the chain then no longer samples ``p``. See :func:`geometric_annealing`.
    """

    def __init__(
        self,
        target,
        *,
        scan: str = "random",
        block_size: int = 1,
        proposal_temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        temperature_schedule: Callable[[int], float] | None = None,
    ) -> None:
        self.target = target
        self.scan = _check_scan(scan, SCANS)
        self.block_size = check_count(block_size, "block_size")
        if self.block_size > target.num_free:
            raise ValueError(
                f"block_size={block_size} is larger than the {target.num_free} free positions of the template"
            )
        self.proposal_temperature = _positive(proposal_temperature, "proposal_temperature")
        self.top_k = None if top_k is None else check_count(top_k, "top_k")
        self.top_p = _check_top_p(top_p)
        if temperature_schedule is not None and not callable(temperature_schedule):
            raise TypeError("temperature_schedule must be a callable step -> temperature")
        self.temperature_schedule = temperature_schedule

    # -- state
    def init(self, tokens: Tensor) -> MHState:
        """Evaluate complete starting states ``(C, L)`` (see :func:`fill_template`)."""
        tokens = _check_states(self.target, tokens)
        ev = self.target.evaluate(tokens)
        return MHState(tokens, ev.energy, ev.log_factor, ev.cond_logits, 0, torch.empty(0, dtype=torch.long))

    def log_density(self, energy: Tensor, log_factor: Tensor, step: int | None = None) -> Tensor:
        """``-E/T + log_factor`` at the target temperature, or the annealed one at ``step``."""
        T = self.target.temperature
        if step is not None and self.temperature_schedule is not None:
            T = float(self.temperature_schedule(step))
        return -energy / T + log_factor

    def _proposal(self, logits: Tensor) -> Tensor:
        return proposal_log_probs(
            logits, self.target.ordinary_mask, temperature=self.proposal_temperature, top_k=self.top_k,
            top_p=self.top_p,
        )

    def _block_logits(self, tokens: Tensor, cond_logits: Tensor, sites: Tensor) -> Tensor:
        """``(C, b, V)`` proposal logits: the cached conditionals for single sites, else one block pass."""
        if sites.shape[1] == 1:
            return cond_logits.gather(1, sites[:, :, None].expand(-1, -1, cond_logits.shape[-1]))
        return self.target.site_logits(tokens, self.target.free_positions[sites])

    # -- one step
    def step(self, state: MHState, generator: torch.Generator) -> tuple[MHState, MHInfo]:
        """One MH update of one block in every chain."""
        tokens = state.tokens
        C = tokens.shape[0]
        sites, order = _select_sites(
            self.scan, state.step, state.order, C, self.target.num_free, self.block_size, generator
        )
        pos = self.target.free_positions[sites]  # (C, b)
        logq = self._proposal(self._block_logits(tokens, state.cond_logits, sites))  # (C, b, V)
        new = _sample(logq, generator)  # (C, b)
        old = tokens.gather(1, pos)
        log_fwd = logq.gather(-1, new[..., None]).sum((-1, -2))
        log_rev = logq.gather(-1, old[..., None]).sum((-1, -2))
        proposed = tokens.scatter(1, pos, new)
        changed = (new != old).any(-1)  # (C,) a proposal equal to the state is a no-op: no forward

        lp_old = self.log_density(state.energy, state.log_factor, state.step)
        lp_new = lp_old.clone()
        if changed.any():
            ev = self.target.evaluate(proposed[changed])
            lp_new[changed] = self.log_density(ev.energy, ev.log_factor, state.step)
        log_ratio = torch.where(changed, lp_new - lp_old + log_rev - log_fwd, torch.zeros(C))
        accepted = accept(log_ratio, generator)
        take = accepted & changed
        energy, factor, cond = state.energy.clone(), state.log_factor.clone(), state.cond_logits.clone()
        if take.any():
            kept = take[changed]  # which evaluated proposals were accepted
            energy[take], factor[take], cond[take] = ev.energy[kept], ev.log_factor[kept], ev.cond_logits[kept]
        new_state = MHState(torch.where(take[:, None], proposed, tokens), energy, factor, cond, state.step + 1, order)
        info = MHInfo(
            lp=self.log_density(new_state.energy, new_state.log_factor),
            is_accepted=accepted,
            acceptance_rate=torch.nan_to_num(log_ratio.clamp(max=0).exp(), nan=0.0),
            n_changed=torch.where(take, (new != old).sum(-1), torch.zeros(C, dtype=torch.long)),
        )
        return new_state, info

    # -- exact transition matrix of one block update (for exact enumeration)
    def block_matrix(self, states: Tensor, evaluation: Evaluation, sites: tuple[int, ...], index) -> Tensor:
        """``(S, S)`` transition matrix of updating the free-position block ``sites``.

        ``states`` ``(S, L)`` are all states, ``evaluation`` their evaluation, ``index`` maps
        states to rows. Uses the same proposal code as :meth:`step`.
        """
        S = states.shape[0]
        site_t = torch.tensor(sites).expand(S, -1)
        pos = self.target.free_positions[site_t]
        logq = self._proposal(self._block_logits(states, evaluation.cond_logits, site_t))  # (S, b, V)
        lp = self.log_density(evaluation.energy, evaluation.log_factor).double()
        old = states.gather(1, pos)
        log_rev = logq.gather(-1, old[..., None]).sum((-1, -2)).double()
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for log_fwd, dest in _block_moves(self.target, states, pos, logq, index):
            q = log_fwd.exp()
            ratio = lp[dest] - lp + log_rev - log_fwd
            a = torch.nan_to_num(ratio.clamp(max=0).exp(), nan=0.0)
            a = torch.where(dest == rows, torch.ones_like(a), a)
            P.index_put_((rows, dest), q * a, accumulate=True)
            P.index_put_((rows, rows), q * (1 - a), accumulate=True)
        return P


# ---------------------------------------------------------------------- pseudo-Gibbs
class PseudoGibbsState(NamedTuple):
    tokens: Tensor  # (C, L)
    step: int
    order: Tensor  # (C, F) random-sweep order (empty otherwise)


class PseudoGibbs:
    """Pseudo-Gibbs ("degenerate Gibbs") resampling from MLM conditionals (Wang & Cho 2019).

    **Target**: none guaranteed. Each update replaces a position by a draw from the MLM's
    conditional there; because an MLM's conditionals are in general not those of any joint
    distribution, the chain's stationary distribution depends on the scan order and differs
    from the energy-based distribution ``exp(-E/T)`` (tests show both on enumerable cases).
    Use :class:`MetropolisHastings` to sample the energy.

    **Proposal**: ``x'_i ~ q_i ∝ exp(logit_i(x_{\\i}) / temperature)`` over ordinary tokens,
    truncated to ``top_k`` once ``step >= burnin`` (bert-gen's "burn-in, then top-k").

    **Acceptance**: always.

    Scans (Wang & Cho's modes): ``"left_to_right"`` (sequential), ``"random"``
    (parallel-sequential: one random position per step), ``"random_sweep"``, and
    ``"parallel"`` (every free position at once, each from its single-site conditional given the
    current state).

    Parameters
    ----------
    target : MaskedLMDistribution
    scan : str
    top_k : int, optional
    temperature : float
    burnin : int
        Steps before ``top_k`` applies.
    compute_lp : bool
        Also evaluate the energy of each new state for ``info.lp`` (costs the L masked copies
        that an MH step costs); otherwise ``info.lp`` is NaN.
    """

    def __init__(
        self,
        target,
        *,
        scan: str = "random",
        top_k: int | None = None,
        temperature: float = 1.0,
        burnin: int = 0,
        compute_lp: bool = False,
    ) -> None:
        self.target = target
        self.scan = _check_scan(scan, _PG_SCANS)
        self.top_k = None if top_k is None else check_count(top_k, "top_k")
        self.temperature = _positive(temperature, "temperature")
        self.burnin = check_count(burnin, "burnin", 0)
        self.compute_lp = bool(compute_lp)

    def init(self, tokens: Tensor) -> PseudoGibbsState:
        return PseudoGibbsState(_check_states(self.target, tokens), 0, torch.empty(0, dtype=torch.long))

    def _proposal(self, logits: Tensor, step: int) -> Tensor:
        top_k = self.top_k if step >= self.burnin else None
        return proposal_log_probs(logits, self.target.ordinary_mask, temperature=self.temperature, top_k=top_k)

    def _site_logits(self, tokens: Tensor, sites: Tensor) -> Tensor:
        """``(C, k, V)`` single-site conditionals (each site masked alone) at free indices ``sites``."""
        C, k = sites.shape
        pos = self.target.free_positions[sites]
        rows = tokens.repeat_interleave(k, 0)  # (C*k, L)
        return self.target.site_logits(rows, pos.reshape(-1, 1)).reshape(C, k, -1)

    def _sites(self, state: PseudoGibbsState, C: int, generator) -> tuple[Tensor, Tensor]:
        F = self.target.num_free
        if self.scan == "parallel":
            return torch.arange(F).expand(C, -1), state.order
        return _select_sites(self.scan, state.step, state.order, C, F, 1, generator)

    def step(self, state: PseudoGibbsState, generator: torch.Generator) -> tuple[PseudoGibbsState, MHInfo]:
        tokens = state.tokens
        C = tokens.shape[0]
        sites, order = self._sites(state, C, generator)
        pos = self.target.free_positions[sites]
        logq = self._proposal(self._site_logits(tokens, sites), state.step)
        new = _sample(logq, generator)
        old = tokens.gather(1, pos)
        new_tokens = tokens.scatter(1, pos, new)
        if self.compute_lp:
            ev = self.target.evaluate(new_tokens)
            lp = -ev.energy / self.target.temperature + ev.log_factor
        else:
            lp = torch.full((C,), float("nan"))
        info = MHInfo(lp, torch.ones(C, dtype=torch.bool), torch.ones(C), (new != old).sum(-1))
        return PseudoGibbsState(new_tokens, state.step + 1, order), info

    def block_matrix(self, states: Tensor, evaluation: Evaluation | None, sites: tuple[int, ...], index) -> Tensor:
        """``(S, S)`` transition matrix of resampling the free positions ``sites`` (each from its
        single-site conditional given the current state; all at once when there are several)."""
        S = states.shape[0]
        site_t = torch.tensor(sites).expand(S, -1)
        pos = self.target.free_positions[site_t]
        logq = self._proposal(self._site_logits(states, site_t), self.burnin)
        P = torch.zeros((S, S), dtype=torch.float64)
        rows = torch.arange(S)
        for log_fwd, dest in _block_moves(self.target, states, pos, logq, index):
            P.index_put_((rows, dest), log_fwd.exp(), accumulate=True)
        return P


# ---------------------------------------------------------------------- mask-predict
class MaskPredictState(NamedTuple):
    tokens: Tensor  # (C, L), mask ids at positions still to predict
    probs: Tensor  # (C, F) probability of the current token at each free position
    step: int


class MaskPredict:
    """Mask-predict parallel decoding (Ghazvininejad et al. 2019), a deterministic baseline.

    **Target**: none; a greedy decoder. Starting with every free position masked, iteration
    ``t`` (of ``iterations``) predicts all masked positions at once (argmax of the MLM, with
    all of them masked), then re-masks the ``floor(F * (iterations - t - 1) / iterations)``
    free positions with the lowest predicted probability. After ``iterations`` steps the state
    is complete and further steps change nothing.
    """

    def __init__(self, target, *, iterations: int = 10) -> None:
        self.target = target
        self.iterations = check_count(iterations, "iterations")

    def init(self, num_chains: int) -> MaskPredictState:
        C = check_count(num_chains, "num_chains")
        tokens = self.target.template.expand(C, -1).clone()
        return MaskPredictState(tokens, torch.zeros((C, self.target.num_free)), 0)

    def step(self, state: MaskPredictState, generator: torch.Generator | None = None):
        tokens, probs, t = state
        C, F = probs.shape
        free = self.target.free_positions
        mask_id = int(self.target.template[free[0]])
        masked = tokens[:, free] == mask_id  # (C, F): still to predict
        n_masked = int(masked[0].sum())
        if t >= self.iterations or n_masked == 0:
            info = MHInfo(torch.full((C,), float("nan")), torch.ones(C, dtype=torch.bool), torch.ones(C),
                          torch.zeros(C, dtype=torch.long))
            return state._replace(step=t + 1), info
        sites = masked.nonzero()[:, 1].reshape(C, n_masked)  # (C, m) free indices, same count per chain
        logits = self.target.site_logits(tokens, free[sites])  # (C, m, V)
        logp = proposal_log_probs(logits, self.target.ordinary_mask)
        best_lp, best = logp.max(-1)
        tokens = tokens.scatter(1, free[sites], best)
        probs = probs.scatter(1, sites, best_lp.exp())
        n_next = (F * (self.iterations - t - 1)) // self.iterations
        if n_next > 0:
            remask = probs.argsort(-1)[:, :n_next]  # lowest-probability free positions
            tokens = tokens.scatter(1, free[remask], mask_id)
        info = MHInfo(torch.full((C,), float("nan")), torch.ones(C, dtype=torch.bool), torch.ones(C),
                      torch.full((C,), n_masked))
        return MaskPredictState(tokens, probs, t + 1), info


# ---------------------------------------------------------------------- initialisation
def fill_template(target, num_chains: int, generator: torch.Generator, method: str = "sample") -> Tensor:
    """Complete starting states ``(C, L)``: fill the free positions left to right from the MLM.

    Each position is drawn (``"sample"``) or taken as the argmax (``"greedy"``) from the MLM
    conditional with the positions to its right still masked: one forward per free position,
    all chains batched. These fill-in steps are warm-up, never MH draws. ``"uniform"`` draws
    ordinary tokens uniformly (no forward).
    """
    check_init(method)
    C = check_count(num_chains, "num_chains")
    tokens = target.template.expand(C, -1).clone()
    ordinary = target.ordinary_mask
    if method == "uniform":
        logq = proposal_log_probs(torch.zeros(C, target.num_free, target.vocab_size), ordinary)
        return tokens.scatter(1, target.free_positions.expand(C, -1), _sample(logq, generator))
    for p in target.free_positions.tolist():
        logits = target.site_logits(tokens, torch.full((C, 1), p))[:, 0]  # (C, V)
        logq = proposal_log_probs(logits, ordinary)
        tokens[:, p] = logq.argmax(-1) if method == "greedy" else _sample(logq, generator)
    return tokens


def geometric_annealing(start: float, end: float, num_steps: int) -> Callable[[int], float]:
    """Temperature schedule ``step -> T`` from ``start`` to ``end`` geometrically over ``num_steps``
    steps, then constant (Goyal et al. 2021, section 7: anneal towards the mode)."""
    start, end = _positive(start, "start"), _positive(end, "end")
    n = check_count(num_steps, "num_steps")

    def schedule(step: int) -> float:
        frac = min(step, n) / n
        return start * (end / start) ** frac

    return schedule


def _check_states(target, tokens: Tensor) -> Tensor:
    if not isinstance(tokens, Tensor):
        raise TypeError(f"initial tokens must be a (C, L) torch.long tensor, got {type(tokens).__name__}")
    if tokens.dim() != 2:
        raise ValueError(f"initial tokens must have shape (C, L), got {tuple(tokens.shape)}")
    validate = getattr(target, "validate_tokens", None)
    if validate is not None:
        validate(tokens)
    return tokens.cpu()
