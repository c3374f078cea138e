"""Hard rules: a state that breaks one is infeasible (``log_factor = -inf``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..tokens import TokenCodec
from .fields import FieldTypeError, FieldValueError, check_name, compile_pattern


@dataclass(frozen=True)
class Allowed:
    """The tokens a free position may hold.

    Parameters
    ----------
    name : str
    tokens : str or sequence of str
        The alphabet. A string is split into characters for residue-level models (spaces
        ignored) and into words at whitespace for text models; a sequence lists vocabulary
        entries one by one. Each must be an ordinary token of the model (checked at bind time).
    positions : sequence of int, optional
        Free-position indices the alphabet applies to (0 is the template's first mask token,
        -1 its last); default every free position. Several rules at one position intersect.

    A position fixed to one token is ``Allowed.fixed(name, position, token)``.
    """

    name: str
    tokens: str | tuple[str, ...]
    positions: tuple[int, ...] | None = None
    kind: ClassVar[str] = "allowed"
    _EMPTY: ClassVar[str] = "rule {!r} allows no token: an empty alphabet forbids everything"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        tokens = self.tokens
        if isinstance(tokens, str):
            if not tokens.strip():
                raise FieldValueError(self._EMPTY.format(self.name), "tokens")
        else:
            if isinstance(tokens, (bytes, bytearray)) or not isinstance(tokens, Sequence):
                raise FieldTypeError(
                    f"rule {self.name!r}: tokens must be a string or a list of strings, got {type(tokens).__name__}",
                    "tokens",
                )
            if not all(isinstance(t, str) and t for t in tokens):
                raise FieldTypeError(f"rule {self.name!r}: tokens must be non-empty strings, got {tokens!r}", "tokens")
            if not tokens:
                raise FieldValueError(self._EMPTY.format(self.name), "tokens")
            object.__setattr__(self, "tokens", tuple(tokens))
        if self.positions is not None:
            pos = self.positions
            if isinstance(pos, (str, bytes)) or not isinstance(pos, Sequence):
                raise FieldTypeError(
                    f"rule {self.name!r}: positions must be a list of integers, got {type(pos).__name__}", "positions"
                )
            if not all(isinstance(p, int) and not isinstance(p, bool) for p in pos):
                raise FieldTypeError(f"rule {self.name!r}: positions must be integers, got {list(pos)!r}", "positions")
            if not pos:
                raise FieldValueError(
                    f"rule {self.name!r}: positions is empty; leave it out to mean every free position", "positions"
                )
            object.__setattr__(self, "positions", tuple(pos))

    @classmethod
    def fixed(cls, name: str, position: int, token: str) -> Allowed:
        """Free position ``position`` holds ``token`` and nothing else."""
        return cls(name, (token,), (position,))

    def token_mask(self, codec: TokenCodec) -> Tensor:
        """``(V,)`` bool, the alphabet as token ids of ``codec``; a ValueError names a token that is
        not an ordinary vocabulary entry."""
        if isinstance(self.tokens, str):
            parts = list(self.tokens.replace(" ", "")) if codec.residue_level else self.tokens.split()
        else:
            parts = list(self.tokens)
        index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
        mask = torch.zeros(codec.vocab_size, dtype=torch.bool)
        for tok in parts:
            i = index.get(tok)
            if i is None or not bool(codec.ordinary_mask[i]):
                what = "a special token" if i is not None else "not in the vocabulary"
                raise FieldValueError(
                    f"rule {self.name!r}: token {tok!r} is {what} of model {codec.name!r}; allowed tokens are "
                    "ordinary vocabulary entries",
                    "tokens",
                )
            mask[i] = True
        return mask

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        out["tokens"] = self.tokens if isinstance(self.tokens, str) else list(self.tokens)
        if self.positions is not None:
            out["positions"] = list(self.positions)
        return out


@dataclass(frozen=True)
class _Pattern:
    """A named regular expression over the decoded sequence, compiled (and checked) when made."""

    name: str
    pattern: str
    regex: Any = field(init=False, repr=False, compare=False)  # RE2's (fields.compile_pattern)
    kind: ClassVar[str]

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        object.__setattr__(self, "regex", compile_pattern(self.name, self.pattern))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "pattern": self.pattern}


@dataclass(frozen=True)
class Forbid(_Pattern):
    """A pattern the sequence must not contain where it touches a designed position.

    A match counts only when its characters overlap those of a free position's token: a match
    lying wholly in the fixed framework cannot be designed away, so it is reported once at bind
    time (:attr:`BoundConstraints.framework_matches`) and does not make a state infeasible.
    Matches may overlap one another (each start position is tried). Anchors read the whole
    decoded sequence. Patterns are matched by RE2, in time linear in the sequence's length
    (no lookarounds or backreferences: such a pattern is refused when the rule is made).
    """

    kind: ClassVar[str] = "forbid"


@dataclass(frozen=True)
class Require(_Pattern):
    """A pattern that must match somewhere in the decoded sequence (framework included)."""

    kind: ClassVar[str] = "require"


@dataclass(frozen=True)
class OddCount:
    """Violated when an odd number of free positions hold ``token``.

    The antibody liability ``"unpaired-cysteine"`` is ``OddCount("unpaired-cysteine", "C")``:
    the framework's cysteines are taken to pair among themselves (the canonical intradomain
    disulfide), so an odd number of cysteines among the designed residues leaves at least one
    of them unpaired. An even number is not proof of pairing; that needs a structure.
    """

    name: str
    token: str
    kind: ClassVar[str] = "odd-count"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        if not isinstance(self.token, str) or not self.token:
            raise FieldTypeError(f"rule {self.name!r}: token must be a non-empty string, got {self.token!r}", "token")

    def token_id(self, codec: TokenCodec) -> int:
        return int(Allowed(self.name, (self.token,)).token_mask(codec).nonzero()[0])


@dataclass(frozen=True)
class Novel:
    """Violated where the designed loop (the tokens of the free positions, in order) lies at Hamming
    distance below ``min_distance`` from one of ``loops``: known sequences a design must stay away
    from (a training set, known binders, the parent's own loop). Each loop is a string of residues,
    or tokens separated by spaces; loops of another length than the designed loop never match, and
    a rule none of whose loops has that length is refused when bound. The loops themselves are the
    record (a file they were read from may change; the run's rule does not)."""

    name: str
    loops: tuple[str, ...]
    min_distance: int = 1
    kind: ClassVar[str] = "novel"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        loops = self.loops
        if isinstance(loops, (str, bytes)) or not isinstance(loops, Sequence):
            raise FieldTypeError(f"rule {self.name!r}: loops must be a list of strings", "loops")
        if not loops or not all(isinstance(x, str) and x.strip() for x in loops):
            raise FieldValueError(f"rule {self.name!r}: loops must be non-empty strings, at least one", "loops")
        object.__setattr__(self, "loops", tuple(x.strip() for x in loops))
        d = self.min_distance
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise FieldValueError(
                f"rule {self.name!r}: min_distance must be an integer >= 1, got {d!r}", "min_distance"
            )

    def token_ids(self, codec: TokenCodec, length: int) -> Tensor:
        """``(M, length)`` the loops of ``length`` tokens as ids of ``codec``; a ValueError names a
        token outside its vocabulary, or says that no loop has ``length`` tokens."""
        index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
        rows = []
        for loop in self.loops:
            parts = loop.split() if " " in loop else list(loop)
            if len(parts) != length:
                continue
            missing = [p for p in parts if p not in index]
            if missing:
                raise FieldValueError(
                    f"rule {self.name!r}: token {missing[0]!r} of loop {loop!r} is not in the vocabulary of model "
                    f"{codec.name!r}",
                    "loops",
                )
            rows.append([index[p] for p in parts])
        if not rows:
            raise FieldValueError(
                f"rule {self.name!r}: none of its {len(self.loops)} loops has the designed loop's {length} tokens; a "
                "novelty rule compares loops of one length: give loops of the designed positions",
                "loops",
            )
        return torch.tensor(rows, dtype=torch.long)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "loops": list(self.loops), "min_distance": self.min_distance}


Rule = Allowed | Forbid | Require | OddCount | Novel
"""A hard rule: a state that breaks one is infeasible (``log_factor = -inf``)."""

RULE_KINDS: dict[str, type] = {"allowed": Allowed, "forbid": Forbid, "require": Require, "novel": Novel}
