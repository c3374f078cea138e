"""Where annealed surrogate-MH stops cooling: each chain's floor, from its own outer acceptance.

**Why a floor.** Annealed at ``tau``, surrogate-MH's inner chain moves on the surrogate tempered
by the same ``tau``, and its exact correction accepts a move ``x -> y`` with

    log a = ([lp(y) - lp(x)] - [lp~(y) - lp~(x)]) / tau,

the surrogate's error on the move magnified by ``1 / tau``. As a chain cools it gathers where the
target's mode is, and there the inner chain pulls it towards the surrogate's own mode, which the
target rejects: the error it meets grows one-sided, and the correction refuses nearly every move.
The main job's frozen bfloat16 surrogate annealed to 0.05 had outer acceptance 0.25 and no chain
moving to a new state (issue 46). No error measured in advance predicts where: on a 5-position
tiny model whose exact outer acceptance at stationarity falls below 0.2 at ``tau`` 0.9, a pilot's
errors (two steps of eight chains from the greedy fill) predicted 0.08 to 0.63 by seed.

**The thermostat.** So each chain watches its own correction. It keeps a moving average of its
outer acceptance probability ``min(1, exp(log a))`` over the steps its inner chain moved (weight
:data:`RECENT_WEIGHT` on the newest; 1 at the start). While the average is at least
:data:`MIN_ACCEPTANCE` the chain follows the schedule; when it falls below, the chain stops
cooling, held at :data:`WARMING` times its current ``tau`` (never above the schedule's first), and
its average restarts at :data:`RESTART`; each later fall warms it by ``WARMING`` again. Chain
``c`` runs at ``tau_c = max(schedule(step), hold_c)``. A chain's hold depends on its own moves
only, so it anneals the same beside any other chains, and a resume continues it exactly (holds
and averages are in the kernel's state). The run records where each chain stopped cooling (its
hold; None for a chain that followed the whole schedule). A warming schedule (``end >= start``)
has no thermostat.
``anneal_floor`` gives one fixed floor for every chain instead (0: none, the whole schedule, stalls
and all); a schedule of the constraints' term alone (``anneal_terms="constraints"``) magnifies no
error of the surrogate and has no floor.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["MIN_ACCEPTANCE", "RECENT_WEIGHT", "RESTART", "WARMING", "chain_taus", "start_thermostat", "thermostat"]

MIN_ACCEPTANCE = 0.2
"""A chain whose moving average of outer acceptance falls below this stops cooling."""
RECENT_WEIGHT = 0.3
"""Weight of the newest step in that moving average (about the last three moves)."""
WARMING = 1.25
"""A chain that stops cooling is held at this times its ``tau`` (and warmed by it at each later fall)."""
RESTART = 0.5
"""Where the moving average restarts after a fall (a few low steps before the next)."""


def start_thermostat(num_chains: int) -> tuple[Tensor, Tensor]:
    """``(hold, recent)`` of chains that have not yet stopped cooling: no hold (0), average 1."""
    return torch.zeros(num_chains, dtype=torch.float64), torch.ones(num_chains, dtype=torch.float64)


def chain_taus(tau: float, hold: Tensor) -> Tensor:
    """``(C,)`` each chain's ``tau``: the schedule's ``tau``, or its hold where that is warmer."""
    return hold.clamp(min=tau)


def thermostat(
    hold: Tensor, recent: Tensor, taus: Tensor, acceptance: Tensor, moved: Tensor, first: float
) -> tuple[Tensor, Tensor]:
    """``(hold, recent)`` after a step at ``taus`` whose outer acceptance probabilities were
    ``acceptance`` (counted where the inner chain ``moved``); ``first``: the schedule's first ``tau``."""
    recent = torch.where(moved, (1 - RECENT_WEIGHT) * recent + RECENT_WEIGHT * acceptance.double(), recent)
    low = recent < MIN_ACCEPTANCE
    hold = torch.where(low, (taus * WARMING).clamp(max=first), hold)
    return hold, torch.where(low, torch.full_like(recent, RESTART), recent)
