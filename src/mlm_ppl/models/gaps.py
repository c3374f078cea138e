"""Templates with counted masks: ``[MASK]{13}`` (13 masks) and a variable gap ``[MASK]{10,16}``.

A template is text with the model's mask token where tokens are sampled. A count after a mask
token, ``MASK{n}``, stands for ``n`` masks in a row; ``MASK{a,b}`` is a **variable gap** of ``a``
to ``b`` free positions (both included), a loop whose length is sampled too. Other masks keep
their one position each. :func:`expand_counts` writes the fixed counts out;
:func:`parse_gap` reads a template with one variable gap as a :class:`GapTemplate`, whose
:meth:`~GapTemplate.template` is the ordinary template of each length. A length prior
(:class:`LengthPrior`: uniform, or a table ``L<TAB>weight``) weighs the lengths.

Everything here is checked on the text alone, before a model is loaded, except what needs the
model: its mask token (``mask``) and its maximum length (:meth:`GapTemplate.check_fits`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "GapTemplate",
    "LengthPrior",
    "LengthReference",
    "read_length_table",
    "expand_counts",
    "parse_gap",
    "find_gap",
    "MASK_TOKENS",
    "has_counts",
    "has_variable_gap",
]

_COUNT = re.compile(r"\{([^{}]*)\}")
_FIXED = re.compile(r"\s*(\d+)\s*", re.ASCII)  # ASCII: "٣" is no 3
_RANGE = re.compile(r"\s*(\d+)\s*,\s*(\d+)\s*", re.ASCII)


MAX_COUNT = 100_000
"""The most positions a count may ask for before a model is loaded: no masked LM reads sequences
this long, and a larger count would only cost time and memory before the model's own maximum
length refuses it."""


def _check_count(text: str, mask: str, n: int, limit: int | None) -> None:
    """A ValueError when a count asks for more than ``limit`` (the model's maximum length) or,
    without a model, :data:`MAX_COUNT` positions: before anything is built per position."""
    if limit is not None and n > limit:
        raise ValueError(
            f"template: {mask}{text} asks for {n} positions, more than the model accepts ({limit} tokens, special "
            "tokens included); give a smaller count"
        )
    if n > MAX_COUNT:
        raise ValueError(
            f"template: {mask}{text} asks for {n} positions; no masked LM reads that many (at most {MAX_COUNT} "
            "here, and the model's own maximum length when it loads); give a smaller count"
        )


def _counts(text: str, mask: str, limit: int | None = None) -> list[tuple[int, int, int, int | None]]:
    """Every ``{...}`` of ``text``: ``(start, end, a, b)`` with ``b`` None for a fixed count ``{a}``;
    a ValueError names a count that follows no mask token or is not ``{n}`` / ``{a,b}``, or asks
    for more positions than ``limit`` (a model's maximum length) or :data:`MAX_COUNT`."""
    out = []
    for m in _COUNT.finditer(text):
        if not text[: m.start()].endswith(mask):
            raise ValueError(
                f"template: {m.group(0)!r} at character {m.start()} follows no mask token; a count applies to the "
                f"mask token before it ({mask}{{13}}: 13 masks, {mask}{{10,16}}: a gap of 10 to 16)"
            )
        fixed, span = _FIXED.fullmatch(m.group(1)), _RANGE.fullmatch(m.group(1))
        if fixed:
            a, b = int(fixed.group(1)), None
            if a < 1:
                raise ValueError(f"template: {mask}{m.group(0)} has no position; a count is at least 1")
        elif span:
            a, b = int(span.group(1)), int(span.group(2))
            if a < 1:
                raise ValueError(
                    f"template: the gap {mask}{m.group(0)} may be empty; a gap has at least 1 position "
                    f"({mask}{{1,{b}}})"
                )
            if b < a:
                raise ValueError(f"template: the gap {mask}{m.group(0)} ends before it starts; give {{{b},{a}}}")
        else:
            raise ValueError(
                f"template: {mask}{m.group(0)} is not a count; give {mask}{{n}} (n masks) or {mask}{{a,b}} "
                "(a gap of a to b positions)"
            )
        _check_count(m.group(0), mask, a if b is None else b, limit)
        out.append((m.start() - len(mask), m.end(), a, b))
    stray = re.search(r"[{}]", _COUNT.sub("", text))
    if stray:
        raise ValueError(f"template: unmatched {stray.group(0)!r}; a count is {mask}{{n}} or {mask}{{a,b}}")
    return out


def has_counts(text: str) -> bool:
    """Whether ``text`` has a count ``{...}`` (fixed or a gap) to read."""
    return "{" in text or "}" in text


def expand_counts(text: str, mask: str, limit: int | None = None) -> str:
    """``text`` with every fixed count ``MASK{n}`` written out as ``n`` masks; a ValueError for a
    variable gap (:func:`parse_gap` reads those), a malformed count or one over ``limit`` (the
    model's maximum length) or :data:`MAX_COUNT`."""
    counts = _counts(text, mask, limit)
    gaps = [text[s:e] for s, e, _, b in counts if b is not None]
    if gaps:
        raise ValueError(
            f"template: the variable gap {gaps[0]} gives loops of several lengths, which one target of fixed length "
            f"cannot hold; give one length ({mask}{{13}}) or one template per length (--templates)"
        )
    out, last = [], 0
    for start, end, a, _ in counts:
        out += [text[last:start], mask * a]
        last = end
    return "".join(out + [text[last:]])


@dataclass(frozen=True)
class GapTemplate:
    """A template with one variable gap: ``before + mask * L + after`` for ``L`` in ``lo..hi``.
    ``before`` and ``after`` have their fixed counts written out (they may hold other masks)."""

    before: str
    after: str
    lo: int
    hi: int
    mask: str

    @property
    def lengths(self) -> range:
        return range(self.lo, self.hi + 1)

    def template(self, length: int) -> str:
        """The ordinary template of gap length ``length``."""
        if length not in self.lengths:
            raise ValueError(f"gap length {length} is outside {self.lo}..{self.hi}")
        return self.before + self.mask * length + self.after

    def check_fits(self, max_tokens: int, shortest_tokens: int) -> None:
        """A ValueError unless the longest template fits the model's ``max_tokens``, from the
        encoded length of the shortest (``template(lo)``, special tokens included): each gap
        position is one mask token."""
        n = shortest_tokens + self.hi - self.lo
        if n > max_tokens:
            over = n - max_tokens
            raise ValueError(
                f"template: at its longest ({self.hi} gap positions) it is {n} tokens, {over} more than the model "
                f"accepts ({max_tokens}); lower the gap's upper bound to {self.hi - over} or shorten the sequence"
            )


def has_variable_gap(text: str | None) -> bool:
    """Whether ``text`` has a count of the form ``{a,b}`` (well formed or not: :func:`parse_gap` says)."""
    return text is not None and any(_RANGE.fullmatch(m.group(1)) for m in _COUNT.finditer(text))


MASK_TOKENS = ("[MASK]", "<mask>")
"""The mask tokens :func:`find_gap` recognises before a variable gap (BERT and AntiBERTy; RoBERTa and ESM)."""


def find_gap(text: str | None) -> GapTemplate | None:
    """:func:`parse_gap` with the mask token read off the text (one of :data:`MASK_TOKENS`, the one
    before its variable gap), before any model is loaded: the one parse of a variable gap, whose
    :attr:`GapTemplate.mask` the model's own mask token is checked against once it loads. None
    for a template without a variable gap."""
    if text is None or not has_variable_gap(text):
        return None
    for m in _COUNT.finditer(text):
        if _RANGE.fullmatch(m.group(1)):
            mask = next((token for token in MASK_TOKENS if text[: m.start()].endswith(token)), None)
            if mask is None:
                raise ValueError(
                    f"template: the variable gap {m.group(0)!r} at character {m.start()} follows no mask token; "
                    f"write it after the model's mask token ({' or '.join(t + '{a,b}' for t in MASK_TOKENS)})"
                )
            return parse_gap(text, mask)
    return None


def parse_gap(text: str, mask: str, limit: int | None = None) -> GapTemplate | None:
    """The :class:`GapTemplate` of a template with one variable gap (fixed counts written out);
    None for a template without one. A ValueError for two variable gaps, a malformed count or one
    over ``limit`` (the model's maximum length) or :data:`MAX_COUNT`."""
    counts = _counts(text, mask, limit)
    gaps = [(s, e, a, b) for s, e, a, b in counts if b is not None]
    if not gaps:
        return None
    if len(gaps) > 1:
        raise ValueError(
            f"template: {len(gaps)} variable gaps ({', '.join(text[s:e] for s, e, _, _ in gaps)}); a template has at "
            "most one (fix the others' lengths with {n})"
        )
    start, end, lo, hi = gaps[0]
    assert hi is not None
    return GapTemplate(expand_counts(text[:start], mask), expand_counts(text[end:], mask), lo, hi, mask)


MIN_WEIGHT_RATIO = 1e-300
"""The smallest positive weight of a length table, relative to its largest, that normalising keeps > 0."""


def read_length_table(spec: str, what: str, gap: GapTemplate | None = None) -> dict[int, float]:
    """A file of lines ``L<TAB>weight`` (``#`` comments and blank lines skipped) as weights
    normalised to sum to 1, in order of length: each ``L`` once (inside ``gap`` when given, else
    >= 1), weights finite and >= 0, summing to more than 0. A ValueError names the file (as
    ``what``), the line and what to fix."""
    path = Path(spec)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        hint = "give 'uniform' or a file" if gap is not None else "give a file of lines LENGTH<TAB>WEIGHT"
        raise ValueError(f"{what} {spec!r}: cannot read it ({err}); {hint}") from None
    weights: dict[int, float] = {}
    for i, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        fields = text.split()
        where = f"{what} {spec}, line {i}: {line.strip()!r}"
        if len(fields) != 2:
            raise ValueError(f"{where} is not LENGTH<TAB>WEIGHT")
        try:
            if not (fields[0].isascii() and fields[1].isascii()):  # int() and float() read "٣" as 3
                raise ValueError
            L, w = int(fields[0]), float(fields[1])
        except ValueError:
            raise ValueError(f"{where} is not LENGTH<TAB>WEIGHT (an integer and a number)") from None
        if gap is not None and L not in gap.lengths:
            raise ValueError(f"{where}: length {L} is outside the gap's {gap.lo}..{gap.hi}")
        if L < 1:
            raise ValueError(f"{where}: a length is an integer >= 1")
        if L in weights:
            raise ValueError(f"{where}: length {L} is given twice")
        if not (math.isfinite(w) and w >= 0):
            raise ValueError(f"{where}: the weight must be a finite number >= 0")
        weights[L] = w
    largest = max(weights.values(), default=0.0)
    if not largest > 0:
        raise ValueError(f"{what} {spec}: its weights sum to 0; they must sum to a positive number")
    scaled = {L: w / largest for L, w in weights.items()}  # in [0, 1]: their sum cannot overflow, whatever their size
    faint = [L for L, w in scaled.items() if weights[L] > 0 and w < MIN_WEIGHT_RATIO]  # 0 once normalised
    if faint:
        raise ValueError(
            f"{what} {spec}: length {faint[0]}'s weight {weights[faint[0]]!r} is positive but more than "
            f"{1 / MIN_WEIGHT_RATIO:g} times smaller than the largest ({largest!r}): it cannot be told from 0 (the "
            "length would be dropped); give it 0 to leave the length out, or a larger weight"
        )
    total = math.fsum(scaled.values())
    return {L: w / total for L, w in sorted(scaled.items())}


@dataclass(frozen=True)
class LengthReference:
    """A length distribution to compare a run's length marginal with (e.g. a repertoire's), read
    from a file in the length prior's format and renormalised over the run's lengths.

    ``weights``: per length of the run, its share of the reference's weight inside the run's
    lengths (summing to 1); ``inside``: the fraction of the reference's whole weight that lies
    inside them; ``source``: the file."""

    weights: dict[int, float]
    inside: float
    source: str

    @classmethod
    def read(cls, spec: str, lengths: list[int]) -> LengthReference:
        """The reference in file ``spec`` (lines ``L<TAB>weight``, any lengths >= 1) over
        ``lengths``; a ValueError when the file is bad (:func:`read_length_table`) or weighs none
        of ``lengths``."""
        table = read_length_table(spec, "length reference")
        inside = math.fsum(table.get(L, 0.0) for L in lengths)
        if not inside > 0:
            raise ValueError(
                f"length reference {spec}: it gives no weight to the run's lengths {lengths[0]}..{lengths[-1]}"
            )
        return cls({L: table.get(L, 0.0) / inside for L in lengths}, inside, spec)


@dataclass(frozen=True)
class LengthPrior:
    """Weights ``pi(L)`` of the gap lengths, normalised to sum to 1 over the gap's lengths (a length
    the prior does not name has weight 0). ``source``: where they came from."""

    weights: dict[int, float]
    source: str

    @classmethod
    def uniform(cls, gap: GapTemplate) -> LengthPrior:
        n = len(gap.lengths)
        return cls({L: 1.0 / n for L in gap.lengths}, "uniform")

    @classmethod
    def read(cls, spec: str, gap: GapTemplate) -> LengthPrior:
        """``"uniform"``, or a file of lines ``L<TAB>weight`` (``#`` comments and blank lines
        skipped): each ``L`` once, inside the gap; weights finite and >= 0, summing to more than
        0. A ValueError names the file, the line and what to fix."""
        if spec == "uniform":
            return cls.uniform(gap)
        weights = read_length_table(spec, "length prior", gap)
        return cls({L: w for L, w in weights.items() if w > 0}, str(Path(spec)))

    def record(self) -> dict[str, float]:
        """The prior as a run records it (settings, run attributes, a batch of strata): weight by
        length as text, in order of length; :meth:`from_record` reads it back."""
        return {str(L): float(w) for L, w in sorted(self.weights.items())}

    @classmethod
    def from_record(cls, record: dict[str, float], source: str = "recorded") -> LengthPrior:
        """The prior of a :meth:`record`."""
        return cls({int(L): float(w) for L, w in record.items()}, source)

    def draw_weights(self, draws_per_length: dict[int, int]) -> dict[int, float]:
        """The weight of one draw of each length in the mixture ``sum_L pi(L) p_L``: ``pi(L) / N_L``
        for ``N_L`` draws of length ``L``, so that weighted sums are the mixture's expectations.
        A length of weight > 0 without draws is a ValueError (the mixture would lose its mass)."""
        missing = [L for L in self.weights if draws_per_length.get(L, 0) <= 0]
        if missing:
            raise ValueError(f"lengths {missing} have prior weight but no draws")
        return {L: self.weights.get(L, 0.0) / n for L, n in draws_per_length.items() if n > 0}
