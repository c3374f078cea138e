"""Hard rules: a state that breaks one is infeasible (``log_factor = -inf``)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..tokens import TokenCodec, loop_tokens
from .fields import FieldTypeError, FieldValueError, check_name, compile_pattern


@dataclass(frozen=True)
class Allowed:
    """The tokens a free position may hold.

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    tokens : str or sequence of str
        The alphabet. A string is split into characters for residue-level models (spaces
        ignored) and into words at whitespace for text models; a sequence lists vocabulary
        entries one by one. Each must be an ordinary token of the model (checked at bind time).
    positions : sequence of int, optional
        Free-position indices the alphabet applies to (0 is the template's first mask token,
        -1 its last); default every free position. Several rules at one position intersect.

    Raises
    ------
    TypeError
        Where ``name`` is not a string, ``tokens`` is not a string or a sequence of non-empty
        strings, or ``positions`` is not a sequence of integers.
    ValueError
        Where ``name`` is blank, the alphabet is empty, or ``positions`` is an empty sequence.

    Notes
    -----
    A position fixed to one token is ``Allowed.fixed(name, position, token)`` (:meth:`fixed`).

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Allowed
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK]E")
    >>> spec = ConstraintSpec([Allowed("no-cys", "ADE"), Allowed.fixed("first-a", 0, "A")])
    >>> spec.bind(dist).violations(dist.encode(["CADE", "CCDE", "CDAE"]))
    {'no-cys': tensor([False,  True, False]), 'first-a': tensor([False,  True,  True])}
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
        """Make a rule by which free position ``position`` holds ``token`` and nothing else.

        Parameters
        ----------
        name : str
            The rule's name.
        position : int
            The free-position index (0 is the template's first mask token, -1 its last).
        token : str
            The one token allowed there: an ordinary vocabulary entry of the model.

        Returns
        -------
        Allowed
            The rule ``Allowed(name, (token,), (position,))``.

        Examples
        --------
        >>> from mlm_ppl.models.constraints import Allowed
        >>> Allowed.fixed("first-a", 0, "A")
        Allowed(name='first-a', tokens=('A',), positions=(0,))
        """
        return cls(name, (token,), (position,))

    def token_mask(self, codec: TokenCodec) -> Tensor:
        """The alphabet as a mask over the vocabulary of ``codec``.

        Parameters
        ----------
        codec : TokenCodec
            The model whose vocabulary the tokens are looked up in (a :class:`~mlm_ppl.MaskedLM`).

        Returns
        -------
        torch.Tensor
            Shape ``(V,)``, bool: True at the ids of the alphabet's tokens.

        Raises
        ------
        ValueError
            Where a token is not an ordinary vocabulary entry of ``codec`` (not in the vocabulary,
            or a special token); the message names it.

        Examples
        --------
        >>> from mlm_ppl.models.constraints import Allowed
        >>> from mlm_ppl.testing import tiny_residue_bert
        >>> mlm = tiny_residue_bert("ACDE", seed=1)
        >>> [mlm.vocab[i] for i in Allowed("no-cys", "ADE").token_mask(mlm).nonzero().flatten()]
        ['A', 'D', 'E']
        """
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
        """The rule as a spec file's table.

        Returns
        -------
        dict of str to object
            ``kind``, ``name``, ``tokens`` and, where given, ``positions``.
        """
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
    time (``BoundConstraints.framework_matches``) and does not make a state infeasible.
    Matches may overlap one another (each start position is tried). Anchors read the whole
    decoded sequence. Patterns are matched by RE2, in time linear in the sequence's length
    (no lookarounds or backreferences: such a pattern is refused when the rule is made).

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    pattern : str
        The regular expression (RE2's syntax), over the sequence as
        :meth:`~mlm_ppl.models.TokenCodec.decode` writes it.

    Attributes
    ----------
    regex : object
        ``pattern`` compiled by RE2.

    Raises
    ------
    TypeError
        Where ``name`` or ``pattern`` is not a string.
    ValueError
        Where ``name`` is blank, or ``pattern`` is not a valid regular expression, needs a
        lookaround or a backreference, or matches the empty string.

    Examples
    --------
    The framework's ``DD`` is reported, not forbidden; a ``DD`` that reaches a designed position
    is:

    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Forbid
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "DD[MASK][MASK]")
    >>> bound = ConstraintSpec([Forbid("no-dd", "DD")]).bind(dist)
    >>> print(bound.report())
    no-dd: 'DD' at 0-2 (fixed framework)
    >>> bound.violations(dist.encode(["DDAC", "DDDC", "DDAD"]))
    {'no-dd': tensor([False,  True, False])}
    """

    kind: ClassVar[str] = "forbid"


@dataclass(frozen=True)
class Require(_Pattern):
    """A pattern that must match somewhere in the decoded sequence (framework included).

    Patterns are matched by RE2 (no lookarounds or backreferences), as for :class:`Forbid`.

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    pattern : str
        The regular expression (RE2's syntax), over the sequence as
        :meth:`~mlm_ppl.models.TokenCodec.decode` writes it.

    Attributes
    ----------
    regex : object
        ``pattern`` compiled by RE2.

    Raises
    ------
    TypeError
        Where ``name`` or ``pattern`` is not a string.
    ValueError
        Where ``name`` is blank, or ``pattern`` is not a valid regular expression, needs a
        lookaround or a backreference, or matches the empty string.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Require
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]")
    >>> ConstraintSpec([Require("has-e", "E")]).bind(dist).violations(dist.encode(["CACE", "CACD"]))
    {'has-e': tensor([False,  True])}
    """

    kind: ClassVar[str] = "require"


@dataclass(frozen=True)
class OddCount:
    """A rule violated when an odd number of free positions hold ``token``.

    The antibody liability ``"unpaired-cysteine"`` is ``OddCount("unpaired-cysteine", "C")``:
    the framework's cysteines are taken to pair among themselves (the canonical intradomain
    disulfide), so an odd number of cysteines among the designed residues leaves at least one
    of them unpaired. An even number is not proof of pairing; that needs a structure.

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    token : str
        The token counted: an ordinary vocabulary entry of the model (checked at bind time).

    Raises
    ------
    TypeError
        Where ``name`` is not a string or ``token`` is not a non-empty string.
    ValueError
        Where ``name`` is blank.

    Notes
    -----
    An OddCount rule has no spec-file form of its own: a spec file selects it by the liability
    name ``"unpaired-cysteine"``.

    Examples
    --------
    The framework's cysteine does not count; the designed ones do:

    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import OddCount
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]")
    >>> spec = ConstraintSpec([OddCount("unpaired-cysteine", "C")])
    >>> spec.bind(dist).violations(dist.encode(["CCCA", "CCAA", "CAAA"]))
    {'unpaired-cysteine': tensor([False,  True, False])}
    """

    name: str
    token: str
    kind: ClassVar[str] = "odd-count"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        if not isinstance(self.token, str) or not self.token:
            raise FieldTypeError(f"rule {self.name!r}: token must be a non-empty string, got {self.token!r}", "token")

    def token_id(self, codec: TokenCodec) -> int:
        """The id of ``token`` in the vocabulary of ``codec``.

        Parameters
        ----------
        codec : TokenCodec
            The model whose vocabulary the token is looked up in (a :class:`~mlm_ppl.MaskedLM`).

        Returns
        -------
        int
            The token's id.

        Raises
        ------
        ValueError
            Where ``token`` is not an ordinary vocabulary entry of ``codec``.
        """
        return int(Allowed(self.name, (self.token,)).token_mask(codec).nonzero()[0])


@dataclass(frozen=True)
class Novel:
    """A novelty rule: the designed loop must lie at least ``min_distance`` away from known loops.

    Violated where the designed loop (the tokens of the free positions, in order) lies at Hamming
    distance below ``min_distance`` from one of ``loops``: known sequences a design must stay away
    from (a training set, known binders, the parent's own loop). Loops of another length than the
    designed loop never match, and a rule none of whose loops has that length is refused when
    bound. The loops themselves are the record (a file they were read from may change; the run's
    rule does not).

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    loops : sequence of str
        The known loops, each a string of residues, or tokens separated by spaces (surrounding
        spaces are stripped).
    min_distance : int, optional
        The smallest Hamming distance allowed, at least 1 (default 1: the design must differ from
        every known loop).

    Raises
    ------
    TypeError
        Where ``name`` is not a string or ``loops`` is not a sequence of strings (a single string
        is refused).
    ValueError
        Where ``name`` is blank, ``loops`` is empty or holds a blank loop, or ``min_distance`` is
        not an integer >= 1.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Novel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]")
    >>> spec = ConstraintSpec([Novel("new", ["ACD", "EEE"], min_distance=2)])
    >>> spec.bind(dist).violations(dist.encode(["CACD", "CACE", "CDDA"]))  # distances 0, 1, 3 from ACD
    {'new': tensor([ True,  True, False])}
    """

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
        """The loops of ``length`` tokens as token ids of ``codec`` (the others are left out).

        Parameters
        ----------
        codec : TokenCodec
            The model whose vocabulary the tokens are looked up in (a :class:`~mlm_ppl.MaskedLM`).
        length : int
            The designed loop's number of tokens (the template's free positions).

        Returns
        -------
        torch.Tensor
            Shape ``(M, length)``, long: one row per loop of ``length`` tokens, in order.

        Raises
        ------
        ValueError
            Where a loop of ``length`` tokens holds a token outside the vocabulary of ``codec``
            (the message names it), or where no loop has ``length`` tokens.
        """
        index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
        rows = []
        for loop in self.loops:
            parts = loop_tokens(loop)
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
        """The rule as a spec file's table.

        Returns
        -------
        dict of str to object
            ``kind``, ``name``, ``loops`` and ``min_distance``.
        """
        return {"kind": self.kind, "name": self.name, "loops": list(self.loops), "min_distance": self.min_distance}


def loop_ids(codec: TokenCodec, loop: str, length: int, what: str) -> list[int]:
    """The token ids of ``loop`` (residues, or tokens separated by spaces), which must have ``length``
    tokens of ``codec``'s vocabulary; a FieldValueError names ``what`` and the fix."""
    parts = loop_tokens(loop)
    if len(parts) != length:
        raise FieldValueError(
            f"{what}: {loop!r} has {len(parts)} tokens; the designed loop has {length} (one for each free position)",
            "reference",
        )
    index = {tok: i for i, tok in enumerate(codec.vocab) if tok}
    missing = [p for p in parts if p not in index]
    if missing:
        raise FieldValueError(
            f"{what}: token {missing[0]!r} of {loop!r} is not in the vocabulary of model {codec.name!r}", "reference"
        )
    return [index[p] for p in parts]


@dataclass(frozen=True)
class Mutations:
    """A trust region around a reference loop, bounding how many designed positions may change.

    Violated where the designed loop (the tokens of the free positions, in order) differs from
    ``reference`` at more than ``max_mutations`` positions or at fewer than ``min_mutations`` (the
    Hamming distance; EvoProtGrad's ``max_mutations``). With a novelty rule, ``min_mutations = d``
    and ``max_mutations = k`` keep designs in the window ``d <= distance <= k``.

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    max_mutations : int or None, optional
        At most this many positions differ from the reference (``>= 0``; default None, no upper
        bound).
    min_mutations : int, optional
        At least this many positions differ (``>= 0``, default 0). One of the two bounds must be
        given (``max_mutations``, or ``min_mutations >= 1``).
    reference : str or None, optional
        A loop of the designed positions (residues, or tokens separated by spaces), e.g. the
        parent antibody's own CDR-H3; None (default) takes the spec's ``reference``.

    Raises
    ------
    TypeError
        Where ``name`` is not a string, or ``reference`` is not a non-empty string.
    ValueError
        Where ``name`` is blank, a bound is not an integer >= 0, neither bound is given, or
        ``min_mutations > max_mutations``.

    Examples
    --------
    With ``degrees=True``, a violation says by how many positions the state is outside the
    window:

    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import Mutations
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]")
    >>> spec = ConstraintSpec([Mutations("near-parent", max_mutations=1, reference="ACD")])
    >>> spec.bind(dist).violations(dist.encode(["CACD", "CACE", "CEEE"]), degrees=True)
    {'near-parent': tensor([0., 0., 2.], dtype=torch.float64)}
    """

    name: str
    max_mutations: int | None = None
    min_mutations: int = 0
    reference: str | None = None
    kind: ClassVar[str] = "mutations"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        for key in ("max_mutations", "min_mutations"):
            k = getattr(self, key)
            if k is None and key == "max_mutations":
                continue
            if isinstance(k, bool) or not isinstance(k, int) or k < 0:
                raise FieldValueError(f"rule {self.name!r}: {key} must be an integer >= 0, got {k!r}", key)
        if self.max_mutations is None and self.min_mutations == 0:
            raise FieldValueError(
                f"rule {self.name!r}: give max_mutations (at most k positions changed) or min_mutations >= 1",
                "max_mutations",
            )
        if self.max_mutations is not None and self.min_mutations > self.max_mutations:
            raise FieldValueError(
                f"rule {self.name!r}: min_mutations {self.min_mutations} > max_mutations {self.max_mutations}: no loop "
                "can meet both",
                "min_mutations",
            )
        ref = self.reference
        if ref is not None:
            if not isinstance(ref, str) or not ref.strip():
                raise FieldTypeError(f"rule {self.name!r}: reference must be a loop (a non-empty string)", "reference")
            object.__setattr__(self, "reference", ref.strip())

    def reference_ids(self, codec: TokenCodec, length: int, default: str | None) -> Tensor:
        """The reference loop's token ids: the rule's own ``reference``, else ``default``.

        Parameters
        ----------
        codec : TokenCodec
            The model whose vocabulary the tokens are looked up in (a :class:`~mlm_ppl.MaskedLM`).
        length : int
            The designed loop's number of tokens (the template's free positions).
        default : str or None
            The spec's ``reference``, used where the rule has none.

        Returns
        -------
        torch.Tensor
            Shape ``(length,)``, long.

        Raises
        ------
        ValueError
            Where there is no reference loop (neither the rule's nor ``default``), or the loop does
            not have ``length`` tokens of the vocabulary of ``codec``.
        """
        loop = self.reference if self.reference is not None else default
        if loop is None:
            raise FieldValueError(
                f"rule {self.name!r}: no reference loop: give the rule a reference, or the spec one (reference = ...)",
                "reference",
            )
        return torch.tensor(loop_ids(codec, loop, length, f"rule {self.name!r}: reference"), dtype=torch.long)

    def excess(self, distance: Tensor) -> Tensor:
        """How far each distance lies outside ``[min_mutations, max_mutations]``.

        Parameters
        ----------
        distance : torch.Tensor
            Shape ``(N,)``: Hamming distances of designed loops from the reference.

        Returns
        -------
        torch.Tensor
            Shape ``(N,)``, of the dtype of ``distance``: the number of positions too many or too
            few, 0 inside the window.

        Examples
        --------
        >>> import torch
        >>> from mlm_ppl.models.constraints import Mutations
        >>> Mutations("window", max_mutations=2, min_mutations=1).excess(torch.tensor([0, 1, 3]))
        tensor([1, 0, 1])
        """
        over = (distance - self.max_mutations).clamp(min=0) if self.max_mutations is not None else 0 * distance
        return over + (self.min_mutations - distance).clamp(min=0)

    def to_dict(self) -> dict[str, Any]:
        """The rule as a spec file's table.

        Returns
        -------
        dict of str to object
            ``kind``, ``name`` and those of ``max_mutations``, ``min_mutations`` (where not 0) and
            ``reference`` that are given.
        """
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.max_mutations is not None:
            out["max_mutations"] = self.max_mutations
        if self.min_mutations:
            out["min_mutations"] = self.min_mutations
        if self.reference is not None:
            out["reference"] = self.reference
        return out


_RELATIVE = re.compile(r"\s*reference\s*(?:([+-])\s*(\d+(?:\.\d*)?|\.\d+)\s*)?", re.ASCII)


def _bound(rule: str, key: str, value: Any) -> float | str | None:
    """A threshold as given: None, a finite number, or ``"reference"`` / ``"reference + c"`` /
    ``"reference - c"`` (written back in that form)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise FieldTypeError(f"rule {rule!r}: {key} must be a number or 'reference [+|- c]', got {value!r}", key)
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise FieldValueError(f"rule {rule!r}: {key} must be finite, got {value!r}", key)
        return float(value)
    m = _RELATIVE.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise FieldValueError(
            f"rule {rule!r}: {key} must be a number or 'reference', 'reference + c', 'reference - c', got {value!r}",
            key,
        )
    return "reference" if m.group(1) is None else f"reference {m.group(1)} {m.group(2)}"


def _offset(bound: str) -> float:
    """``c`` of ``"reference + c"`` (negative for ``-``), 0 for ``"reference"``."""
    parts = bound.split()
    return 0.0 if len(parts) == 1 else float(parts[2]) * (1 if parts[1] == "+" else -1)


@dataclass(frozen=True)
class ExpertBound:
    """A threshold on an expert's value, as a hard rule.

    Violated where the value of the spec's expert ``expert`` (its unweighted ``f_k``; give it
    weight 0 to use it as a rule alone) lies below ``min`` or above ``max``. Each bound is a
    number, or relative to the reference loop: ``"reference"``, ``"reference + c"``,
    ``"reference - c"``, the expert's value at the template with the spec's ``reference`` on the
    designed positions (e.g. ``max = "reference"`` for hydropathy: no less hydrophilic than the
    parent). Checked on the decoded state, before any forward pass.

    Parameters
    ----------
    name : str
        The rule's name, unique within a spec (the key of its violations).
    expert : str
        The name of one of the spec's experts (checked at bind time).
    min : float or str or None, optional
        The lower bound: a finite number, ``"reference"``, ``"reference + c"`` or
        ``"reference - c"``; None (default) for none.
    max : float or str or None, optional
        The upper bound, in the same forms. At least one of ``min`` and ``max`` must be given.

    Raises
    ------
    TypeError
        Where ``name`` is not a string, ``expert`` is not a non-empty string, or a bound is a
        bool.
    ValueError
        Where ``name`` is blank, a bound is not finite or not of the forms above, neither bound is
        given, or both are numbers with ``min > max``.

    Examples
    --------
    >>> from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    >>> from mlm_ppl.models.constraints import ExpertBound, hydropathy
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> dist = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "C[MASK][MASK][MASK]")
    >>> spec = ConstraintSpec([ExpertBound("not-greasy", "hydropathy", max=0.0)], [hydropathy(weight=0.0)])
    >>> spec.bind(dist).violations(dist.encode(["CAAA", "CDEA"]))  # mean hydropathy 1.8, then below 0
    {'not-greasy': tensor([ True, False])}
    """

    name: str
    expert: str
    min: float | str | None = None
    max: float | str | None = None
    kind: ClassVar[str] = "expert"

    def __post_init__(self) -> None:
        check_name(self.name, "rule")
        if not isinstance(self.expert, str) or not self.expert:
            raise FieldTypeError(f"rule {self.name!r}: expert must be an expert's name, got {self.expert!r}", "expert")
        object.__setattr__(self, "min", _bound(self.name, "min", self.min))
        object.__setattr__(self, "max", _bound(self.name, "max", self.max))
        if self.min is None and self.max is None:
            raise FieldValueError(f"rule {self.name!r}: give min, max or both", "max")
        if isinstance(self.min, float) and isinstance(self.max, float) and self.min > self.max:
            raise FieldValueError(f"rule {self.name!r}: min {self.min} > max {self.max}: no value can meet both", "min")

    @property
    def relative(self) -> bool:
        """Whether a bound reads the reference's value."""
        return isinstance(self.min, str) or isinstance(self.max, str)

    def limits(self, reference_value: float | None) -> tuple[float, float]:
        """The bounds as numbers, a relative bound read at ``reference_value``.

        Parameters
        ----------
        reference_value : float or None
            The expert's value at the reference state; needed where a bound is relative
            (:attr:`relative`), else unused.

        Returns
        -------
        low : float
            The lower bound, ``-inf`` where ``min`` is not given.
        high : float
            The upper bound, ``inf`` where ``max`` is not given.

        Raises
        ------
        ValueError
            Where the bounds, read at ``reference_value``, have ``low > high``.

        Examples
        --------
        >>> from mlm_ppl.models.constraints import ExpertBound
        >>> ExpertBound("kd", "hydropathy", min=-1, max="reference + 0.5").limits(1.0)
        (-1.0, 1.5)
        """

        def resolve(bound: float | str | None, missing: float) -> float:
            if bound is None:
                return missing
            if isinstance(bound, float):
                return bound
            assert reference_value is not None
            return reference_value + _offset(bound)

        low, high = resolve(self.min, -math.inf), resolve(self.max, math.inf)
        if low > high:
            raise FieldValueError(
                f"rule {self.name!r}: min {low:.4g} > max {high:.4g} at the reference's value {reference_value:.4g}: "
                "no value can meet both",
                "min",
            )
        return low, high

    def to_dict(self) -> dict[str, Any]:
        """The rule as a spec file's table.

        Returns
        -------
        dict of str to object
            ``kind``, ``name``, ``expert`` and those of ``min`` and ``max`` that are given (a
            relative bound as its string).
        """
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "expert": self.expert}
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


Rule = Allowed | Forbid | Require | OddCount | Novel | Mutations | ExpertBound
"""A hard rule: a state that breaks one is infeasible (``log_factor = -inf``)."""

RULE_KINDS: dict[str, type] = {
    "allowed": Allowed,
    "forbid": Forbid,
    "require": Require,
    "novel": Novel,
    "mutations": Mutations,
    "expert": ExpertBound,
}
