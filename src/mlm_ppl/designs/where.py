"""``--where``: a small language of conditions on the designs' columns, parsed here (nothing is
``eval``'d), applied to every draw before the picking.

    condition  := clause ("or" clause)*
    clause     := factor ("and" factor)*
    factor     := "not" factor | "(" condition ")" | comparison
    comparison := operand OP operand          OP: <  <=  >  >=  ==  !=
    operand    := NUMBER | COLUMN | "reference" [("+" | "-") NUMBER]

A COLUMN is one of the draw's: ``lp``, ``energy``, an expert (``hydropathy`` or its column name
``expert_hydropathy``; ``net_charge`` for an expert named ``net-charge``, as in ``run.nc``),
``n_mutations`` and the deltas ``delta_energy``, ``delta_expert_<name>`` (the last three need a
reference loop). ``reference`` is the other side's value at the reference
(the template with the reference loop on the designed positions): ``hydropathy < reference`` keeps
the designs more hydrophilic than the parent, ``energy <= reference + 2`` those at most 2 nats above
it. Examples: ``'hydropathy < reference and n_mutations <= 4'``, ``'not (energy > 15)'``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["parse_where", "Condition"]

_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
_TOKEN = re.compile(r"\s*(?:(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<op><=|>=|==|!=|<|>)"
                    r"|(?P<paren>[()])|(?P<sign>[+-])|(?P<name>[A-Za-z_][A-Za-z0-9_]*))", re.ASCII)  # fmt: skip
_WORDS = ("and", "or", "not")

Condition = Callable[[Mapping[str, np.ndarray], Mapping[str, float] | None], np.ndarray]
"""A parsed condition: ``(columns, reference values) -> (N,) bool``."""


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"where: cannot read {text[pos:]!r} (at character {pos + 1} of {text!r})")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, columns: Mapping[str, str]) -> None:
        self.text, self.tokens, self.i, self.columns = text, _tokens(text), 0, columns
        self.uses_reference = False

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def word(self, w: str) -> bool:
        t = self.peek()
        if t is not None and t[0] == "name" and t[1].lower() == w:
            self.i += 1
            return True
        return False

    def fail(self, what: str) -> ValueError:
        t = self.peek()
        where = f"at {t[1]!r} (character {t[2] + 1})" if t else "at its end"
        return ValueError(f"where: expected {what} {where} of {self.text!r}")

    def condition(self) -> Condition:
        parts = [self.clause()]
        while self.word("or"):
            parts.append(self.clause())
        return parts[0] if len(parts) == 1 else (lambda c, r: np.logical_or.reduce([p(c, r) for p in parts]))

    def clause(self) -> Condition:
        parts = [self.factor()]
        while self.word("and"):
            parts.append(self.factor())
        return parts[0] if len(parts) == 1 else (lambda c, r: np.logical_and.reduce([p(c, r) for p in parts]))

    def factor(self) -> Condition:
        if self.word("not"):
            inner = self.factor()
            return lambda c, r: ~inner(c, r)
        t = self.peek()
        if t is not None and t[0] == "paren" and t[1] == "(":
            self.i += 1
            inner = self.condition()
            t = self.peek()
            if t is None or t[1] != ")":
                raise self.fail("')'")
            self.i += 1
            return inner
        return self.comparison()

    def operand(self) -> tuple[str, Any]:
        """``("num", value)``, ``("col", column)`` or ``("ref", offset)``."""
        t = self.peek()
        if t is None:
            raise self.fail("a number, a column or 'reference'")
        kind, value, _ = t
        self.i += 1
        if kind == "num":
            return "num", float(value)
        if kind != "name" or value.lower() in _WORDS:
            self.i -= 1
            raise self.fail("a number, a column or 'reference'")
        if value == "reference":
            self.uses_reference = True
            offset = 0.0
            t = self.peek()
            if t is not None and (t[0] == "sign" or (t[0] == "num" and t[1][0] in "+-")):
                self.i += 1
                if t[0] == "sign":
                    n = self.peek()
                    if n is None or n[0] != "num":
                        raise self.fail("a number after the sign")
                    self.i += 1
                    offset = float(n[1]) * (1 if t[1] == "+" else -1)
                else:
                    offset = float(t[1])
            return "ref", offset
        column = self.columns.get(value)
        if column is None:
            raise ValueError(
                f"where: no column {value!r}; the columns are {', '.join(sorted(set(self.columns.values())))}"
            )
        return "col", column

    def comparison(self) -> Condition:
        left = self.operand()
        t = self.peek()
        if t is None or t[0] != "op":
            raise self.fail("a comparison (<, <=, >, >=, ==, !=)")
        self.i += 1
        op = _OPS[t[1]]
        right = self.operand()
        kinds = (left[0], right[0])
        if "ref" in kinds and "col" not in kinds:  # reference against a number, or against itself
            raise ValueError(
                f"where: 'reference' compares a column with its own value at the reference ({self.text!r})"
            )

        def value(side: tuple[str, Any], other: tuple[str, Any], c: Mapping[str, np.ndarray], r: Any) -> Any:
            kind, v = side
            if kind == "num":
                return v
            if kind == "col":
                return c[v]
            return r[other[1]] + v  # the other side's column at the reference, plus the offset

        return lambda c, r: np.asarray(op(value(left, right, c, r), value(right, left, c, r)), dtype=bool)


def parse_where(text: str, columns: Mapping[str, str]) -> tuple[Condition, bool]:
    """The condition ``text`` over ``columns`` (the names a user may write -> the column each
    reads), and whether it reads the reference's values. A ValueError (one line) for anything it
    cannot read, naming the place, or a column it does not know, listing those it does."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("where: give a condition, e.g. 'hydropathy < reference and n_mutations <= 4'")
    parser = _Parser(text, columns)
    condition = parser.condition()
    if parser.peek() is not None:
        raise parser.fail("'and', 'or' or the end")
    return condition, parser.uses_reference
