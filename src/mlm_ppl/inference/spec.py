"""How a kernel declares itself, once: its name, options, State, Info and capabilities.

A kernel is a subclass of :class:`KernelBase` with five class attributes:

* ``name``: what :func:`~mlm_ppl.sample`, the command line (``--kernel``), ``MLMKernel`` and
  checkpoints call it;
* ``Options``: a frozen dataclass of :class:`Options`, each field made with :func:`option`
  (type from its annotation, default, one check, help). The command line's flags, the
  validation of a run's ``config.json`` and the checkpoint's record of the settings are all
  derived from it;
* ``State`` and ``Info``: NamedTuples. A checkpoint stores the State's fields; the per-draw
  statistics written to ``run.nc`` are the Info's fields (:meth:`KernelBase.stat_names`);
* ``capabilities``: :class:`Capabilities`, what the rest of the library may ask of it.

:func:`~mlm_ppl.inference.registry.register` makes a kernel known everywhere
(``docs/architecture.md`` adds one in a worked example).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from torch import Tensor

from .._checks import check_choice, check_type
from ..models.constraints import ConstraintTarget
from ..models.distribution import MaskedLMDistribution
from ..models.gap_target import GapTarget
from ..models.target import ConstrainedTarget, Evaluation, ScaledTarget, Target
from .annealing import annealing_record

__all__ = ["STAT_NAMES", "Capabilities", "Options", "option", "OptionInfo", "KernelBase"]

STAT_NAMES = ("lp", "is_accepted", "acceptance_rate", "n_changed", "n_moves")
"""Per-draw statistics of every run (ArviZ's names where ArviZ has one); a kernel's Info may report
more (every field of its Info is a statistic)."""


@dataclass(frozen=True)
class Capabilities:
    """What the rest of the library may ask of a kernel.

    Each kernel class declares one as its ``capabilities`` (the fields are also its attributes).

    Parameters
    ----------
    log_factor : bool
        It samples its target's whole log density, log-factor included, and
        :meth:`KernelBase.with_log_factor` updates a state's log-factor without a forward pass:
        it may sample a target with constraints or likelihood terms.
    gibbs : bool
        It may move a token site inside :class:`~mlm_ppl.MLMGibbs` (it needs ``log_factor``) and
        is exact for its target.
    complete_start : bool
        :meth:`KernelBase.init` takes complete states (the template filled); False: the masked
        template (a decoder).
    exact_matrix : bool
        :meth:`KernelBase.transition_matrix` gives its exact transition matrix (tiny targets).
    lengths : bool, optional
        It moves the length of a variable gap: it samples a
        :class:`~mlm_ppl.models.gap_target.GapTarget` (which every other kernel refuses).
        Default False.
    batched : bool, optional
        Its chains advance in one batched forward pass; False: one chain at a time (what a run's
        time estimate assumes). Default True.
    fixed : bool, optional
        It samples a fixed template (False: only a variable gap, as gap-jump). Default True.
    samples_target : bool, optional
        Its stationary law is its target's, ``exp(-E/T)`` times any log-factor it takes. False
        for a kernel with no guaranteed target (pseudo-Gibbs, whose conditionals need not be
        those of any joint law; mask-predict, a decoder): its runs record it, and their chains'
        verdict is "mixed" (they agree on the kernel's own law), never "converged". Default True.

    Examples
    --------
    >>> from mlm_ppl.inference import Capabilities, GapJump
    >>> GapJump.capabilities.lengths, GapJump.capabilities.fixed
    (True, False)
    >>> Capabilities(log_factor=True, gibbs=True, complete_start=True, exact_matrix=True).batched
    True
    """

    log_factor: bool
    gibbs: bool
    complete_start: bool
    exact_matrix: bool
    lengths: bool = False
    batched: bool = True
    fixed: bool = True
    samples_target: bool = True


@dataclass(frozen=True)
class OptionInfo:
    """One option as the command line and the run record see it (:meth:`Options.describe`).

    Parameters
    ----------
    name : str
        The field's name (the flag is :attr:`flag`).
    type : type
        ``int``, ``float``, ``str`` or ``bool``: the flag's type; ``object`` for a Python-only option.
    default : object
        The field's default.
    help : str
        The one-line help.
    choices : tuple of str or None
        The values allowed, or None.
    cli : bool
        Whether the command line has it; False: Python only (e.g. a callable), never in a run's
        ``config.json``.
    check : callable or None
        Its one check, ``check(value, name) -> value``, after the type's.
    """

    name: str
    type: type  # int, float, str or bool: the flag's type; object for a Python-only option
    default: Any
    help: str
    choices: tuple[str, ...] | None
    cli: bool  # False: Python only (e.g. a callable), never in a run's config.json
    check: Callable[[Any, str], Any] | None  # its one check, after the type's

    @property
    def flag(self) -> str:
        """The command-line flag, ``--`` and the name with dashes for underscores."""
        return "--" + self.name.replace("_", "-")


def option(
    default: Any,
    help: str,
    *,
    check: Callable[[Any, str], Any] | None = None,
    choices: tuple[str, ...] | None = None,
    cli: bool = True,
) -> Any:
    """A field of an :class:`Options` dataclass: its default, a one-line help and one check.

    The field's type (for the command line and the type check) is its annotation's. None is
    always allowed for a default of None.

    Parameters
    ----------
    default : object
        The option's default.
    help : str
        One line of help (the command line's and :meth:`Options.describe`'s).
    check : callable or None, optional
        ``check(value, name) -> value``, raising TypeError for a value of the wrong type and
        ValueError for one out of range; run after the type's check when the options are made.
    choices : tuple of str or None, optional
        The values allowed (checked instead of the type).
    cli : bool, optional
        False for a Python-only option (e.g. a callable): not on the command line, never in a
        run's ``config.json``. Default True.

    Returns
    -------
    dataclasses.Field
        The field, its ``metadata`` holding ``help``, ``check``, ``choices`` and ``cli``.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> from mlm_ppl.inference import Options, option
    >>> @dataclass(frozen=True)
    ... class StepOptions(Options):
    ...     steps: int = option(3, "inner steps per step")
    >>> StepOptions().steps, StepOptions(steps=5).given()
    (3, {'steps': 5})
    >>> StepOptions(steps=2.5)
    Traceback (most recent call last):
    ...
    TypeError: steps must be ...
    """
    meta = {"help": help, "check": check, "choices": choices, "cli": cli}
    return dataclasses.field(default=default, metadata=meta)


_SCALARS = (int, float, str, bool)  # the types an option may have on the command line


def _scalar(hint: Any) -> type:
    """``int`` of ``int | None`` and so on; ``object`` for anything else (Python-only options)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return args[0] if len(args) == 1 and args[0] in _SCALARS else object


@dataclass(frozen=True)
class Options:
    """Base of every kernel's options: each field checked once, when the options are made.

    A subclass is a frozen dataclass whose fields are made with :func:`option`; each value is
    checked against the field's choices or type, then by its check.

    Raises
    ------
    TypeError
        When a value has the wrong type (a field's check may raise it too).
    ValueError
        When a value is not one of the field's choices, or its check finds it out of range.

    Examples
    --------
    >>> from mlm_ppl.inference import MHOptions
    >>> MHOptions(block_size=2).given()
    {'block_size': 2}
    >>> MHOptions(block_size=0)
    Traceback (most recent call last):
    ...
    ValueError: block_size must be an integer >= 1, got 0
    """

    def __post_init__(self) -> None:
        for info in self.describe():
            value = getattr(self, info.name)
            if value is None and info.default is None:
                continue
            if info.choices is not None:
                value = check_choice(value, info.name, info.choices)
            elif info.type is not object:
                value = check_type(value, info.name, info.type)
            if info.check is not None:
                value = info.check(value, info.name)
            object.__setattr__(self, info.name, value)

    @classmethod
    def describe(cls) -> tuple[OptionInfo, ...]:
        """Every option: name, type, default, help, choices, whether the command line has it.

        Returns
        -------
        tuple of OptionInfo
            One per field, in the dataclass's order.
        """
        hints = typing.get_type_hints(cls)
        return tuple(
            OptionInfo(f.name, _scalar(hints[f.name]), f.default, **f.metadata) for f in dataclasses.fields(cls)
        )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], kernel: str) -> Options:
        """The options of kernel ``kernel`` from a mapping of option names to values.

        An unknown name is a TypeError naming it and the options the kernel takes (the one
        wording, wherever options come from).

        Parameters
        ----------
        values : mapping of str to object
            The options given.
        kernel : str
            The kernel's name, for the error.

        Returns
        -------
        Options
            The options, each checked.

        Raises
        ------
        TypeError
            When a name is not an option of this class, or a value has the wrong type.
        ValueError
            When a value is out of range or not one of its choices.

        Examples
        --------
        >>> from mlm_ppl.inference import MHOptions
        >>> MHOptions.from_dict({"block_size": 2}, "mh").block_size
        2
        >>> MHOptions.from_dict({"blocks": 2}, "mh")
        Traceback (most recent call last):
        ...
        TypeError: kernel 'mh' takes no option 'blocks'; its options are anneal_terms, block_size, ...
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(
                f"kernel {kernel!r} takes no option {', '.join(map(repr, unknown))}; "
                f"its options are {', '.join(sorted(known)) or 'none'}"
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """The options a run records (Python-only ones left out).

        Returns
        -------
        dict of str to object
            Each option's value by name, in the dataclass's order.
        """
        return {i.name: getattr(self, i.name) for i in self.describe() if i.cli}

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults (what a user wrote).

        Returns
        -------
        dict of str to object
            The value of each option not at its default, by name.
        """
        return {i.name: getattr(self, i.name) for i in self.describe() if getattr(self, i.name) != i.default}


OptionsT = TypeVar("OptionsT", bound=Options)


def _beyond_proposals(target: Target) -> bool:
    """Whether ``target``'s density has terms that proposals within its alphabets (``allowed``) do
    not honour: a log-factor or a scaled energy. A constraint spec of alphabets alone has none
    (its log-factor is 0 within them); the target it constrains may. A distribution's own
    ``constraints`` are such a spec."""
    if isinstance(target, ConstraintTarget) and target.constraints.alphabets_only:
        return _beyond_proposals(target.base)
    if isinstance(target, MaskedLMDistribution):
        return target.constraints is not None and not target.constraints.alphabets_only
    return isinstance(target, (ConstrainedTarget, ScaledTarget))


class KernelBase(Generic[OptionsT]):
    """Base class of every kernel: the contract it fulfils and what it declares about itself.

    The contract is this class's (``mlm_ppl.inference.Kernel`` is another name of it); the
    declarations are five class attributes: ``name``, ``Options`` (a frozen dataclass of
    :class:`Options`), ``State`` and ``Info`` (NamedTuples) and ``capabilities``
    (:class:`Capabilities`), described in the module docstring of ``mlm_ppl.inference.spec``.
    ``Kernel(target, **options)`` checks the options (unknown ones are a TypeError naming the
    kernel), keeps them as ``options``, checks the target against the capabilities, and calls
    :meth:`bind_target`.

    Parameters
    ----------
    target : Target
        What the kernel samples (a :class:`~mlm_ppl.models.gap_target.GapTarget` for a kernel
        that moves a variable gap's lengths).
    **options
        The kernel's options, checked by its ``Options`` (:meth:`Options.from_dict`).

    Attributes
    ----------
    target : Target
        The target given.
    options : Options
        The options, checked.

    Raises
    ------
    TypeError
        When an option is unknown to the kernel or of the wrong type.
    ValueError
        When an option is out of range; when the target is a variable gap and the kernel does not
        move lengths (``capabilities.lengths``), or a fixed template and the kernel samples only a
        variable gap; when the target has a log-factor (constraints, likelihood terms, a scaled
        energy) and the kernel does not sample one (``capabilities.log_factor``); or when
        :meth:`bind_target` finds the options do not fit the target.

    Examples
    --------
    >>> from mlm_ppl.inference import KernelBase, MetropolisHastings
    >>> issubclass(MetropolisHastings, KernelBase)
    True
    >>> MetropolisHastings.name, MetropolisHastings.capabilities.exact_matrix
    ('mh', True)
    >>> MetropolisHastings.stat_names()
    ('lp', 'is_accepted', 'acceptance_rate', 'n_changed', 'n_moves', 'evaluated')
    """

    name: ClassVar[str]
    Options: ClassVar[type[Options]]
    State: ClassVar[type]
    Info: ClassVar[type]
    capabilities: ClassVar[Capabilities]
    older_records: ClassVar[Mapping[str, Any]] = {}
    """Options added after the kernel's first runs were recorded, each with the value those runs
    had: what a record written before them is read with (``RunSettings.completed``), so that
    resuming it is not refused as an edit."""

    def __init__(self, target: Target, **options: Any) -> None:
        self.target = target
        self.options: OptionsT = self.Options.from_dict(options, self.name)  # type: ignore[assignment]
        gap = isinstance(target, GapTarget)
        if not gap and not self.capabilities.fixed:
            raise ValueError(
                f"{self.name} samples the lengths of a variable gap: give it a GapTarget (a template with "
                "MASK{a,b}); for a fixed template use kernel='mh'"
            )
        if gap and not self.capabilities.lengths:
            raise ValueError(
                f"{self.name} keeps every chain at its starting length and would not sample the variable gap's "
                "lengths: use kernel='gap-jump', or 'surrogate-mh' around its moves (or sample each length as its own "
                "target: --length-mode strata)"
            )
        if _beyond_proposals(target) and not self.capabilities.log_factor:
            raise ValueError(
                f"{self.name} would ignore the log-factor (constraints, likelihood terms, other sites of a Pyro "
                "model, a poutine.scale or mask on the site): it does not sample one (capabilities.log_factor is "
                "false); use kernel='mh', which is exact for the whole model (a constraint spec of Allowed rules "
                "alone it honours, proposing within the alphabets)"
            )
        self.bind_target(target)

    def bind_target(self, target: Target) -> None:
        """Check the options against the target and derive what depends on it, once.

        What depends on the target: checks of the options against it (MH: a block no larger than
        the free positions) and what the kernel derives from it once (surrogate-MH: its surrogate
        and inner chain). Called by ``__init__``; nothing here.

        Parameters
        ----------
        target : Target
            The kernel's target.
        """

    def chains_batched(self) -> bool:
        """Whether this kernel's chains advance in one batched forward pass.

        What a run's time estimate assumes: ``capabilities.batched``, unless its target decides
        (surrogate-MH on a variable gap steps its inner chains one at a time).

        Returns
        -------
        bool
            True where the chains are batched.
        """
        return self.capabilities.batched

    def evaluations_per_step(self) -> float:
        """At most how much work one step does for one chain, in full evaluations of the target.

        A full evaluation is one :meth:`~mlm_ppl.models.Target.evaluate` of one state; the figure
        comes from the options, and a run's time is estimated from it before it starts. One here,
        as for an MH step; a kernel whose step may do more (an inner chain, a second pass) says
        how much more.

        Returns
        -------
        float
            Evaluations per step and chain (1.0 here).
        """
        return 1.0

    @classmethod
    def anneals(cls) -> bool:
        """Whether the kernel takes an annealing schedule.

        It does where its options have ``temperature_schedule`` (and ``anneal_terms``), read as
        ``scheduled_log_density`` (``mlm_ppl.inference.base``) reads them.

        Returns
        -------
        bool
            True where the options have ``temperature_schedule``.
        """
        return any(i.name == "temperature_schedule" for i in cls.Options.describe())

    def annealing(self) -> dict[str, Any] | None:
        """What a run of this kernel records of its annealing (``run.attrs["annealing"]``).

        Returns
        -------
        dict of str to object or None
            ``annealing_record`` (``mlm_ppl.inference.annealing``) of the options' schedule and
            terms; None when the kernel does not anneal (:meth:`anneals`).
        """
        if not self.anneals():
            return None
        return annealing_record(self.options.temperature_schedule, self.options.anneal_terms)  # type: ignore[attr-defined]

    def annealing_end(self, state: Any) -> dict[str, Any]:
        """What a run adds to its :meth:`annealing` record at its end, from its last state.

        A kernel that decides as it runs where each chain stops cooling records it here; nothing
        here.

        Parameters
        ----------
        state : object
            The chains' last state (the kernel's ``State``).

        Returns
        -------
        dict of str to object
            The entries to add (empty here).
        """
        return {}

    @classmethod
    def stat_names(cls) -> tuple[str, ...]:
        """Per-draw statistics of a run of this kernel: :data:`STAT_NAMES` and its Info's other fields.

        Returns
        -------
        tuple of str
            :data:`STAT_NAMES`, then the fields of ``Info`` not among them, in its order.
        """
        fields: tuple[str, ...] = cls.Info._fields  # type: ignore[attr-defined]
        return STAT_NAMES + tuple(f for f in fields if f not in STAT_NAMES)

    # -- the contract
    def init(self, tokens: Tensor) -> Any:
        """The state of chains starting at ``tokens``.

        Parameters
        ----------
        tokens : torch.Tensor
            Starting states, shape ``(C, L)``.

        Returns
        -------
        object
            The kernel's ``State`` of the ``C`` chains.

        Raises
        ------
        NotImplementedError
            Here; every kernel overrides it.
        """
        raise NotImplementedError

    def step(self, state: Any, streams: Any) -> tuple[Any, Any]:
        """One update of every chain; chain ``c`` draws only from ``streams`` row ``c``.

        Parameters
        ----------
        state : object
            The kernel's ``State`` of ``C`` chains.
        streams : ChainStreams
            One random stream per chain.

        Returns
        -------
        state : object
            The new ``State``.
        info : object
            The step's statistics (the kernel's ``Info``).

        Raises
        ------
        NotImplementedError
            Here; every kernel overrides it.
        """
        raise NotImplementedError

    # -- capabilities (a kernel that declares one overrides its method)
    def with_log_factor(self, state: Any, log_factor: Tensor) -> Any:
        """The state with new extra log terms (the rest of a model moved; the MLM terms did not).

        Parameters
        ----------
        state : object
            The kernel's ``State``.
        log_factor : torch.Tensor
            The new log-factor of each chain, shape ``(C,)``.

        Returns
        -------
        object
            The ``State`` with that log-factor, for a kernel with ``capabilities.log_factor``.

        Raises
        ------
        TypeError
            Here, for a kernel that does not sample a log-factor (``capabilities.log_factor`` is
            False); a kernel that does overrides it.
        """
        raise TypeError(f"kernel {self.name!r} does not sample a log-factor (capabilities.log_factor is False)")

    def transition_matrix(self, states: Tensor, evaluation: Evaluation, index: Callable[[Tensor], Tensor]) -> Tensor:
        """The exact transition matrix of one step over the given states.

        See :func:`~mlm_ppl.inference.exact.transition_matrix`, which calls it.

        Parameters
        ----------
        states : torch.Tensor
            Every state of the target, shape ``(S, L)``.
        evaluation : Evaluation
            The target's evaluation of ``states``.
        index : callable
            Maps states ``(N, L)`` to their rows in ``states``.

        Returns
        -------
        torch.Tensor
            Shape ``(S, S)``, float64: row ``s`` the law of the next state from state ``s``, for a
            kernel with ``capabilities.exact_matrix``.

        Raises
        ------
        TypeError
            Here, for a kernel without an exact matrix (``capabilities.exact_matrix`` is False); a
            kernel with one overrides it.
        """
        raise TypeError(f"kernel {self.name!r} has no exact transition matrix (capabilities.exact_matrix is False)")

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.options.given().items())
        return f"{type(self).__name__}({shown})"
