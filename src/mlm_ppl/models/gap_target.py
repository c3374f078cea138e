"""The target over every length of a variable gap: ``p(L, x) ∝ pi(L) exp(-E(x)/T)``.

A template with one variable gap ``MASK{a,b}`` (:mod:`~mlm_ppl.models.gaps`) and a length prior
``pi`` describe one distribution over loops of every length the prior weighs, so that the
model's own energy decides the lengths (up to ``pi``). :class:`GapTarget` writes it as a
:class:`~mlm_ppl.models.target.Target` over states of one shape, so that runs, checkpoints,
``run.nc`` and diagnostics hold its draws as they hold any other:

* a state of gap length ``L`` is the length-``L`` sequence with ``longest - L`` pad tokens
  after its loop (the gap's last positions), so every state has the longest template's shape and
  a position after the gap has one index at every length;
* its log density is ``-E(x)/T + log pi(L)``: :meth:`evaluate` gives ``E`` of the unpadded
  sequence at its own length and ``log pi(L)`` as the log-factor, and the conditionals of the
  free positions it has (zeros at the absent gap positions).

Only a kernel that moves the length samples it (``capabilities.lengths``: the ``gap-jump``
kernel, :mod:`mlm_ppl.inference.jump`, and surrogate-MH around its moves, whose inner chain runs
on :meth:`GapTarget.map_targets` of the surrogates); any other refuses it, since it would keep
every chain at its starting length.

With a :class:`~mlm_ppl.models.constraints.ConstraintSpec`, each length's target is the spec
bound to that length's template (as a batch of strata binds it: a rule's positions count free
positions from the first mask, or from the last with negative numbers), so the target is
``pi(L) exp(-E(x)/T + log_factor_L(x))``; :attr:`GapTarget.constraints` reads the rules and
experts of padded states, each at its own length.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import cached_property
from typing import Any

import torch
from torch import Tensor

from .constraints import ConstraintSpec
from .distribution import MaskedLMDistribution
from .gaps import GapTemplate, LengthPrior, parse_gap
from .masked_lm import MaskedLM
from .target import DerivedTarget, Evaluation, Target

__all__ = ["GapTarget", "GapConstraints"]


class GapTarget(DerivedTarget):
    """``pi(L) exp(-E/T)`` over the loops of a variable gap, as padded states of the longest template.

    Parameters
    ----------
    mlm : MaskedLM
    template : str or GapTemplate
        Text with one variable gap (``'CAR[MASK]{10,16}WGQG'``), or its :func:`parse_gap`.
    prior : LengthPrior, optional
        ``pi(L)`` (default uniform over the gap). Its lengths must be contiguous: a kernel moves
        one length at a time and could never cross a hole.
    energy, temperature :
        As :class:`~mlm_ppl.MaskedLMDistribution`'s.
    constraints : ConstraintSpec, optional
        Bound to each length's template (:meth:`ConstraintSpec.constrain
        <mlm_ppl.models.constraints.ConstraintSpec.constrain>`); a rule that does not fit a
        length (a position past its end) is a ValueError naming the length.

    The base (:attr:`base`, what ``template``, ``free_positions`` and ``allowed`` describe) is
    the distribution of the prior's longest length; each length's own is :meth:`target`.
    """

    def __init__(
        self,
        mlm: MaskedLM,
        template: str | GapTemplate,
        prior: LengthPrior | None = None,
        *,
        energy: str = "norm",
        temperature: float = 1.0,
        constraints: ConstraintSpec | None = None,
    ) -> None:
        mask, limit = mlm.vocab[mlm.mask_id], mlm.max_length
        gap = template if isinstance(template, GapTemplate) else parse_gap(template, mask, limit)
        if gap is None:
            raise ValueError(
                f"template {template!r} has no variable gap MASK{{a,b}}; sample a fixed template with "
                "MaskedLMDistribution"
            )
        shortest = mlm.encode([gap.template(gap.lo)], allow_mask=True).input_ids.shape[1]
        gap.check_fits(mlm.max_length, int(shortest))  # before anything is built per length
        prior = LengthPrior.uniform(gap) if prior is None else prior
        lengths = sorted(prior.weights)
        if not lengths or not set(lengths) <= set(gap.lengths):
            raise ValueError(f"the length prior names lengths {lengths} outside the gap's {gap.lo}..{gap.hi}")
        if lengths != list(range(lengths[0], lengths[-1] + 1)):
            raise ValueError(
                f"the prior's lengths {lengths} have a hole: a chain moves one length at a time and could never "
                "cross it; give every length between the shortest and the longest a weight > 0"
            )
        self.gap, self.prior, self.lengths = gap, prior, lengths
        self.shortest, self.longest = lengths[0], lengths[-1]
        self._mlm, self._energy, self._temperature = mlm, energy, temperature
        self.spec = constraints
        self._targets: dict[int, Target] = {}
        super().__init__(self.target(self.longest))  # checks the longest template now
        for L in lengths:  # and each length's constraints
            self.target(L)
        self.pad_id = int(mlm.pad_id)
        if bool((self.base.template == self.pad_id).any()):
            raise ValueError("the template holds the model's pad token, which marks a gap's absent positions")
        self.gap_start = gap.before.count(gap.mask)  # the gap's first free site (index among the free sites)
        self.gap_slots = self.base.free_positions[self.gap_start : self.gap_start + self.longest]  # token indices

    # ------------------------------------------------------------------ each length
    def target(self, length: int) -> Target:
        """The fixed-length target of gap length ``length`` (``exp(-E/T)``, constrained by the spec;
        no prior)."""
        if length not in self._targets:
            dist = MaskedLMDistribution(
                self._mlm, self.gap.template(length), energy=self._energy, temperature=self._temperature
            )
            if self.spec is None:
                self._targets[length] = dist
            else:
                try:
                    self._targets[length] = self.spec.constrain(dist)
                except (TypeError, ValueError) as err:
                    raise ValueError(f"constraints at gap length {length}: {err}") from None
        return self._targets[length]

    def map_targets(self, make: Callable[[Target], Target]) -> GapTarget:
        """This gap with each length's target replaced by ``make(target(L))`` (a target derived from
        it with the same template: a surrogate's), the prior and padding unchanged."""
        out = copy.copy(self)
        out._targets = {L: make(self.target(L)) for L in self.lengths}
        out.base = out._targets[self.longest]
        for cached in ("constraints", "record"):
            out.__dict__.pop(cached, None)
        return out

    @cached_property
    def constraints(self) -> GapConstraints | None:
        """The spec's rules and experts read on padded states (None without a spec)."""
        return None if self.spec is None else GapConstraints(self)

    def log_prior(self, length: int) -> float:
        """``log pi(length)``; ``-inf`` for a length the prior does not weigh."""
        w = self.prior.weights.get(length, 0.0)
        return math.log(w) if w > 0 else float("-inf")

    def free_index(self, length: int) -> Tensor:
        """``(F_L,)`` where each free site of the length-``length`` template is among the padded
        state's free sites (the gap's first ``length``, the others as they are)."""
        F = self.target(length).num_free
        k = torch.arange(F)
        return torch.where(k < self.gap_start + length, k, k + self.longest - length)

    # ------------------------------------------------------------------ padding
    def length_of(self, tokens: Tensor) -> Tensor:
        """``(N,)`` gap lengths of padded states ``(N, T)``."""
        return self.longest - (tokens[:, self.gap_slots] == self.pad_id).sum(-1)

    def _cut(self, length: int) -> int:
        return int(self.gap_slots[0]) + length  # the first index after a length-``length`` loop

    def pad(self, tokens: Tensor, length: int) -> Tensor:
        """States ``(N, T_L)`` of gap length ``length`` as padded states ``(N, T)``."""
        at = self._cut(length)
        fill = torch.full((tokens.shape[0], self.longest - length), self.pad_id, dtype=tokens.dtype)
        return torch.cat([tokens[:, :at], fill, tokens[:, at:]], 1)

    def unpad(self, tokens: Tensor, length: int) -> Tensor:
        """Padded states ``(N, T)``, all of gap length ``length``, as ``(N, T_L)``."""
        at = self._cut(length)
        return torch.cat([tokens[:, :at], tokens[:, at + self.longest - length :]], 1)

    def groups(self, tokens: Tensor) -> list[tuple[int, Tensor]]:
        """``(length, rows)`` of padded states ``(N, T)``, one per length present."""
        lengths = self.length_of(tokens)
        return [(int(L), (lengths == L).nonzero().flatten()) for L in torch.unique(lengths)]

    # ------------------------------------------------------------------ the Target contract
    def evaluate(self, tokens: Tensor) -> Evaluation:
        """Energy of each padded state at its own length, ``log pi(L)`` as its log-factor, and the
        conditionals of its free sites (zeros at the gap's absent positions)."""
        N = tokens.shape[0]
        out: Evaluation | None = None
        for L, rows in self.groups(tokens):
            ev = self.pad_evaluation(L, self.target(L).evaluate(self.unpad(tokens[rows], L)))
            if out is None:  # in the model's dtype, on the CPU
                out = Evaluation(
                    torch.empty(N, dtype=ev.energy.dtype),
                    torch.empty(N, dtype=ev.log_factor.dtype),
                    torch.empty((N, *ev.cond_logits.shape[1:]), dtype=ev.cond_logits.dtype),
                )
            out.energy[rows], out.log_factor[rows], out.cond_logits[rows] = ev
        return self.base.evaluate(tokens) if out is None else out  # None: no states

    def pad_evaluation(self, length: int, ev: Evaluation) -> Evaluation:
        """An evaluation of length-``length`` states ``(N, T_L)`` as their padded states': ``log
        pi(L)`` added to the log-factor, the conditionals at the padded state's free sites (zeros at
        the gap's absent positions), on the CPU."""
        cond = torch.zeros((ev.energy.shape[0], self.num_free, self.vocab_size), dtype=ev.cond_logits.dtype)
        cond[:, self.free_index(length)] = ev.cond_logits.cpu()
        factor = (ev.log_factor.cpu().double() + self.log_prior(length)).to(ev.log_factor.dtype)
        return Evaluation(ev.energy.cpu(), factor, cond)

    def forbidden(self, tokens: Tensor) -> Tensor:
        out = torch.zeros(tokens.shape[0], dtype=torch.bool)
        for L, rows in self.groups(tokens):
            out[rows] = self.target(L).forbidden(self.unpad(tokens[rows], L))
        return out

    def validate_tokens(self, tokens: Tensor) -> None:
        """A ValueError unless ``tokens`` ``(N, T)`` are padded states: the gap's pads after its
        tokens, a length the prior weighs, and the rest valid for that length's template."""
        if tokens.dim() != 2 or tokens.shape[1] != self.base.template.numel():
            raise ValueError(
                f"states of a variable gap have shape (N, {self.base.template.numel()}) (the longest template, "
                f"shorter loops padded), got {tuple(tokens.shape)}"
            )
        pads = tokens[:, self.gap_slots] == self.pad_id
        if bool((pads[:, :-1] & ~pads[:, 1:]).any()):
            raise ValueError("a state's gap has a pad token before a residue; pads follow the loop's last position")
        for L, rows in self.groups(tokens):
            if L not in self.prior.weights:
                raise ValueError(f"a state has gap length {L}, outside the prior's {self.shortest}..{self.longest}")
            self.target(L).validate_tokens(self.unpad(tokens[rows], L))

    # ------------------------------------------------------------------ for the record
    @cached_property
    def record(self) -> dict[str, Any]:
        """What a run records of the gap: the prior (``length_prior``, by length), the padded
        states' gap positions and the pad token."""
        return dict(
            length_prior=self.prior.record(),
            gap_positions=self.gap_slots.tolist(),
            pad_id=self.pad_id,
        )

    def __repr__(self) -> str:
        return f"GapTarget(lengths {self.shortest}..{self.longest}, prior {self.prior.source})"


class GapConstraints:
    """The rules and experts of a :class:`GapTarget`'s spec on padded states: each state read by
    its own length's bound spec (``BoundConstraints``), what a run's record and its starts read."""

    def __init__(self, target: GapTarget) -> None:
        self.target = target
        self.spec = target.spec

    def _per_length(self, tokens: Tensor, read: str, **options: Any) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for L, rows in self.target.groups(tokens):
            bound = self.target.target(L).constraints  # type: ignore[attr-defined]
            for name, values in getattr(bound, read)(self.target.unpad(tokens[rows], L), **options).items():
                if name not in out:
                    out[name] = torch.zeros(tokens.shape[0], dtype=values.dtype)
                out[name][rows] = values
        return out

    def violations(self, tokens: Tensor, *, degrees: bool = False) -> dict[str, Tensor]:
        """``{rule name: (N,) bool}``, True where the state breaks the rule at its length; with
        ``degrees``, how far (as :meth:`~mlm_ppl.models.constraints.BoundConstraints.violations`)."""
        return self._per_length(tokens, "violations", degrees=degrees)

    def feasible(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where the state breaks no rule at its length."""
        broken = self.violations(tokens)
        return ~torch.stack(list(broken.values())).any(0) if broken else torch.ones(tokens.shape[0], dtype=torch.bool)

    def expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        """``{expert name: (N,) float64}``, each expert's value at the state's length."""
        return self._per_length(tokens, "expert_values")
