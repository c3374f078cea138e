"""Feasible starting states: the alphabets a start is drawn from, the hard rules it must keep,
and the repair search that finds a state breaking none of them.

A constrained target (:class:`~mlm_ppl.models.ConstraintTarget`, a
:class:`~mlm_ppl.MaskedLMDistribution` with ``constraints``, or any
:class:`~mlm_ppl.models.ConstrainedTarget` whose log-factor is ``-inf`` somewhere) has density 0
off its feasible set. A chain must start on that set: the template is filled within the
alphabets (``target.allowed``), and a fill that still breaks a pattern rule is repaired by
:func:`repair_start` (annealed single-site changes within the alphabets that lower the number
of broken rules, a trust region's excess counted position by position, each chain drawing from
its own stream), or the run stops before its first step, naming the rules. A start the user
gives is checked by :func:`check_start` and refused, naming the chain and the rule, when it
breaks one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from .._checks import check_count
from ..models.constraints import BoundConstraints, ConstraintTarget
from ..models.distribution import MaskedLMDistribution
from ..models.gap_target import GapTarget
from ..models.target import ConstrainedTarget, DerivedTarget, ScaledTarget, Target
from .streams import ChainStreams

__all__ = ["REPAIR_TRIES", "rule_violations", "target_constraints", "check_start", "repair_start"]

REPAIR_TRIES = 2000
"""Single-site changes the repair search tries per chain before it gives up."""

_START_TEMPERATURE, _END_TEMPERATURE = 1.0, 0.05  # of the repair's annealing, per broken rule


def _levels(target: Target) -> Iterator[Target]:
    """``target`` and the targets it is built on, down to the distribution; a
    :class:`~mlm_ppl.models.ScaledTarget` of scale 0 ends the chain (it drops its base's rules
    with its term, as Pyro's mask does)."""
    level: Target = target
    while True:
        yield level
        if not isinstance(level, DerivedTarget) or (isinstance(level, ScaledTarget) and level.scale == 0):
            return
        if isinstance(level, GapTarget):  # its base is one length's: its rules read every length (_bound)
            return
        level = level.base


def _bound(level: Target) -> Any:
    """The constraint spec bound in one level: a ConstraintTarget's, a constrained distribution's,
    or a variable gap's (:class:`~mlm_ppl.models.gap_target.GapConstraints`: each state at its length)."""
    if isinstance(level, GapTarget):
        return level.constraints
    if isinstance(level, ConstraintTarget):
        return level.constraints
    if isinstance(level, MaskedLMDistribution):
        return level.constraints
    return None


def target_constraints(target: Target) -> BoundConstraints | None:
    """The first constraint spec bound down the chain of ``target`` (a
    :class:`~mlm_ppl.models.ConstraintTarget`'s, or that of a :class:`~mlm_ppl.MaskedLMDistribution`
    with ``constraints``), or None: what a run's record reads its rule and expert functionals from."""
    for level in _levels(target):
        bound = _bound(level)
        if bound is not None:
            return bound
    return None


def rule_violations(target: Target, tokens: Tensor, *, degrees: bool = False) -> dict[str, Tensor] | None:
    """``{rule name: (N,) bool}``, True where a state ``(N, L)`` breaks the rule, for every hard rule
    the target can check without running its model; None when it has none.

    The rules are read down the chain of derived targets: the named rules
    (:meth:`~mlm_ppl.models.constraints.BoundConstraints.violations`) of a
    :class:`~mlm_ppl.models.ConstraintTarget` and of a :class:`~mlm_ppl.MaskedLMDistribution` with
    ``constraints``; for any other :class:`~mlm_ppl.models.ConstrainedTarget`, its log-factor being
    ``-inf``, named ``"finite log_factor"``. Below a scale of 0 (Pyro's mask) no rule holds.
    ``degrees``: ``(N,)`` float64, how far each state breaks a rule where a rule can tell (a
    :class:`~mlm_ppl.models.constraints.Mutations` rule's positions too many or too few, an
    :class:`~mlm_ppl.models.constraints.ExpertBound`'s 1 plus the distance past it), else 0 or 1.
    """
    out: dict[str, Tensor] = {}
    for level in _levels(target):
        bound = _bound(level)
        found: dict[str, Tensor] = {}
        if bound is not None:
            found = bound.violations(tokens, degrees=degrees)
        elif isinstance(level, ConstrainedTarget):
            factor = torch.as_tensor(level.log_factor(tokens)).reshape(-1)
            found = {"finite log_factor": torch.isneginf(factor).cpu()}
        for name, broken in found.items():
            key, k = name, 2
            while key in out:  # two levels with rules of one name: both kept
                key, k = f"{name} #{k}", k + 1
            out[key] = broken
    return out or None


def _broken_count(target: Target, tokens: Tensor) -> Tensor:
    """``(N,)`` float64, how many hard rules each state breaks, a trust region by its excess and an
    expert's bound by how far past it (0: none)."""
    found = rule_violations(target, tokens, degrees=True)
    if found is None:
        return torch.zeros(tokens.shape[0], dtype=torch.float64)
    return torch.stack([v.double() for v in found.values()]).sum(0)


def _broken_names(target: Target, tokens: Tensor) -> list[str]:
    """The rules any of the states ``(N, L)`` breaks, in the target's order."""
    found = rule_violations(target, tokens) or {}
    return [name for name, broken in found.items() if bool(broken.any())]


def check_start(target: Target, tokens: Tensor) -> None:
    """A ValueError, naming the chain and the rules, when a given start ``(C, L)`` breaks a hard rule."""
    found = rule_violations(target, tokens)
    if found is None:
        return
    for c in range(tokens.shape[0]):
        names = [name for name, broken in found.items() if bool(broken[c])]
        if names:
            rules = ", ".join(map(repr, names))
            raise ValueError(
                f"init: the start of chain {c} breaks rule {rules}, so it has density 0 under the target; give "
                "starts that satisfy every rule, or let the run fill the template (init='sample', 'greedy' or "
                "'uniform'), which searches for one"
            )


def repair_start(target: Target, tokens: Tensor, streams: ChainStreams, tries: int = REPAIR_TRIES) -> Tensor:
    """Starting states ``(C, L)`` that break no hard rule: ``tokens`` where they break none, else
    found by an annealed search from them.

    Each chain whose start breaks a rule runs its own search, drawing from its own stream (so a
    chain's start depends only on its seed and its fill): ``tries`` times, a free position is
    picked uniformly, given a token drawn uniformly from its alphabet (``target.allowed``),
    and the change is kept when it breaks no more rules than the state, or otherwise with
    probability ``exp(-(increase) / T)``, ``T`` annealed geometrically from 1 to 0.05. The
    search stops at the first state that breaks none. A chain that finds none stops the run: a
    ValueError ``"no sequence satisfying <rules> found after N tries"``.

    A target whose rules :func:`rule_violations` cannot read is left as it is.
    """
    tries = check_count(tries, "tries")
    tokens = tokens.clone()
    broken = _broken_count(target, tokens)
    active = broken.nonzero().flatten().tolist()
    if not active:
        return tokens
    alphabets = target.allowed.cpu().float()  # (F, V)
    free = target.free_positions.cpu()
    F = int(target.num_free)
    state, count = tokens[active], broken[active]
    for t in range(tries):
        sub = streams.subset(active)  # only the searching chains draw: each from its own stream
        n = len(active)
        temperature = _START_TEMPERATURE * (_END_TEMPERATURE / _START_TEMPERATURE) ** (t / max(1, tries - 1))
        keys = sub.rand((n, 2))
        site = (keys[:, 0] * F).long().clamp(max=F - 1)  # (n,) a free position each
        token = sub.categorical(alphabets[site])  # (n,) a token of its alphabet
        proposal = state.clone()
        proposal[torch.arange(n), free[site]] = token
        new_count = _broken_count(target, proposal)
        worse = (new_count - count).clamp(min=0).double()
        keep = keys[:, 1].double() < torch.exp(-worse / temperature)  # always when no worse
        state = torch.where(keep[:, None], proposal, state)
        count = torch.where(keep, new_count, count)
        done = count == 0
        if bool(done.any()):
            rows = torch.tensor(active)[done]
            tokens[rows] = state[done]
            active = [c for c, d in zip(active, done.tolist()) if not d]
            state, count = state[~done], count[~done]
            if not active:
                return tokens
    rules = ", ".join(map(repr, _broken_names(target, state))) or "every rule"
    chains = ", ".join(map(str, (streams.chains[c] for c in active)))
    raise ValueError(
        f"no sequence satisfying {rules} found after {tries} tries (single-site changes within the allowed "
        f"tokens, from the filled template of chain{'s' if len(active) > 1 else ''} {chains}); check that the "
        "rules can hold together in this template, or give a start that satisfies them (init=tokens)"
    )
