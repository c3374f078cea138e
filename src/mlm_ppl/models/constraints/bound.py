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
    """A :class:`Forbid` match lying wholly in the fixed part of the template: reported, not infeasible.

    Parameters
    ----------
    rule : str
        The name of the :class:`Forbid` rule.
    start : int
        Where the match starts: an offset in the decoded sequence (a residue index for
        residue-level models).
    end : int
        Where the match ends (exclusive), likewise.
    text : str
        The matched text.

    Examples
    --------
    >>> from mlm_ppl.models.constraints import FrameworkMatch
    >>> print(FrameworkMatch("no-dd", 0, 2, "DD"))
    no-dd: 'DD' at 0-2 (fixed framework)
    """

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
    """A :class:`~mlm_ppl.ConstraintSpec` checked against one target, evaluating rules and experts on states.

    It holds the spec's alphabets and framework report, and gives the rule and expert values of
    states; :meth:`~mlm_ppl.ConstraintSpec.bind` makes one.

    Parameters
    ----------
    spec : ConstraintSpec
        The spec.
    target : Target
        A target with a masked LM (a :class:`~mlm_ppl.MaskedLMDistribution`, or a target built on
        one): its ``mlm`` decodes states for the rules and experts.

    Attributes
    ----------
    spec : ConstraintSpec
        The spec.
    target : Target
        The target it is bound to.
    allowed : torch.Tensor
        ``(F, V)`` bool, the alphabet of each free position (the target's allowed tokens, ordinary
        ones for a bare distribution, that every :class:`Allowed` rule at that position allows).
    alphabets_only : bool
        The spec has :class:`Allowed` rules alone (no other rule, no expert): its log-factor is 0
        on the alphabets and ``-inf`` elsewhere, so a kernel whose proposals keep to
        ``allowed`` samples it without reading the log-factor.
    framework_matches : tuple of FrameworkMatch
        :class:`Forbid` matches wholly inside the fixed template: reported once here, never
        infeasible (found in the template filled with each free position's first allowed token).

    Raises
    ------
    TypeError
        Where ``target`` has no masked LM.
    ValueError
        Where a token of an :class:`Allowed` rule is not an ordinary vocabulary entry, a position
        is outside the template's free positions, an alphabet leaves a free position with no
        token, a :class:`Novel` rule has no loop of the designed loop's length (or one with a token
        outside the vocabulary), a :class:`Mutations` rule has no reference loop or one that does
        not fit the designed positions, or an :class:`ExpertBound` names no expert of the spec, is
        relative without the spec's ``reference``, or has ``min > max``.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Allowed, hydropathy
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]E")
    >>> bound = ConstraintSpec([Allowed("no-cys", "ADE")], [hydropathy(weight=-1.0)]).bind(dist)
    >>> bound.allowed.shape  # (F, V)
    torch.Size([3, 9])
    >>> log_factor = bound.log_factor(dist.encode(["CADEE", "CCDEE"]))
    >>> bool(log_factor[0] > 0), log_factor[1].item()  # -1.0 * mean hydropathy of ADE; -inf: C
    (True, -inf)
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
        """The template with the spec's ``reference`` loop on the designed positions.

        Only for a spec with a ``reference``.

        Returns
        -------
        torch.Tensor
            Shape ``(L,)``, long: the token ids of that state.

        Raises
        ------
        ValueError
            Where the spec has no ``reference``, or the reference loop does not have one token of
            the model's vocabulary per free position.
        """
        if self.spec.reference is None:  # an assert used to say so (and nothing under python -O)
            raise ValueError(
                "the spec has no reference loop: give one (reference = LOOP in the spec, --reference LOOP)"
            )
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
        """The framework matches, one per line.

        Returns
        -------
        str
            Each of ``framework_matches`` as text, one per line; empty when there are none.
        """
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
        """Which states break each rule (or, with ``degrees``, by how much).

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long: complete states of the target.
        degrees : bool, optional
            False (default): True where the state breaks the rule. True: float64, how far: 0 or 1,
            except a :class:`Mutations` rule's positions too many or too few and an
            :class:`ExpertBound`'s 1 plus the value's distance past its bound (what a repair search
            lowers step by step).

        Returns
        -------
        dict of str to torch.Tensor
            Rule name (every rule of the spec's ``all_rules``, in order) to shape
            ``(N,)``: bool, or float64 with ``degrees``.

        Raises
        ------
        ValueError, TypeError
            Where ``tokens`` is not an ``(N, L)`` tensor of the target's states (as its
            ``validate_tokens`` says), or an expert read by an :class:`ExpertBound` fails (as for
            :meth:`expert_values`).
        """
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
        """Whether each state breaks no rule.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long: complete states of the target.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, bool: True where the state breaks no rule.

        Raises
        ------
        ValueError, TypeError
            As for :meth:`violations`.
        """
        return self._feasible(self._check(tokens))

    def _feasible(self, tokens: Tensor) -> Tensor:
        ok = torch.ones(tokens.shape[0], dtype=torch.bool)
        for broken in self._violations(tokens).values():
            ok &= ~broken
        return ok

    # -- experts
    def expert_values(self, tokens: Tensor) -> dict[str, Tensor]:
        """Each expert's values ``f_k``, unweighted.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long: complete states of the target.

        Returns
        -------
        dict of str to torch.Tensor
            Expert name (every expert of the spec's ``all_experts``, in order) to
            shape ``(N,)``, float64.

        Raises
        ------
        ValueError
            Where ``tokens`` is not an ``(N, L)`` tensor of the target's states, or an expert returns
            other than ``N`` values or a non-finite one (the message names the expert).
        TypeError
            Where an expert returns something that is not numbers, or the target's
            ``validate_tokens`` refuses the type of ``tokens``.
        """
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
        """The log-factor: ``sum_k w_k f_k(x)`` on feasible states, ``-inf`` on the others.

        Experts run on the feasible states only.

        Parameters
        ----------
        tokens : torch.Tensor
            Shape ``(N, L)``, long: complete states of the target.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, float64.

        Raises
        ------
        ValueError, TypeError
            As for :meth:`violations` and :meth:`expert_values`.
        """
        tokens = self._check(tokens)
        ok = self._feasible(tokens)
        out = torch.full((tokens.shape[0],), -math.inf, dtype=torch.float64)
        if bool(ok.any()):
            out[ok] = self.spec.expert_sum(self._expert_values(tokens[ok]), int(ok.sum()))
        return out
