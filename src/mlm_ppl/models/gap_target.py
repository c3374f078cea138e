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

    A state of gap length ``L`` is the length-``L`` sequence with ``longest - L`` pad tokens after
    its loop, so every state has the longest template's shape. The base (``base``, what
    ``template``, ``free_positions`` and ``allowed`` describe) is the distribution of the prior's
    longest length; each length's own is :meth:`target`. Only a kernel that moves the length
    samples it (``capabilities.lengths``: the ``gap-jump`` kernel, and surrogate-MH around its
    moves); any other refuses it, since it would keep every chain at its starting length.

    Parameters
    ----------
    mlm : MaskedLM
        The masked language model whose energy defines each length's distribution.
    template : str or GapTemplate
        Text with one variable gap (``'CAR[MASK]{10,16}WGQG'``), or the
        :class:`~mlm_ppl.models.GapTemplate` parsed from it.
    prior : LengthPrior or None, optional
        ``pi(L)``; None (the default): uniform over the gap. Its lengths must be contiguous: a
        kernel moves one length at a time and could never cross a hole.
    energy : {"norm", "raw"}, optional
        As :class:`~mlm_ppl.MaskedLMDistribution`'s (default ``"norm"``).
    temperature : float, optional
        As :class:`~mlm_ppl.MaskedLMDistribution`'s (default 1).
    constraints : ConstraintSpec or None, optional
        Bound to each length's template (:meth:`~mlm_ppl.ConstraintSpec.constrain`); a rule that
        does not fit a length (a position past its end) is a ValueError naming the length.

    Attributes
    ----------
    gap : GapTemplate
        The gap's template.
    prior : LengthPrior
        ``pi(L)``, the uniform prior when none was given.
    lengths : list of int
        The prior's lengths, ascending.
    shortest : int
        The shortest of them.
    longest : int
        The longest of them.
    spec : ConstraintSpec or None
        The spec given as ``constraints``.
    pad_id : int
        The model's pad token id, which marks the gap's absent positions.
    gap_start : int
        The gap's first free site, as an index among the free sites.
    gap_slots : torch.Tensor
        Shape ``(longest,)``, long, the token indices of the gap's positions in a padded state.

    Raises
    ------
    ValueError
        When ``template`` has no variable gap, its longest template does not fit the model or
        holds the model's pad token, the prior names lengths outside the gap or has a hole, or
        the constraints do not fit a length's template; and where
        :class:`~mlm_ppl.MaskedLMDistribution` refuses a length's template or ``energy``.
    TypeError
        Where :class:`~mlm_ppl.MaskedLMDistribution` refuses ``temperature``.

    Examples
    --------
    >>> from mlm_ppl.models import GapTarget
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = GapTarget(tiny_residue_bert("ACDE", seed=1), "A[MASK]{1,3}E")  # a uniform prior
    >>> target.lengths, target.template.tolist()  # the longest template: [CLS] A, three masks, E [SEP]
    ([1, 2, 3], [2, 5, 4, 4, 4, 8, 3])
    >>> state = target.pad(target.target(2).encode(["ACDE"]), 2)  # a loop of 2, then one pad (id 0)
    >>> state.tolist(), target.length_of(state).tolist()
    ([[2, 5, 6, 7, 0, 8, 3]], [2])
    >>> ev = target.evaluate(state)  # E at length 2, and log pi(2) = log(1/3) as the log-factor
    >>> ev.energy.shape, round(ev.log_factor.item(), 4)
    (torch.Size([1]), -1.0986)
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
        """The fixed-length target of gap length ``length``, without the prior.

        ``exp(-E/T)``, constrained by the spec; built once per length and kept.

        Parameters
        ----------
        length : int
            A gap length, within the gap's ``lo..hi``.

        Returns
        -------
        Target
            The length's :class:`~mlm_ppl.MaskedLMDistribution`, under the spec
            (:class:`~mlm_ppl.models.ConstraintTarget`) when there is one; after
            :meth:`map_targets`, what its ``make`` made of it.

        Raises
        ------
        ValueError
            When ``length`` is outside the gap, the length's template does not fit the model, or
            the spec does not fit it (the message names the length).
        """
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
        """This gap with each length's target replaced by ``make(target(L))``, the prior and padding unchanged.

        What surrogate-MH's inner chain runs on: ``make`` derives a target with the same template
        (a surrogate's) from each length's.

        Parameters
        ----------
        make : callable
            Takes a length's target, returns a target derived from it with the same template.

        Returns
        -------
        GapTarget
            A copy of this gap whose targets (and base) are ``make``'s; its ``constraints`` and
            ``record`` are read afresh.
        """
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
        """``log pi(length)``; ``-inf`` for a length the prior does not weigh.

        Parameters
        ----------
        length : int
            A gap length.

        Returns
        -------
        float
            The log of the length's prior weight.
        """
        w = self.prior.weights.get(length, 0.0)
        return math.log(w) if w > 0 else float("-inf")

    def free_index(self, length: int) -> Tensor:
        """Where each free site of the length-``length`` template is among the padded state's free sites.

        The gap's sites are its first ``length``; the others are as they are.

        Parameters
        ----------
        length : int
            A gap length of the prior.

        Returns
        -------
        torch.Tensor
            Shape ``(F_L,)``, long, an index among the padded state's free sites for each free site
            of the length's template.
        """
        F = self.target(length).num_free
        k = torch.arange(F)
        return torch.where(k < self.gap_start + length, k, k + self.longest - length)

    # ------------------------------------------------------------------ padding
    def length_of(self, tokens: Tensor) -> Tensor:
        """The gap lengths of padded states.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, long, each state's gap length.
        """
        return self.longest - (tokens[:, self.gap_slots] == self.pad_id).sum(-1)

    def _cut(self, length: int) -> int:
        return int(self.gap_slots[0]) + length  # the first index after a length-``length`` loop

    def pad(self, tokens: Tensor, length: int) -> Tensor:
        """States of gap length ``length`` as padded states.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T_L)``, states of the length-``length`` template.
        length : int
            Their gap length.

        Returns
        -------
        torch.Tensor
            Shape ``(N, T)``, the states with ``longest - length`` pad tokens after their loop.
        """
        at = self._cut(length)
        fill = torch.full((tokens.shape[0], self.longest - length), self.pad_id, dtype=tokens.dtype)
        return torch.cat([tokens[:, :at], fill, tokens[:, at:]], 1)

    def unpad(self, tokens: Tensor, length: int) -> Tensor:
        """Padded states, all of gap length ``length``, as states of that length's template.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.
        length : int
            Their gap length.

        Returns
        -------
        torch.Tensor
            Shape ``(N, T_L)``, the states without their pad tokens.
        """
        at = self._cut(length)
        return torch.cat([tokens[:, :at], tokens[:, at + self.longest - length :]], 1)

    def groups(self, tokens: Tensor) -> list[tuple[int, Tensor]]:
        """Padded states grouped by gap length, one group per length present.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        list of tuple of (int, torch.Tensor)
            ``(length, rows)`` in order of length, ``rows`` the long indices of that length's
            states.
        """
        lengths = self.length_of(tokens)
        return [(int(L), (lengths == L).nonzero().flatten()) for L in torch.unique(lengths)]

    # ------------------------------------------------------------------ the Target contract
    def evaluate(self, tokens: Tensor) -> Evaluation:
        """Each padded state's energy at its own length, ``log pi(L)`` as its log-factor, and its conditionals.

        The conditionals of a state's free sites are zeros at the gap's absent positions; everything
        is on the CPU.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        Evaluation
            The energies ``(N,)``, the log-factors ``(N,)`` (the length's target's plus
            ``log pi(L)``) and the conditionals ``(N, F, V)``.
        """
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
        """An evaluation of states of gap length ``length`` as their padded states' evaluation.

        ``log pi(L)`` is added to the log-factor and the conditionals are placed at the padded
        state's free sites (zeros at the gap's absent positions), on the CPU.

        Parameters
        ----------
        length : int
            The states' gap length.
        ev : Evaluation
            The evaluation of states ``(N, T_L)`` by ``target(length)``.

        Returns
        -------
        Evaluation
            The padded states' evaluation, conditionals of shape ``(N, F, V)``.
        """
        cond = torch.zeros((ev.energy.shape[0], self.num_free, self.vocab_size), dtype=ev.cond_logits.dtype)
        cond[:, self.free_index(length)] = ev.cond_logits.cpu()
        factor = (ev.log_factor.cpu().double() + self.log_prior(length)).to(ev.log_factor.dtype)
        return Evaluation(ev.energy.cpu(), factor, cond)

    def forbidden(self, tokens: Tensor) -> Tensor:
        """Which padded states their own length's target forbids from cheap checks alone.

        As :meth:`~mlm_ppl.models.Target.forbidden`, each state read at its own length.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, bool, True where the state is known to have log-factor ``-inf``.
        """
        out = torch.zeros(tokens.shape[0], dtype=torch.bool)
        for L, rows in self.groups(tokens):
            out[rows] = self.target(L).forbidden(self.unpad(tokens[rows], L))
        return out

    def validate_tokens(self, tokens: Tensor) -> None:
        """Check that ``tokens`` are padded states of the gap.

        A padded state has the gap's pads after its tokens, a length the prior weighs, and the
        rest valid for that length's template.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, the states to check.

        Raises
        ------
        ValueError
            When ``tokens`` do not have the longest template's shape ``(N, T)``, a gap has a pad
            before a residue, a state's length is one the prior does not weigh, or that length's
            target refuses the unpadded state (:meth:`~mlm_ppl.MaskedLMDistribution.validate_tokens`).
        TypeError
            Where that length's target refuses the ids' type (not ``torch.long``).
        """
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
        """What a run records of the gap, its prior, gap positions and pad token.

        ``length_prior`` (the prior by length, as :meth:`~mlm_ppl.models.LengthPrior.record` gives
        it), ``gap_positions`` (the padded states' gap positions) and ``pad_id``.
        """
        return dict(
            length_prior=self.prior.record(),
            gap_positions=self.gap_slots.tolist(),
            pad_id=self.pad_id,
        )

    def __repr__(self) -> str:
        return f"GapTarget(lengths {self.shortest}..{self.longest}, prior {self.prior.source})"


class GapConstraints:
    """The rules and experts of a :class:`GapTarget`'s spec on padded states, each at its own length.

    Each state is read by its own length's bound spec (``BoundConstraints``): what a run's record
    and its starts read. What :attr:`GapTarget.constraints` holds.

    Parameters
    ----------
    target : GapTarget
        The gap target, with a spec.

    Attributes
    ----------
    target : GapTarget
        The gap target.
    spec : ConstraintSpec
        Its spec.
    """

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
        """Which padded states break each rule at their own length (or, with ``degrees``, by how much).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.
        degrees : bool, optional
            False (default): True where the state breaks the rule. True: float64, how far (as
            :meth:`~mlm_ppl.models.constraints.BoundConstraints.violations`).

        Returns
        -------
        dict of str to torch.Tensor
            Rule name to shape ``(N,)``, bool, or float64 with ``degrees``.
        """
        return self._per_length(tokens, "violations", degrees=degrees)

    def feasible(self, tokens: Tensor) -> Tensor:
        """Which padded states break no rule at their own length.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, bool, True where the state breaks no rule.
        """
        broken = self.violations(tokens)
        return ~torch.stack(list(broken.values())).any(0) if broken else torch.ones(tokens.shape[0], dtype=torch.bool)

    def expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        """Each expert's values ``f_k``, unweighted, each padded state read at its own length.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, T)``, padded states.

        Returns
        -------
        dict of str to torch.Tensor
            Expert name to shape ``(N,)``, float64.
        """
        return self._per_length(tokens, "expert_values")
