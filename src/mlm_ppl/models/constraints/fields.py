"""Errors that name the field of a rule or an expert they are about (a spec file's key), and the
checks shared by rules and experts."""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

import re2


class FieldValueError(ValueError):
    """A ValueError about one field of a rule or an expert (``key``: its name in a spec file)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class FieldTypeError(TypeError):
    """A TypeError about one field of a rule or an expert (``key``: its name in a spec file)."""

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


def check_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise FieldTypeError(f"a {what}'s name must be text, got {type(name).__name__} {name!r}", "name")
    if not name.strip():
        raise FieldValueError(f"a {what}'s name must not be empty", "name")
    return name


def check_weight(name: str, w: Any) -> float:
    if isinstance(w, bool) or not isinstance(w, numbers.Real):
        raise FieldTypeError(f"expert {name!r}: weight must be a number, got {type(w).__name__} {w!r}", "weight")
    if not math.isfinite(float(w)):
        raise FieldValueError(f"expert {name!r}: weight must be finite, got {w!r}", "weight")
    return float(w)


def compile_pattern(name: str, pattern: Any) -> Any:
    """``pattern`` compiled by RE2 (google-re2), whose matching time is linear in the text's length
    whatever the pattern: ``(A+)+C`` cannot backtrack for ever as Python's ``re`` would. Checked
    first by Python's ``re`` (a syntax error says what it says there); a pattern RE2 cannot match in
    bounded time (a lookaround, a backreference) or one that matches the empty string is refused."""
    if not isinstance(pattern, str):
        raise FieldTypeError(f"rule {name!r}: pattern must be text, got {type(pattern).__name__}", "pattern")
    try:
        re.compile(pattern)
    except re.error as err:
        raise FieldValueError(f"rule {name!r}: bad regular expression {pattern!r}: {err}", "pattern") from None
    try:
        regex = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as err:
        reason = err.args[0].decode() if err.args and isinstance(err.args[0], bytes) else str(err)
        raise FieldValueError(
            f"rule {name!r}: pattern {pattern!r} cannot be matched in bounded time ({reason}): patterns are matched "
            "by RE2, which has no lookarounds or backreferences; write it without them",
            "pattern",
        ) from None
    if regex.fullmatch("") is not None:
        raise FieldValueError(
            f"rule {name!r}: pattern {pattern!r} matches the empty string; give one that matches at least one "
            "character",
            "pattern",
        )
    return regex


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is our one-line error, not a C++ log line on stderr
