"""Annealing schedules a run can record, and what an annealed run says about itself.

An annealing schedule ``step -> tau`` (MH's and surrogate-MH's ``temperature_schedule``) turns a
chain into a mode seeker: its draws are no longer samples of the target. :class:`GeometricAnnealing`
is the schedule a record can hold (``mlm-ppl sample --anneal FROM:TO``, a run's settings
``anneal``); any other callable works in Python. :func:`annealing_record` is what a run records
of its kernel's annealing (``run.attrs["annealing"]``), :func:`annealing_note` the line its summary
and the command line print.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._checks import MIN_TEMPERATURE, check_count, check_temperature

__all__ = [
    "GeometricAnnealing",
    "SCHEDULE_OPTION",
    "TERMS_OPTION",
    "annealing_record",
    "annealing_note",
    "parse_anneal",
    "format_anneal",
    "options_schedule",
    "options_terms",
]

SCHEDULE_OPTION = "temperature_schedule"
"""The option by which a kernel that anneals takes its schedule (:meth:`KernelBase.anneals
<mlm_ppl.inference.spec.KernelBase.anneals>`): a callable ``step -> tau``, which no record holds."""
TERMS_OPTION = "anneal_terms"
"""The option that says what a kernel's schedule anneals (``"all"`` by default)."""


def options_schedule(options: Any) -> Callable[[int], float] | None:
    """The annealing schedule of a kernel's options (an Options object or its record), None without one."""
    return options.get(SCHEDULE_OPTION) if isinstance(options, Mapping) else getattr(options, SCHEDULE_OPTION, None)


def options_terms(options: Any) -> str:
    """What a kernel's options anneal (an Options object or its record): ``"all"`` where they do not say."""
    return options.get(TERMS_OPTION, "all") if isinstance(options, Mapping) else getattr(options, TERMS_OPTION, "all")


@dataclass(frozen=True)
class GeometricAnnealing:
    """A geometric temperature schedule from ``start`` to ``end`` over ``num_steps`` steps.

    ``tau(step) = start * (end / start) ** (min(step, num_steps) / num_steps)``: ``start`` at
    step 0, ``end`` from step ``num_steps`` on (``num_steps = 0``: ``end`` from the first step).

    A frozen record of three numbers, callable as a ``temperature_schedule``; a run records it
    (``annealing_record``). ``mlm-ppl sample --anneal FROM:TO`` is
    ``GeometricAnnealing(FROM, TO, warmup + draws * thin - 1)``: the last step runs at ``TO``.

    Parameters
    ----------
    start : float
        The temperature at step 0: a finite number >= 1e-6 (``MIN_TEMPERATURE``).
    end : float
        The temperature from step ``num_steps`` on: a finite number >= 1e-6.
    num_steps : int
        Steps from ``start`` to ``end``, >= 0.

    Raises
    ------
    ValueError
        Where ``start`` or ``end`` is not a finite number >= 1e-6, or ``num_steps`` is below 0.
    TypeError
        Where ``start`` or ``end`` is not a number, or ``num_steps`` not an integer.

    See Also
    --------
    mlm_ppl.inference.geometric_annealing : The same schedule, built by a function.

    Examples
    --------
    >>> from mlm_ppl.inference import GeometricAnnealing
    >>> schedule = GeometricAnnealing(1.0, 0.05, 100)
    >>> schedule(0), schedule(100), schedule(1000)
    (1.0, 0.05, 0.05)
    >>> schedule.to_dict()
    {'schedule': 'geometric', 'start': 1.0, 'end': 0.05, 'num_steps': 100}
    """

    start: float
    end: float
    num_steps: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", check_temperature(self.start, "start"))  # every tau lies between the two
        object.__setattr__(self, "end", check_temperature(self.end, "end"))
        check_count(self.num_steps, "num_steps", 0)

    def __call__(self, step: int) -> float:
        if self.num_steps == 0:
            return self.end
        frac = min(step, self.num_steps) / self.num_steps
        return self.start * (self.end / self.start) ** frac

    def to_dict(self) -> dict[str, Any]:
        """The schedule as a record: its kind (``"geometric"``) and its three numbers.

        Returns
        -------
        dict of str to object
            ``{"schedule": "geometric", "start": ..., "end": ..., "num_steps": ...}``, what a
            run's ``annealing`` attribute holds of it.
        """
        return {"schedule": "geometric", "start": self.start, "end": self.end, "num_steps": self.num_steps}


def parse_anneal(text: Any, name: str = "anneal") -> tuple[float, float]:
    """``(FROM, TO)`` of ``"FROM:TO"``, two finite numbers > 0; a ValueError naming ``name`` otherwise."""
    parts = text.split(":") if isinstance(text, str) else []
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(
            f"{name} must be FROM:TO, two numbers (tau goes geometrically from FROM to TO, e.g. 1:0.05), got {text!r}"
        ) from None
    if not all(math.isfinite(v) and v > 0 for v in (start, end)):
        raise ValueError(f"{name} {text!r}: FROM and TO must be finite numbers > 0 (e.g. 1:0.05)")
    if min(start, end) < MIN_TEMPERATURE:  # the schedule reaches every tau between FROM and TO
        raise ValueError(
            f"{name} {text!r}: FROM and TO must be >= {MIN_TEMPERATURE:g}, as every temperature (smaller ones "
            "overflow float32 and freeze every chain); e.g. 1:0.05"
        )
    return start, end


def format_anneal(start: float, end: float) -> str:
    """``"FROM:TO"`` in the one form a record keeps (``1:0.05``, not ``1.0:0.050``)."""
    return f"{_number(start)}:{_number(end)}"


def _number(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def annealing_record(schedule: Callable[[int], float] | None, terms: str) -> dict[str, Any] | None:
    """What a run records of an annealing ``schedule`` over ``terms``: None without one; the
    :class:`GeometricAnnealing`'s numbers and the terms, or ``{"schedule": "custom"}`` and the terms
    for any other callable (which no record can hold)."""
    if schedule is None:
        return None
    described = schedule.to_dict() if isinstance(schedule, GeometricAnnealing) else {"schedule": "custom"}
    return {**described, "terms": terms}


def annealing_note(record: Mapping[str, Any]) -> str:
    """The line an annealed run's summary (and the command line) starts with: the run is a mode
    seeker, its draws are not samples of the target."""
    start, end = record.get("start"), record.get("end")
    if record.get("schedule") == "geometric" and isinstance(start, (int, float)) and isinstance(end, (int, float)):
        tau = f"tau {_number(start)} -> {_number(end)}"
    else:
        tau = "tau from a custom schedule"
    tau += _floor_note(record)
    terms = record.get("terms", "all")
    what = {"all": "all terms", "mlm": "the MLM term", "constraints": "the constraints' term"}.get(terms, terms)
    return (
        f"annealed ({tau}, {what}): mode-seeking, draws are not samples of the target; "
        "R-hat/ESS describe the annealed chain"
    )


def _floor_note(record: Mapping[str, Any]) -> str:
    """Where an annealed run stops cooling, as its note says it: each chain's ``stopped_at`` (or,
    before the run ends, that each chain stops where its moves stall), or a fixed ``floor``."""
    floor, stopped = record.get("floor"), record.get("stopped_at")
    if isinstance(stopped, list):
        if not any(isinstance(t, (int, float)) for t in stopped):
            return ", no chain stopped cooling"
        taus = ", ".join(_number(round(t, 3)) if isinstance(t, (int, float)) else "-" for t in stopped)
        return f", chains stopped cooling at tau {taus} (-: never)"
    if floor == "chains":
        return ", each chain stops cooling where under 20% of its moves pass the exact correction"
    if isinstance(floor, (int, float)) and not isinstance(floor, bool) and floor > 0:
        return f", never below tau {_number(floor)}"
    return ""
