"""Argument checks shared by every layer: one wording for one mistake.

Each function returns the checked value (converted where that is safe) or raises a
``ValueError``/``TypeError`` that names the argument and says what to give instead. They run
before any forward pass, so a bad argument never costs work.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "check_count",
    "check_positive",
    "check_temperature",
    "check_probability",
    "check_seed",
    "check_choice",
    "MIN_TEMPERATURE",
]

MIN_TEMPERATURE = 1e-6
"""Lower bound of every temperature: below it ``logits / T`` overflows float32 to inf (nan after
normalising) for logits of ordinary size, and every chain is stuck on its start."""


def check_count(value: Any, name: str, minimum: int = 1) -> int:
    """An integer ``>= minimum`` (not a bool), else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def check_positive(value: Any, name: str) -> float:
    """A finite number ``> 0``: a TypeError for a non-number, a ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return float(value)


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
    """A number in ``(0, 1]``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
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
