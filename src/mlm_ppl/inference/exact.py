"""Exact enumeration of tiny state spaces: the target distribution and kernels' transition matrices.

For a template with ``F`` free positions and ``K`` ordinary tokens there are ``K**F`` states;
everything here is exact (float64) and meant for ``K**F`` up to a few thousand: tests, docs,
and checking a sampler before trusting it on a real model.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch
from torch import Tensor

from .kernels import _all_blocks

__all__ = ["enumerate_states", "state_index", "exact_log_probs", "transition_matrix", "stationary_distribution",
           "total_variation"]

_MAX_STATES = 200_000


def enumerate_states(target) -> Tensor:
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


def state_index(target) -> Callable[[Tensor], Tensor]:
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


def exact_log_probs(target, states: Tensor | None = None) -> Tensor:
    """``(S,)`` exact normalised log-probabilities ``log softmax(-E/T + log_factor)`` over all states."""
    states = enumerate_states(target) if states is None else states
    ev = target.evaluate(states)
    return torch.log_softmax((-ev.energy / target.temperature + ev.log_factor).double(), 0)


def transition_matrix(kernel, states: Tensor | None = None) -> Tensor:
    """``(S, S)`` exact transition matrix of ``kernel`` over all states of its target, float64.

    * ``scan="random"``: one step (a uniformly chosen block);
    * ``scan="left_to_right"``: one sweep (every block in order);
    * ``scan="random_sweep"``: one sweep, averaged over the sweep orders;
    * ``scan="parallel"`` (pseudo-Gibbs): one step updating every free position at once.

    Built from the kernel's own proposal code (``kernel.block_matrix``).
    """
    target = kernel.target
    states = enumerate_states(target) if states is None else states
    index = state_index(target)
    evaluation = target.evaluate(states)
    S = states.shape[0]
    F = target.num_free
    if getattr(kernel, "scan", None) == "parallel":
        return kernel.block_matrix(states, evaluation, tuple(range(F)), index)
    cache: dict[tuple[int, ...], Tensor] = {}
    total = torch.zeros((S, S), dtype=torch.float64)
    for weight, blocks in _all_blocks(kernel.scan, F, getattr(kernel, "block_size", 1)):
        P = torch.eye(S, dtype=torch.float64)
        for block in blocks:
            if block not in cache:
                cache[block] = kernel.block_matrix(states, evaluation, block, index)
            P = P @ cache[block]
        total += weight * P
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
