"""Argument checks shared by every layer: one wording for one mistake.

Each function returns the checked value (converted where that is safe) or raises an error that
names the argument and says what to give instead: a ``TypeError`` for a value of the wrong type
(text where a number belongs, a float where an integer belongs, a bool for either), a
``ValueError`` for a value of the right type out of range. They run before any forward pass,
so a bad argument never costs work.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "check_type",
    "check_count",
    "count_at_least",
    "check_positive",
    "check_interval",
    "check_temperature",
    "check_probability",
    "check_seed",
    "check_choice",
    "MIN_TEMPERATURE",
]

MIN_TEMPERATURE = 1e-6
"""Lower bound of every temperature: below it ``logits / T`` overflows float32 to inf (nan after
normalising) for logits of ordinary size, and every chain is stuck on its start."""


_KINDS = {int: "an integer", float: "a number", str: "text", bool: "true or false"}


def check_type(value: Any, name: str, kind: type) -> Any:
    """``value`` as ``kind`` (``int``, ``float``, ``str`` or ``bool``), else a TypeError naming ``name``.

    A bool is neither an integer nor a number here; an int is a number (returned as a float).
    """
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        bool: isinstance(value, bool),
    }[kind]
    if not ok:
        raise TypeError(f"{name} must be {_KINDS[kind]}, got {type(value).__name__} {value!r}")
    return float(value) if kind is float else value


def check_count(value: Any, name: str, minimum: int = 1) -> int:
    """An integer ``>= minimum``: a TypeError for a non-integer, a ValueError below ``minimum``."""
    check_type(value, name, int)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def count_at_least(minimum: int):
    """:func:`check_count` with ``minimum`` fixed, as a ``check(value, name)`` of a kernel option."""

    def check(value: Any, name: str) -> int:
        return check_count(value, name, minimum)

    return check


def check_positive(value: Any, name: str) -> float:
    """A finite number ``> 0``: a TypeError for a non-number, a ValueError otherwise."""
    value = check_type(value, name, float)
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return float(value)


def check_interval(value: Any, name: str) -> float:
    """A finite number of seconds ``>= 0`` (0: every time): a TypeError for a non-number, a
    ValueError otherwise (NaN would never come round, inf and negatives mean nothing)."""
    value = check_type(value, name, float)
    if not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def check_schedule(value: Any, name: str) -> Any:
    """A callable ``step -> temperature`` (an annealing schedule)."""
    if not callable(value):
        raise TypeError(f"{name} must be a callable step -> temperature, got {type(value).__name__}")
    return value


def check_temperature(value: Any, name: str) -> float:
    """A finite temperature ``>= MIN_TEMPERATURE``."""
    value = check_positive(value, name)
    if value < MIN_TEMPERATURE:
        raise ValueError(
            f"{name} must be >= {MIN_TEMPERATURE:g} (smaller ones overflow float32 and freeze every chain), "
            f"got {value!r}"
        )
    return value


def check_probability(value: Any, name: str) -> float:
    """A number in ``(0, 1]``: a TypeError for a non-number, a ValueError otherwise."""
    value = check_type(value, name, float)
    if not 0 < value <= 1:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
    return float(value)


def check_share(value: Any, name: str) -> float:
    """A number in ``[0, 1]`` (a probability that may be 0: a move left out)."""
    value = check_type(value, name, float)
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return float(value)


def check_seed(seed: Any) -> int:
    """Seeds are plain ints (not bools, floats or None) that ``torch.Generator.manual_seed`` takes."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed must lie in [-2**63, 2**64), got {seed}")
    return seed


def check_choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    """One of ``allowed``, else a ValueError listing them."""
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, allowed))}")
    return value
