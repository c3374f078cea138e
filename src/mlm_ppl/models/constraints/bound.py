"""A spec bound to one target: alphabets per free position, the framework report, and the rule and
expert values of states."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..target import Target
from ..tokens import TokenCodec
from .rules import Allowed, ExpertBound, Forbid, Mutations, Novel, OddCount, Require, loop_ids

if TYPE_CHECKING:
    from .spec import ConstraintSpec


@dataclass(frozen=True)
class FrameworkMatch:
    """A :class:`Forbid` match lying wholly in the fixed part of the template: reported, not
    infeasible. ``start``/``end`` are offsets in the decoded sequence (residue indices for
    residue-level models)."""

    rule: str
    start: int
    end: int
    text: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.text!r} at {self.start}-{self.end} (fixed framework)"


@dataclass(frozen=True)
class _Decoded:
    """States as text: ``sequences`` (whole), ``designed`` (free positions only) and, per state and
    free position, the character span of that token in ``sequences``."""

    sequences: list[str]
    designed: list[str]
    spans: list[list[tuple[int, int]]]


class BoundConstraints:
    """A :class:`ConstraintSpec` checked against one target: its alphabets, framework report,
    and the rule and expert values of states.

    Attributes
    ----------
    allowed : Tensor
        ``(F, V)`` bool, the alphabet of each free position (the target's allowed tokens, ordinary
        ones for a bare distribution, that every :class:`Allowed` rule at that position allows).
    alphabets_only : bool
        The spec has :class:`Allowed` rules alone (no other rule, no expert): its log-factor is 0
        on the alphabets and ``-inf`` elsewhere, so a kernel whose proposals keep to
        :attr:`allowed` samples it without reading the log-factor.
    framework_matches : tuple of FrameworkMatch
        :class:`Forbid` matches wholly inside the fixed template: reported once here, never
        infeasible (found in the template filled with each free position's first allowed token).
    """

    _CACHE_SIZE = 1 << 16

    def __init__(self, spec: ConstraintSpec, target: Target) -> None:
        codec = getattr(target, "mlm", None)
        if not isinstance(codec, TokenCodec):
            raise TypeError(
                f"constraints read decoded sequences, so they need a target with a masked LM (a MaskedLMDistribution "
                f"or a target built on one); got {type(target).__name__}"
            )
        self.spec = spec
        self.target = target
        self.codec = codec
        self.free_positions = target.free_positions.cpu()
        F, V = int(target.num_free), int(target.vocab_size)
        allowed = target.allowed.cpu().expand(F, V).clone()  # a constrained target's own alphabets narrow further
        self._alphabets: list[tuple[Allowed, Tensor, Tensor]] = []  # (rule, free indices, (V,) mask)
        for rule in spec.all_rules:
            if not isinstance(rule, Allowed):
                continue
            mask = rule.token_mask(codec)
            wanted = range(F) if rule.positions is None else rule.positions
            indices = [self._free_index(rule, k, F) for k in wanted]
            for k in indices:
                narrowed = allowed[k] & mask
                if not bool(narrowed.any()):
                    raise ValueError(
                        f"rule {rule.name!r} leaves free position {k} (token position "
                        f"{int(self.free_positions[k])}) with no allowed token: its tokens and those of the "
                        "target and of the rules before it have nothing in common"
                    )
                allowed[k] = narrowed
            self._alphabets.append((rule, torch.tensor(indices, dtype=torch.long), mask))
        self.allowed: Tensor = allowed
        self.alphabets_only = not spec.all_experts and all(isinstance(r, Allowed) for r in spec.all_rules)
        self._odd = [(r, r.token_id(codec)) for r in spec.all_rules if isinstance(r, OddCount)]
        self._forbid = [r for r in spec.all_rules if isinstance(r, Forbid)]
        self._require = [r for r in spec.all_rules if isinstance(r, Require)]
        self._novel = [(r, r.token_ids(codec, F)) for r in spec.all_rules if isinstance(r, Novel)]
        self._mutations = [
            (r, r.reference_ids(codec, F, spec.reference)) for r in spec.all_rules if isinstance(r, Mutations)
        ]
        self._cache: dict[tuple[int, ...], tuple[str, str, list[tuple[int, int]]]] = {}
        self._bounds = self._expert_bounds()
        self.framework_matches: tuple[FrameworkMatch, ...] = self._framework_matches()

    def _expert_bounds(self) -> list[tuple[ExpertBound, float, float]]:
        """Each :class:`ExpertBound` rule with its ``(low, high)``, a relative bound read at the
        expert's value on the template with the spec's ``reference`` on the designed positions."""
        spec, experts = self.spec, {e.name: e for e in self.spec.all_experts}
        out = []
        reference_values: dict[str, Tensor] | None = None
        for rule in spec.all_rules:
            if not isinstance(rule, ExpertBound):
                continue
            if rule.expert not in experts:
                raise ValueError(
                    f"rule {rule.name!r}: the spec has no expert named {rule.expert!r} (its experts: "
                    f"{', '.join(experts) or 'none'}); add it, with weight 0 to use it as a rule alone"
                )
            value = None
            if rule.relative:
                if spec.reference is None:
                    raise ValueError(
                        f"rule {rule.name!r}: a bound relative to the reference needs the spec's reference loop "
                        "(reference = ..., --reference LOOP)"
                    )
                if reference_values is None:
                    reference_values = self._expert_values(self.reference_state()[None])
                value = float(reference_values[rule.expert][0])
            out.append((rule, *rule.limits(value)))
        return out

    def reference_state(self) -> Tensor:
        """``(L,)`` the template with the spec's ``reference`` loop on the designed positions."""
        assert self.spec.reference is not None
        F = int(self.free_positions.numel())
        state = self.target.template.cpu().clone()
        state[self.free_positions] = torch.tensor(loop_ids(self.codec, self.spec.reference, F, "reference"))
        return state

    @staticmethod
    def _free_index(rule: Allowed, k: int, F: int) -> int:
        if not -F <= k < F:
            raise ValueError(
                f"rule {rule.name!r}: free position {k} is out of range; the template has {F} free positions "
                f"(0 .. {F - 1}, negatives count from the end)"
            )
        return k % F

    def report(self) -> str:
        """The framework matches, one per line (empty when there are none)."""
        return "\n".join(str(m) for m in self.framework_matches)

    # -- decoding
    def _decode(self, tokens: Tensor) -> _Decoded:
        seqs, designed, spans = [], [], []
        for row in tokens.tolist():
            key = tuple(row)
            hit = self._cache.get(key)
            if hit is None:
                if len(self._cache) >= self._CACHE_SIZE:
                    self._cache.clear()
                hit = self._cache[key] = self._decode_row(row)
            seqs.append(hit[0])
            designed.append(hit[1])
            spans.append(hit[2])
        return _Decoded(seqs, designed, spans)

    def _decode_row(self, row: list[int]) -> tuple[str, str, list[tuple[int, int]]]:
        codec = self.codec
        ordinary = codec.ordinary_mask
        kept = [(p, t) for p, t in enumerate(row) if 0 <= t < codec.vocab_size and bool(ordinary[t])]
        free = set(self.free_positions.tolist())
        ids = [t for _, t in kept]
        text = codec.decode(ids)[0]
        span_of: dict[int, tuple[int, int]] = {}
        if codec.residue_level:
            offset = 0
            for p, t in kept:
                piece = codec.vocab[t]
                span_of[p] = (offset, offset + len(piece))
                offset += len(piece)
        else:  # text: a token's span is what it adds to the decoded prefix (spaces stripped)
            previous = 0
            for k, (p, _) in enumerate(kept):
                prefix = codec.decode(ids[: k + 1])[0]
                if not text.startswith(prefix):  # the tokenizer's clean-up rewrote the prefix: be conservative
                    span_of[p] = (0, len(text))
                    continue
                start = previous
                while start < len(prefix) and prefix[start].isspace():
                    start += 1
                span_of[p] = (start, len(prefix))
                previous = len(prefix)
        free_ids = [row[p] for p in self.free_positions.tolist()]
        designed = codec.decode(free_ids)[0]
        spans = [span_of.get(p, (0, 0)) for p in sorted(free)]
        return text, designed, spans

    # -- rules
    @staticmethod
    def _matches(regex: Any, text: str) -> Iterator[Any]:
        """Every match, one per start position (so overlapping ones too)."""
        pos = 0
        while pos <= len(text):
            m = regex.search(text, pos)
            if m is None:
                return
            yield m
            pos = m.start() + 1

    @staticmethod
    def _touches(m: Any, spans: list[tuple[int, int]]) -> bool:
        return any(s < m.end() and m.start() < e for s, e in spans if e > s)

    def _framework_matches(self) -> tuple[FrameworkMatch, ...]:
        if not self._forbid:
            return ()
        state = self.target.template.cpu().clone()
        state[self.free_positions] = self.allowed.long().argmax(-1)  # each position's first allowed token
        decoded = self._decode(state[None])
        text, spans = decoded.sequences[0], decoded.spans[0]
        found = []
        for rule in self._forbid:
            for m in self._matches(rule.regex, text):
                if m.end() > m.start() and not self._touches(m, spans):
                    found.append(FrameworkMatch(rule.name, m.start(), m.end(), m.group()))
        return tuple(found)

    def _check(self, tokens: Tensor) -> Tensor:
        if not isinstance(tokens, Tensor) or tokens.dim() != 2:
            raise ValueError(f"tokens must be a (N, L) tensor of states, got {getattr(tokens, 'shape', tokens)!r}")
        self.target.validate_tokens(tokens)
        return tokens.cpu()

    def violations(self, tokens: Tensor, *, degrees: bool = False) -> dict[str, Tensor]:
        """``{rule name: (N,) bool}``, True where the state breaks the rule; with ``degrees``, ``(N,)``
        float64, how far: 0 or 1, except a :class:`Mutations` rule's positions too many or too few
        and an :class:`ExpertBound`'s 1 plus the value's distance past its bound (what a repair
        search lowers step by step)."""
        found = self._violations(self._check(tokens), degrees=degrees)
        return {k: v.double() for k, v in found.items()} if degrees else found

    def _violations(self, tokens: Tensor, degrees: bool = False) -> dict[str, Tensor]:
        N = tokens.shape[0]
        free = tokens[:, self.free_positions]  # (N, F)
        out: dict[str, Tensor] = {}
        for rule, indices, mask in self._alphabets:
            out[rule.name] = ~mask[free[:, indices]].all(-1)
        for odd, token_id in self._odd:
            out[odd.name] = (free == token_id).sum(-1) % 2 == 1
        for novel, loops in self._novel:  # (M, F): the known loops of the designed loop's length
            out[novel.name] = ((free[:, None, :] != loops[None]).sum(-1) < novel.min_distance).any(-1)
        for mutations, reference in self._mutations:  # (F,): the reference loop
            excess = mutations.excess((free != reference[None]).sum(-1))
            out[mutations.name] = excess if degrees else excess > 0
        if self._bounds:
            values = self._expert_values(tokens, {bound.expert for bound, _, _ in self._bounds})
            for bound, low, high in self._bounds:
                v = values[bound.expert]
                past = (low - v).clamp(min=0) + (v - high).clamp(min=0)
                broken = (v < low) | (v > high)
                out[bound.name] = torch.where(broken, 1 + past, 0.0) if degrees else broken
        if self._forbid or self._require:
            decoded = self._decode(tokens)
            for forbid in self._forbid:
                out[forbid.name] = torch.tensor(
                    [
                        any(m.end() > m.start() and self._touches(m, spans) for m in self._matches(forbid.regex, text))
                        for text, spans in zip(decoded.sequences, decoded.spans)
                    ],
                    dtype=torch.bool,
                ).reshape(N)
            for req in self._require:
                out[req.name] = torch.tensor(
                    [req.regex.search(text) is None for text in decoded.sequences], dtype=torch.bool
                ).reshape(N)
        return {r.name: out[r.name] for r in self.spec.all_rules}

    def feasible(self, tokens: Tensor) -> Tensor:
        """``(N,)`` bool, True where the state breaks no rule."""
        return self._feasible(self._check(tokens))

    def _feasible(self, tokens: Tensor) -> Tensor:
        ok = torch.ones(tokens.shape[0], dtype=torch.bool)
        for broken in self._violations(tokens).values():
            ok &= ~broken
        return ok

    # -- experts
    def expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        """``{expert name: (N,) float64}``, each expert's value ``f_k`` (unweighted); a non-finite
        value is a ValueError naming the expert."""
        return self._expert_values(self._check(tokens))

    def _expert_values(self, tokens: Tensor, only: set[str] | None = None) -> dict[str, Tensor]:
        N = tokens.shape[0]
        experts = [e for e in self.spec.all_experts if only is None or e.name in only]
        decoded = self._decode(tokens) if any(e.takes != "tokens" for e in experts) else None
        out: dict[str, Tensor] = {}
        for expert in experts:
            if expert.takes == "tokens":
                arg: Any = tokens.clone()
            else:
                assert decoded is not None
                arg = list(decoded.sequences if expert.takes == "sequences" else decoded.designed)
            raw = expert.function(arg)
            try:
                values = torch.as_tensor(raw, dtype=torch.float64).detach().cpu()
            except (TypeError, ValueError, RuntimeError) as err:
                raise TypeError(f"expert {expert.name!r} returned {type(raw).__name__}, not numbers: {err}") from None
            if values.numel() != N or values.dim() > 1:
                raise ValueError(
                    f"expert {expert.name!r} returned shape {tuple(values.shape)} for {N} states; it must give ({N},)"
                )
            values = values.reshape(N)
            bad = ~torch.isfinite(values)
            if bool(bad.any()):
                n = int(bad.nonzero()[0])
                raise ValueError(
                    f"expert {expert.name!r} returned {float(values[n])} for state {n}; expert values must be finite"
                )
            out[expert.name] = values
        return out

    def log_factor(self, tokens: Tensor) -> Tensor:
        """``(N,)`` float64: ``sum_k w_k f_k(x)`` on feasible states, ``-inf`` on the others
        (experts run on the feasible states only)."""
        tokens = self._check(tokens)
        ok = self._feasible(tokens)
        out = torch.full((tokens.shape[0],), -math.inf, dtype=torch.float64)
        if bool(ok.any()):
            out[ok] = self.spec.expert_sum(self._expert_values(tokens[ok]), int(ok.sum()))
        return out
