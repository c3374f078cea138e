"""Gap-jump's run moves: a contiguous run of ``k`` gap residues inserted or deleted in one MH step.

A length of little mass between two heavy ones is a wall for moves of one residue: a chain at
length ``L`` reaches ``L + 2`` only through ``L + 1``, and a step into ``L + 1`` is refused about as
often as ``L + 1`` is light. An insert run adds ``k`` positions (``k`` uniform on ``2..max_run``,
:func:`run_sizes`) at a uniform slot and unmasks them one at a time in a uniform order
(:func:`unmask_run`, which also reads a delete run's reverse ``q`` along the same order with the
state's own tokens); a delete run removes ``k`` positions from a uniform start. The Hastings
ratios, and why the choices of ``k``, slot and order cancel path by path, are in :mod:`.jump`'s
docstring; :meth:`GapJump.step_chain <.jump.GapJump.step_chain>` makes the moves with these
functions, and :func:`run_matrices` gives their exact matrices for tiny models from the same code.
The move probabilities ``p_insert_run`` and ``p_delete_run`` are 0 by default (a run's draws are
then those of the one-residue moves alone) and must be both 0 or both > 0 (a run move whose
reverse is never proposed is always refused).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
from torch import Tensor

from ..models.gap_target import GapTarget
from .base import acceptance_probability, proposal_log_probs
from .exact import enumerate_states, state_index
from .streams import ChainStreams

__all__ = ["RUN_MOVES", "run_sizes", "insert_masks", "delete_run", "unmask_run", "run_matrices"]

RUN_MOVES = ("insert_run", "delete_run")
"""The run moves, after the one-residue moves in :data:`~.jump.MOVES` (codes 3 and 4)."""


def run_sizes(max_run: int) -> tuple[int, ...]:
    """The run lengths ``k`` a run move draws, uniformly: ``2 .. max_run``.

    Parameters
    ----------
    max_run : int
        The longest run.

    Returns
    -------
    tuple of int
        ``2, 3, .., max_run``.

    Examples
    --------
    >>> from mlm_ppl.inference.jump_runs import run_sizes
    >>> run_sizes(4)
    (2, 3, 4)
    """
    return tuple(range(2, max_run + 1))


def _gap_tokens(gap: GapTarget, length: int, j: int, k: int) -> Tensor:
    """``(k,)`` token indices of gap positions ``j .. j+k-1`` of the length-``length`` template."""
    return gap.target(length).free_positions[gap.gap_start + j : gap.gap_start + j + k]


def insert_masks(gap: GapTarget, x: Tensor, length: int, j: int, k: int) -> Tensor:
    """``x`` with ``k`` masked positions inserted at gap slot ``j``.

    Parameters
    ----------
    gap : GapTarget
        The variable gap.
    x : torch.Tensor
        States of gap length ``length``, shape ``(N, T)``.
    length : int
        Their gap length.
    j : int
        The slot, ``0 .. length`` (``length``: after the gap's last position).
    k : int
        The number of positions inserted.

    Returns
    -------
    torch.Tensor
        The states of gap length ``length + k``, the new positions masked, shape ``(N, T + k)``.
    """
    ends = _gap_tokens(gap, length, 0, length)
    at = int(ends[j]) if j < length else int(ends[-1]) + 1
    masks = torch.full((x.shape[0], k), gap.mlm.mask_id, dtype=x.dtype)
    return torch.cat([x[:, :at], masks, x[:, at:]], 1)


def delete_run(gap: GapTarget, x: Tensor, length: int, j: int, k: int) -> Tensor:
    """``x`` without gap positions ``j .. j+k-1``.

    Parameters
    ----------
    gap : GapTarget
        The variable gap.
    x : torch.Tensor
        States of gap length ``length``, shape ``(N, T)``.
    length : int
        Their gap length.
    j : int
        The run's first gap position.
    k : int
        The number of positions removed.

    Returns
    -------
    torch.Tensor
        The states of gap length ``length - k``, shape ``(N, T - k)``.
    """
    at = int(_gap_tokens(gap, length, j, 1)[0])
    return torch.cat([x[:, :at], x[:, at + k :]], 1)


def unmask_run(
    gap: GapTarget, y: Tensor, length: int, j: int, order: Tensor, streams: ChainStreams | None = None
) -> tuple[Tensor, Tensor]:
    """Sequential unmasking of gap positions ``j + order`` of ``y``, drawing or reading their tokens.

    Step ``i`` masks the positions ``order[i:]`` and reads the MLM's conditional at ``order[i]``, as
    the length-``length`` target proposes (its alphabet there, normalised in float64). With
    ``streams`` (one chain, ``N = 1``) each step draws its token into ``y``; without, the tokens of
    ``y`` are read.

    Parameters
    ----------
    gap : GapTarget
        The variable gap.
    y : torch.Tensor
        States of gap length ``length``, shape ``(N, T)`` (not changed: a copy is filled).
    length : int
        Their gap length.
    j : int
        The run's first gap position.
    order : torch.Tensor
        The order of the run's positions, a permutation of ``0 .. k-1``.
    streams : ChainStreams or None, optional
        One chain's stream to draw the tokens from; None (the default) reads those of ``y``.

    Returns
    -------
    y : torch.Tensor
        The states as filled, shape ``(N, T)``.
    logq : torch.Tensor
        ``log q_order`` of each state's run, float64, shape ``(N,)``.
    """
    target = gap.target(length)
    free = gap.gap_start + j + torch.as_tensor(order, dtype=torch.long)  # (k,) free indices, in draw order
    pos = target.free_positions[free]
    y = y.clone()
    logq = torch.zeros(y.shape[0], dtype=torch.float64)
    for i in range(len(free)):
        logits = target.site_logits(y, pos[i:].repeat(y.shape[0], 1))[:, 0].double()  # (N, V) at pos[i]
        lq = proposal_log_probs(logits, target.allowed[free[i]])
        if streams is not None:
            y[:, pos[i]] = streams.categorical(lq.exp())
        logq = logq + lq.gather(-1, y[:, pos[i], None]).squeeze(-1)
    return y, logq


def run_matrices(jump: Any, offset: dict[int, int], n: int) -> dict[str, Tensor]:
    """Each run move's exact matrix over ``jump``'s states, given that move is chosen.

    Every ``k``, slot, order and fill is enumerated (all states of a length at once), each path
    weighed by its probability and accepted by ``jump.log_ratio``.

    Parameters
    ----------
    jump : GapJump
        The kernel (its target, run sizes, log density and ratio).
    offset : dict of int to int
        ``offset[L]``: the row of length ``L``'s first state.
    n : int
        The number of states, over every length.

    Returns
    -------
    dict of str to torch.Tensor
        The matrices of ``"insert_run"`` and ``"delete_run"``, each float64 of shape ``(n, n)``.
    """
    gap: GapTarget = jump.target
    M = {move: torch.zeros((n, n), dtype=torch.float64) for move in RUN_MOVES}
    sizes = jump.run_sizes
    for L in gap.lengths:
        xs = enumerate_states(gap.target(L))
        ev = gap.target(L).evaluate(xs)
        lp = jump.log_density(L, ev.energy, ev.log_factor)
        rows = offset[L] + torch.arange(xs.shape[0])
        for kind, k in itertools.product(RUN_MOVES, sizes):
            Lnew = L + k if kind == "insert_run" else L - k
            P, wk = M[kind], 1.0 / len(sizes)
            if Lnew not in offset:  # refused: past a bound of the prior's lengths
                P[rows, rows] += wk
                continue
            index, slots, orders = state_index(gap.target(Lnew)), min(L, Lnew) + 1, math.factorial(k)
            for j, order in itertools.product(range(slots), itertools.permutations(range(k))):
                if kind == "insert_run":  # each state with each fill of the run (within the alphabets)
                    allowed = gap.target(Lnew).allowed[gap.gap_start + j : gap.gap_start + j + k]
                    fills = torch.tensor(list(itertools.product(*(a.nonzero().flatten().tolist() for a in allowed))))
                    ys = insert_masks(gap, xs, L, j, k).repeat_interleave(len(fills), 0)
                    ys[:, _gap_tokens(gap, Lnew, j, k)] = fills.repeat(xs.shape[0], 1)
                    _, logq = unmask_run(gap, ys, Lnew, j, torch.tensor(order))
                    src, probs = rows.repeat_interleave(len(fills)), logq.exp()
                else:
                    ys = delete_run(gap, xs, L, j, k)
                    _, logq = unmask_run(gap, xs, L, j, torch.tensor(order))
                    src, probs = rows, torch.ones(xs.shape[0], dtype=torch.float64)
                ok = probs > 0
                ys, logq, probs, src = ys[ok], logq[ok], probs[ok], src[ok]
                evy = gap.target(Lnew).evaluate(ys)
                lp_x = lp[src - offset[L]]
                a = acceptance_probability(
                    jump.log_ratio(kind, jump.log_density(Lnew, evy.energy, evy.log_factor), lp_x, logq)
                )
                w = wk / slots / orders * probs
                P.index_put_((src, offset[Lnew] + index(ys)), w * a, accumulate=True)
                P.index_put_((src, src), w * (1 - a), accumulate=True)
    return M
