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

    The class ``cls`` must be a subclass of :class:`~mlm_ppl.inference.KernelBase` that declares
    ``name``, ``Options`` (an :class:`~mlm_ppl.inference.Options` dataclass), ``State`` and
    ``Info`` (NamedTuples; the Info has ``lp`` and ``n_changed``) and ``capabilities``.
    Registering a class again under its own name changes nothing.

    Returns
    -------
    type
        ``cls`` itself.

    Raises
    ------
    TypeError
        When ``cls`` is not a subclass of :class:`~mlm_ppl.inference.KernelBase` or does not declare
        what it must (the message says what is missing or wrong).
    ValueError
        When another class is registered under the same name.

    See Also
    --------
    unregister : Forget a kernel.

    Examples
    --------
    >>> from mlm_ppl.inference import MetropolisHastings, kernel_class, register, unregister
    >>> class MyMH(MetropolisHastings):
    ...     name = "my-mh"
    >>> register(MyMH) is MyMH
    True
    >>> kernel_class("my-mh").__name__
    'MyMH'
    >>> unregister("my-mh")
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
    """Forget the kernel ``name`` (a user's kernel; the built-in ones too, at the user's risk).

    Parameters
    ----------
    name : str
        A registered kernel's name.

    Raises
    ------
    ValueError
        When no kernel is registered as ``name`` (the message lists the known names).

    See Also
    --------
    register : Make a kernel known (its example unregisters it).
    """
    KERNELS._classes.pop(check_choice(name, "kernel", tuple(KERNELS)))


def kernel_class(name: str) -> type[KernelBase]:
    """The class of the kernel ``name``, or a ValueError listing the known names.

    Parameters
    ----------
    name : str
        A registered kernel's name (``tuple(KERNELS)`` lists them).

    Returns
    -------
    type
        The kernel's class, a subclass of :class:`~mlm_ppl.inference.KernelBase`.

    Raises
    ------
    ValueError
        When no kernel is registered as ``name``.

    Examples
    --------
    >>> from mlm_ppl.inference import kernel_class
    >>> kernel_class("gap-jump").__name__
    'GapJump'
    """
    return KERNELS[check_choice(name, "kernel", tuple(KERNELS))]


def length_kernels() -> tuple[str, ...]:
    """The names of the kernels that move a variable gap's length (``capabilities.lengths``).

    Returns
    -------
    tuple of str
        Their names, those made for nothing else (``capabilities.fixed`` False) first, then in
        registration order: the first is the default of ``--length-mode jump``.

    Examples
    --------
    >>> from mlm_ppl.inference import length_kernels
    >>> length_kernels()
    ('gap-jump', 'surrogate-mh')
    """
    movers = [name for name, cls in KERNELS.items() if cls.capabilities.lengths]
    return tuple(sorted(movers, key=lambda name: KERNELS[name].capabilities.fixed))


def make_kernel(name: str, target: Target, **options: Any) -> KernelBase:
    """Build the kernel ``name`` on ``target`` with its options (checked by its ``Options``).

    Parameters
    ----------
    name : str
        A registered kernel's name (``tuple(KERNELS)`` lists them).
    target : Target
        What the kernel samples.
    **options
        The kernel's options.

    Returns
    -------
    KernelBase
        The kernel.

    Raises
    ------
    ValueError
        When no kernel is registered as ``name``, an option is out of range, or the kernel refuses
        the target (see :class:`~mlm_ppl.inference.KernelBase`).
    TypeError
        When an option is unknown to the kernel or of the wrong type.

    Examples
    --------
    >>> from mlm_ppl import MaskedLMDistribution
    >>> from mlm_ppl.inference import make_kernel
    >>> from mlm_ppl.testing import tiny_residue_bert
    >>> target = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK][MASK]C")
    >>> make_kernel("mh", target, block_size=2)
    MetropolisHastings(block_size=2)
    """
    return kernel_class(name)(target, **options)


for _builtin in (MetropolisHastings, SurrogateMH, ReplicaMH, PseudoGibbs, MaskPredict, GapJump):  # registration
    register(_builtin)
