"""The kernels known by name: the one list of them.

:data:`KERNELS` maps each name to its class. :func:`~mlm_ppl.sample`, :func:`make_kernel`,
``MLMKernel``/``MLMGibbs``, the command line (``--kernel`` and every kernel's flags), run
configurations and checkpoints all read it, so a kernel registered here (one line below, or
:func:`register` from a user's code) is usable everywhere without touching another file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .._checks import check_choice
from ..models.target import Target
from .jump import GapJump
from .mask_predict import MaskPredict
from .mh import MetropolisHastings
from .pseudo_gibbs import PseudoGibbs
from .spec import Capabilities, KernelBase, Options
from .surrogate_mh import SurrogateMH
from .tempering import ReplicaMH

__all__ = ["KERNELS", "register", "unregister", "kernel_class", "length_kernels", "make_kernel"]


class _Kernels(Mapping[str, type[KernelBase]]):
    """Name -> kernel class, in registration order (a read-only view; change it with :func:`register`)."""

    def __init__(self) -> None:
        self._classes: dict[str, type[KernelBase]] = {}

    def __getitem__(self, name: str) -> type[KernelBase]:
        return self._classes[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __repr__(self) -> str:
        return f"KERNELS({', '.join(self._classes)})"


KERNELS = _Kernels()
"""Every kernel by name; ``tuple(KERNELS)`` lists the names."""


def register(cls: type[KernelBase]) -> type[KernelBase]:
    """Make a kernel class known by its ``name`` everywhere (usable as a class decorator).

    The class must declare ``name``, ``Options`` (an :class:`~mlm_ppl.inference.spec.Options`
    dataclass), ``State`` and ``Info`` (NamedTuples; the Info has ``lp`` and ``n_changed``) and
    ``capabilities``. A TypeError says what is missing; a name already taken is a ValueError.
    """
    if not isinstance(cls, type) or not issubclass(cls, KernelBase):
        raise TypeError(f"a kernel is a subclass of mlm_ppl.inference.spec.KernelBase, got {cls!r}")
    missing = [a for a in ("name", "Options", "State", "Info", "capabilities") if not hasattr(cls, a)]
    if missing:
        raise TypeError(f"kernel class {cls.__name__} does not declare {', '.join(missing)}")
    if not (isinstance(cls.Options, type) and issubclass(cls.Options, Options)):
        raise TypeError(f"{cls.__name__}.Options must be a dataclass subclass of mlm_ppl.inference.spec.Options")
    for what in ("State", "Info"):
        if not hasattr(getattr(cls, what), "_fields"):
            raise TypeError(f"{cls.__name__}.{what} must be a NamedTuple")
    if not {"lp", "n_changed"} <= set(cls.Info._fields):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__}.Info must report lp and n_changed")
    if not isinstance(cls.capabilities, Capabilities):
        raise TypeError(f"{cls.__name__}.capabilities must be a Capabilities")
    if cls.name in KERNELS._classes and KERNELS._classes[cls.name] is not cls:
        raise ValueError(f"a kernel named {cls.name!r} is registered already ({KERNELS[cls.name].__name__})")
    KERNELS._classes[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    """Forget the kernel ``name`` (a user's kernel; the built-in ones too, at the user's risk)."""
    KERNELS._classes.pop(check_choice(name, "kernel", tuple(KERNELS)))


def kernel_class(name: str) -> type[KernelBase]:
    """The class of the kernel ``name``, or a ValueError listing the known names."""
    return KERNELS[check_choice(name, "kernel", tuple(KERNELS))]


def length_kernels() -> tuple[str, ...]:
    """The kernels that move a variable gap's length (``capabilities.lengths``), those made for
    nothing else first (gap-jump: the default of ``--length-mode jump``)."""
    movers = [name for name, cls in KERNELS.items() if cls.capabilities.lengths]
    return tuple(sorted(movers, key=lambda name: KERNELS[name].capabilities.fixed))


def make_kernel(name: str, target: Target, **options: Any) -> KernelBase:
    """Build the kernel ``name`` on ``target`` with its options (checked by its ``Options``)."""
    return kernel_class(name)(target, **options)


for _builtin in (MetropolisHastings, SurrogateMH, ReplicaMH, PseudoGibbs, MaskPredict, GapJump):  # registration
    register(_builtin)
