"""A run's list and table attributes (``vocab``, ``free_positions`` ...), read and checked.

They are stored as themselves in a :class:`~mlm_ppl.inference.Run` and as JSON text in its
InferenceData (``run.nc``); a ``run.nc`` changed by hand (a position a million times over, a
vocabulary of control characters) is a one-line ValueError here, before any work.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_POSITIONS", "MAX_VOCAB", "attr_list"]

MAX_POSITIONS = 1 << 16
"""At most this many positions (a template's, a vocabulary's tokens) in a run's attributes."""


def attr_list(attrs: Mapping, name: str) -> Any:
    """A list (or mapping) attribute, stored as itself in a Run and as JSON text in InferenceData;
    the attributes whose shape is known (``vocab``, ``free_positions``, ``gap_positions``,
    ``length_prior``) checked before use: a run.nc changed by hand is a one-line ValueError, not a
    traceback or an hour of work."""
    value = attrs.get(name)
    try:
        value = json.loads(value) if isinstance(value, str) else value
    except (ValueError, RecursionError):
        raise ValueError(f"the run's attribute {name!r} is damaged (not the JSON mlm-ppl writes)") from None
    if value is not None and name in _CHECKS:
        problem = _CHECKS[name](value)
        if problem:
            raise ValueError(
                f"the run's attribute {name!r} is damaged ({problem}): its run.nc was not written by mlm-ppl or was "
                "changed since; write it again (mlm-ppl diagnose on the run directory, from its checkpoint)"
            )
    return value


def _positions(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_POSITIONS:
        return f"a list of at most {MAX_POSITIONS} positions expected"
    if not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < MAX_POSITIONS for p in value):
        return "positions are integers >= 0"
    return "a position twice" if len(set(value)) != len(value) else None


MAX_VOCAB = 1 << 21
"""At most this many tokens in a run's vocabulary (XLM-R has 250,002)."""


def _vocab(value: Any) -> str | None:
    if not isinstance(value, list) or len(value) > MAX_VOCAB:
        return f"a list of at most {MAX_VOCAB} tokens expected"
    if not all(isinstance(t, str) and not any(unicodedata.category(c) == "Cc" for c in t) for t in value):
        return "tokens are text without control characters"
    return None


def _prior(value: Any) -> str | None:
    if not isinstance(value, Mapping) or len(value) > MAX_POSITIONS:
        return "a table of lengths and their weights expected"
    for length, weight in value.items():
        if not (isinstance(length, str) and length.isascii() and length.isdigit()) or isinstance(weight, bool):
            return "lengths are whole numbers"
        if not isinstance(weight, (int, float)) or not 0 <= weight < float("inf"):
            return "weights are finite numbers >= 0"
    return None


_CHECKS = {"vocab": _vocab, "free_positions": _positions, "gap_positions": _positions, "length_prior": _prior}
