"""Exact enumeration of tiny state spaces: the target distribution and kernels' transition matrices.

For a template with ``F`` free positions and ``K`` ordinary tokens there are ``K**F`` states;
everything here is exact (float64) and meant for ``K**F`` up to a few thousand: tests, docs,
and checking a sampler before trusting it on a real model.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from ..models.target import Target, log_density
from .base import Kernel, num_blocks

__all__ = [
    "enumerate_states",
    "state_index",
    "exact_log_probs",
    "transition_matrix",
    "scan_matrix",
    "stationary_distribution",
    "total_variation",
    "scan_cycles",
    "block_moves",
    "model_posterior",
]

_MAX_STATES = 200_000


def enumerate_states(target: Target) -> Tensor:
    """All ``(S, L)`` complete states of ``target``: its template with every combination of
    ordinary tokens at the free positions, in lexicographic order of the free tokens."""
    ordinary = target.ordinary_mask.nonzero().flatten()
    F = target.num_free
    S = len(ordinary) ** F
    if S > _MAX_STATES:
        raise ValueError(f"{len(ordinary)}**{F} = {S} states is too many to enumerate (limit {_MAX_STATES})")
    combos = torch.tensor(list(itertools.product(ordinary.tolist(), repeat=F)), dtype=torch.long).reshape(S, F)
    states = target.template.expand(S, -1).clone()
    states[:, target.free_positions] = combos
    return states


def state_index(target: Target) -> Callable[[Tensor], Tensor]:
    """A function mapping states ``(N, L)`` to their row in :func:`enumerate_states`."""
    ordinary = target.ordinary_mask.nonzero().flatten()
    K = len(ordinary)
    rank = torch.full((target.vocab_size,), -1, dtype=torch.long)
    rank[ordinary] = torch.arange(K)
    weights = K ** torch.arange(target.num_free - 1, -1, -1)

    def index(states: Tensor) -> Tensor:
        r = rank[states[:, target.free_positions]]
        if (r < 0).any():
            raise ValueError("a state holds a non-ordinary token at a free position")
        return (r * weights).sum(-1)

    return index


def exact_log_probs(target: Target, states: Tensor | None = None) -> Tensor:
    """``(S,)`` exact normalised log-probabilities ``log softmax(-E/T + log_factor)`` over all states."""
    states = enumerate_states(target) if states is None else states
    ev = target.evaluate(states)
    return torch.log_softmax(log_density(ev.energy, ev.log_factor, target.temperature).double(), 0)


def transition_matrix(kernel: Kernel, states: Tensor | None = None) -> Tensor:
    """``(S, S)`` exact transition matrix of ``kernel`` over all states of its target, float64.

    * ``scan="random"``: one step (a uniformly chosen block);
    * ``scan="left_to_right"``: one sweep (every block in order);
    * ``scan="random_sweep"``: one sweep, averaged over the sweep orders;
    * ``scan="parallel_masked"`` or ``"parallel_unmasked"`` (pseudo-Gibbs): one step updating
      every free position at once;
    * surrogate-MH: one step (the inner chain's exact matrix, corrected).

    Built from the kernel's own proposal code (``kernel.transition_matrix``); a kernel without
    the capability (``capabilities.exact_matrix``) is refused.
    """
    if not kernel.capabilities.exact_matrix:
        raise TypeError(f"kernel {kernel.name!r} has no exact transition matrix")
    target = kernel.target
    states = enumerate_states(target) if states is None else states
    return kernel.transition_matrix(states, target.evaluate(states), state_index(target))


def scan_matrix(scan: str, num_free: int, block_size: int, block_matrix: Callable[[tuple[int, ...]], Tensor]) -> Tensor:
    """The matrix of one scan cycle (:func:`scan_cycles`) from the matrices of single block
    updates, ``block_matrix(block)`` (each computed once)."""
    cache: dict[tuple[int, ...], Tensor] = {}
    total: Tensor | None = None
    for weight, blocks in scan_cycles(scan, num_free, block_size):
        P: Tensor | None = None
        for block in blocks:
            if block not in cache:
                cache[block] = block_matrix(block)
            P = cache[block] if P is None else P @ cache[block]
        assert P is not None  # every cycle has a block
        total = weight * P if total is None else total + weight * P
    assert total is not None
    return total


def stationary_distribution(P: Tensor) -> Tensor:
    """The stationary distribution ``pi = pi P`` of a transition matrix (unique if P is ergodic)."""
    S = P.shape[0]
    A = torch.cat([P.T - torch.eye(S, dtype=P.dtype), torch.ones(1, S, dtype=P.dtype)])
    b = torch.zeros(S + 1, dtype=P.dtype)
    b[-1] = 1
    return torch.linalg.lstsq(A, b[:, None]).solution[:, 0]


def total_variation(p: Tensor, q: Tensor) -> float:
    """``0.5 * sum |p - q|``."""
    return 0.5 * float((p.double() - q.double()).abs().sum())


# ---------------------------------------------------------------------- block enumeration helpers
def scan_cycles(scan: str, num_free: int, block_size: int) -> list[tuple[float, list[tuple[int, ...]]]]:
    """Every sequence of blocks one scan cycle can apply, with its probability.

    ``"random"``: one block, each ``block_size``-subset equally likely; ``"left_to_right"``: the
    blocks of one sweep in order; ``"random_sweep"``: the blocks of one sweep for every
    permutation of the free positions.
    """
    if scan == "random":
        subsets = list(itertools.combinations(range(num_free), block_size))
        return [(1.0 / len(subsets), [s]) for s in subsets]
    n = num_blocks(num_free, block_size)
    if scan == "left_to_right":
        return [(1.0, [tuple(range(j * block_size, min(num_free, (j + 1) * block_size))) for j in range(n)])]
    perms = list(itertools.permutations(range(num_free)))
    return [(1.0 / len(perms), [tuple(p[j * block_size : (j + 1) * block_size]) for j in range(n)]) for p in perms]


def block_moves(
    target: Target, states: Tensor, pos: Tensor, logq: Tensor, index: Callable[[Tensor], Tensor]
) -> Iterator[tuple[Tensor, Tensor]]:
    """Every proposal for a block, for the kernels' exact transition matrices.

    For each combination of ordinary tokens ``y`` at positions ``pos`` ``(S, b)``, yields the
    float64 ``log q(y)`` ``(S,)`` under ``logq`` ``(S, b, V)`` and the row of the state it leads
    to ``(S,)``.
    """
    S = states.shape[0]
    ordinary = target.ordinary_mask.nonzero().flatten().tolist()
    for combo in itertools.product(ordinary, repeat=pos.shape[1]):
        y = torch.tensor(combo).expand(S, -1)
        yield logq.gather(-1, y[..., None]).sum((-1, -2)).double(), index(states.scatter(1, pos, y))


def model_posterior(model: Callable, *args: Any, **kwargs: Any) -> tuple[dict[str, Tensor], Tensor]:
    """Pyro's own posterior of a model's latent sites, by enumeration: for users' tests of their
    own models, as this library's tests check its kernels.

    Every latent :class:`~mlm_ppl.MaskedLMDistribution` site (one sequence, outside any plate)
    and every unbatched discrete site with enumerable support takes each of its values; each
    combination is scored by Pyro itself, ``poutine.trace(poutine.condition(model,
    data=values)).get_trace(*args, **kwargs).log_prob_sum()`` (observed sites, factors and
    handlers included), and the scores are normalised. Returns ``values`` (site -> ``(N, ...)``,
    row ``n`` of every site the ``n``-th combination) and ``probs`` ``(N,)`` float64. A continuous
    latent site is refused (condition on it, or integrate it out); the combinations are limited
    to 200,000.
    """
    import pyro.poutine as poutine

    from ..models.distribution import MaskedLMDistribution
    from .pyro_sites import is_sample_site, trace_model

    trace = trace_model(model, args, kwargs)
    choices: dict[str, Tensor] = {}
    for name, site in trace.nodes.items():
        if not is_sample_site(site) or site["is_observed"]:
            continue
        fn: Any = site["fn"]
        if isinstance(fn, MaskedLMDistribution) and fn.batch_shape == torch.Size():
            choices[name] = enumerate_states(fn)
        elif fn.support.is_discrete and fn.has_enumerate_support and fn.batch_shape == torch.Size():
            choices[name] = fn.enumerate_support(expand=False).reshape((-1,) + tuple(fn.event_shape))
        else:
            raise ValueError(
                f"site {name!r} is continuous, or under a plate: model_posterior enumerates token sites of one "
                "sequence and unbatched discrete sites; condition on it (poutine.condition) or integrate it out"
            )
    if not choices:
        raise ValueError("the model has no latent token or discrete site to enumerate")
    total = math.prod(len(v) for v in choices.values())
    if total > _MAX_STATES:
        raise ValueError(
            f"the latent sites have {total} combinations; model_posterior enumerates at most {_MAX_STATES}"
        )
    names = list(choices)
    rows = torch.cartesian_prod(*[torch.arange(len(choices[n])) for n in names]).reshape(total, len(names))

    def score(row: Tensor) -> Tensor:
        data = {n: choices[n][int(i)] for n, i in zip(names, row)}
        return torch.as_tensor(
            poutine.trace(poutine.condition(model, data=data)).get_trace(*args, **kwargs).log_prob_sum()
        )

    logp = torch.stack([score(row) for row in rows])
    return {n: choices[n][rows[:, k]] for k, n in enumerate(names)}, torch.softmax(logp.double(), 0)
