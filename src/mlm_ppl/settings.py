"""A sampling run's settings as one typed, frozen record: :class:`RunSettings`.

Made once (from the command line's flags, from a run's ``config.json``, or in Python) and checked
once, when it is made: every field's type and range, and the kernel's own options as that
kernel's ``Options`` (:mod:`mlm_ppl.inference.spec`). The same record is written to
``config.json`` and into every checkpoint, and compared on resume.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._checks import check_choice, check_count, check_seed, check_temperature, check_type
from .inference.base import INITS
from .inference.registry import KERNELS, kernel_class
from .inference.spec import OptionInfo
from .models.energy import ENERGIES
from .models.loading import model_files

__all__ = ["RunSettings", "MAX_CHAINS", "option_flags"]

MAX_CHAINS = 1000
"""More chains than this are refused unless forced: their plots and per-chain diagnostics stop being
readable, and one run's memory grows with them; run several directories instead."""


def _flag(default: Any, help: str) -> Any:
    """A setting the command line has as a flag of its own (``--name``), with its help."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class RunSettings:
    """Every setting of a sampling run.

    ``template`` (mask tokens at the positions to sample) or ``length`` (a whole sequence of N
    tokens), exactly one. ``kernel_options`` is the kernel's ``Options`` (a mapping is checked
    into one). ``workers``: Ray workers, or None for one process. ``model_files``: the sha256 of
    each file the model is read from (:func:`~mlm_ppl.models.loading.model_files`), recorded by
    :meth:`with_model_files` for a run directory (which refuses settings without them) and
    checked each time the run loads its model; None in settings that only live in memory. A
    TypeError or ValueError names the setting to fix.
    """

    model: str = "antiberty"
    template: str | None = None
    length: int | None = None
    kernel: str = _flag("mh", "the kernel (its options are the flags below)")
    kernel_options: Any = None
    energy: str = _flag("norm", "E_norm (negative pseudo-log-likelihood) or E_raw (negative sum of logits)")
    temperature: float = _flag(1.0, "target temperature T")
    chains: int = _flag(4, "chains, advanced together")
    draws: int = _flag(100, "draws kept per chain")
    warmup: int = _flag(0, "steps discarded before the first draw")
    thin: int = _flag(1, "keep every k-th step")
    seed: int = _flag(0, "seed of every chain's random stream")
    init: str = _flag("sample", "how the masks are first filled")
    dtype: str | None = None
    device: str | None = None
    workers: int | None = None
    model_files: dict[str, str] | None = None

    def __post_init__(self) -> None:
        for name in ("model", "template", "dtype", "device"):
            if getattr(self, name) is not None:
                check_type(getattr(self, name), name, str)
        if (self.template is None) == (self.length is None):
            raise ValueError("give a template (mask tokens at the positions to sample) or a length, not both")
        check_choice(self.kernel, "kernel", tuple(KERNELS))
        check_choice(self.energy, "energy", ENERGIES)
        check_choice(self.init, "init", INITS)
        object.__setattr__(self, "temperature", check_temperature(self.temperature, "temperature"))
        for name, minimum in (("chains", 1), ("draws", 1), ("warmup", 0), ("thin", 1)):
            check_count(getattr(self, name), name, minimum)
        for name in ("length", "workers"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 1)
        check_seed(self.seed)
        if self.model_files is not None:
            files = self.model_files
            if not isinstance(files, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in files.items()
            ):
                raise TypeError("model_files must map each file name of the model to its sha256 (64 hex digits)")
            object.__setattr__(self, "model_files", dict(files))
        cls = kernel_class(self.kernel).Options
        options = self.kernel_options
        if options is None:
            options = cls()
        elif isinstance(options, Mapping):
            options = cls.from_dict(options, self.kernel)
        elif type(options) is not cls:
            raise TypeError(f"kernel_options of kernel {self.kernel!r} must be {cls.__name__} or a mapping")
        object.__setattr__(self, "kernel_options", options)

    @property
    def total_steps(self) -> int:
        """Warm-up and kept steps: ``warmup + draws * thin``."""
        return self.warmup + self.draws * self.thin

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (the kernel's options nested, Python-only ones left out)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["kernel_options"] = self.kernel_options.to_dict()
        if self.model_files is not None:
            out["model_files"] = dict(self.model_files)
        return out

    @classmethod
    def from_dict(cls, values: Any, what: str = "run settings") -> RunSettings:
        """A record from :meth:`to_dict`'s form; every problem is a ValueError that starts with ``what``."""
        if not isinstance(values, Mapping):
            raise ValueError(f"{what}: not a mapping of settings")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = sorted(set(values) - known), sorted(known - set(values))
        parts = [f"{word} {', '.join(names)}" for word, names in (("unknown", unknown), ("missing", missing)) if names]
        if parts:
            raise ValueError(f"{what}: {'; '.join(parts)}")
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what}: {err}") from None

    def with_model_files(self) -> RunSettings:
        """The same settings with ``model_files`` read from the model's files now: what a new run records."""
        return dataclasses.replace(self, model_files=model_files(self.model))

    def for_template(self, template: str) -> RunSettings:
        """The same settings for another template, in one process (a batch's template run)."""
        return dataclasses.replace(self, template=template, length=None, workers=None)


def option_flags() -> dict[str, list[tuple[str, OptionInfo]]]:
    """Every command-line kernel option of the registered kernels: name -> ``(kernel, its
    declaration)`` for each kernel that takes it. One flag carries the option for all of them,
    so their types must agree (a TypeError names the two kernels otherwise)."""
    out: dict[str, list[tuple[str, OptionInfo]]] = {}
    for name, k in KERNELS.items():
        for info in k.Options.describe():
            if not info.cli:
                continue
            same = out.setdefault(info.name, [])
            if same and same[0][1].type is not info.type:
                raise TypeError(
                    f"option {info.name!r} is {info.type.__name__} in kernel {name!r} but "
                    f"{same[0][1].type.__name__} in {same[0][0]!r}: one command-line flag cannot carry both"
                )
            same.append((name, info))
    return out
