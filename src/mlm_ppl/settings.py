"""A sampling run's settings as one typed, frozen record: :class:`RunSettings`.

Made once (from the command line's flags, from a run's ``config.json``, or in Python) and checked
once, when it is made: every field's type and range, and the kernel's own options as that
kernel's ``Options`` (:class:`mlm_ppl.inference.Options`). The same record is written to
``config.json`` and into every checkpoint, and compared on resume.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._checks import check_choice, check_count, check_seed, check_temperature, check_type
from .inference.annealing import (
    SCHEDULE_OPTION,
    TERMS_OPTION,
    GeometricAnnealing,
    annealing_record,
    format_anneal,
    options_schedule,
    options_terms,
    parse_anneal,
)
from .inference.base import INITS
from .inference.registry import KERNELS, kernel_class, length_kernels
from .inference.spec import OptionInfo
from .models.constraints import ConstraintSpec
from .models.energy import ENERGIES
from .models.gaps import GapTemplate, LengthPrior, has_variable_gap
from .models.loading import model_files

__all__ = ["RunSettings", "MAX_CHAINS", "STOP_EVERY", "option_flags"]

MAX_CHAINS = 1000
"""More chains than this are refused unless forced: their plots and per-chain diagnostics stop being
readable, and one run's memory grows with them; run several directories instead."""

STOP_EVERY = 10
"""Draws between two convergence checks of an ``until_converged`` run (fixed: where a run stops is
part of its record, and a resumed run stops where the uninterrupted one would)."""

_SHA256 = re.compile(r"[0-9a-f]{64}")
"""A sha256 as the record keeps it: 64 lowercase hex digits (a model file's, an earlier run's states')."""

_ADDED = frozenset({"constraints", "anneal", "until_converged", "length_prior", "starts"})
"""Settings a record written before them lacks (read as their defaults)."""

RENAMED = {"chains": "num_chains", "draws": "num_samples", "warmup": "warmup_steps"}
"""Settings a record written before 0.4 names by their short names: read under Pyro's names."""


def _flag(default: Any, help: str, metavar: str | None = None, aliases: tuple[str, ...] = ()) -> Any:
    """A setting the command line has as a flag of its own (``--name``, and the short ``aliases``
    kept from before the names were Pyro's), with its help."""
    return dataclasses.field(default=default, metadata={"help": help, "metavar": metavar, "aliases": aliases})


@dataclass(frozen=True)
class RunSettings:
    """Every setting of a sampling run, checked once, when the record is made.

    The same record is written to a run directory's ``config.json`` and into every checkpoint,
    and compared on resume. What needs the model (the tokens of ``Allowed`` rules, their
    positions, the experts on a real state) is checked when the target is built
    (:func:`mlm_ppl.campaign.build`).

    Parameters
    ----------
    model : str, optional
        The model's name or path, as :func:`~mlm_ppl.load_mlm` loads it (default ``"antiberty"``).
    template : str or None, optional
        Mask tokens at the positions to sample; exactly one of ``template`` and ``length``. A
        variable gap ``MASK{a,b}`` gives loops of several lengths, which only a kernel that moves
        lengths samples (``capabilities.lengths``: gap-jump, surrogate-MH around its moves), in
        one process for now (no ``workers``); gap-jump samples nothing else.
    length : int or None, optional
        A whole sequence of N tokens, every one sampled; exactly one of ``template`` and ``length``.
    kernel : str, optional
        The kernel, a name of :data:`~mlm_ppl.inference.KERNELS` (default ``"mh"``).
    kernel_options : Options or mapping or None, optional
        The kernel's ``Options`` (a mapping is checked into one; None: its defaults). An annealing
        schedule in them is refused (a callable cannot be recorded: give ``anneal``).
    energy : str, optional
        ``"norm"`` (E_norm, the negative pseudo-log-likelihood; default) or ``"raw"`` (E_raw, the
        negative sum of logits).
    temperature : float, optional
        The target temperature T (default 1.0).
    num_chains : int, optional
        Chains, advanced together (default 4).
    num_samples : int, optional
        Draws kept per chain (default 100); with ``until_converged``, the most the run takes.
    warmup_steps : int, optional
        Steps discarded before the first draw (default 0).
    thin : int, optional
        Keep every k-th step (default 1).
    seed : int, optional
        Seed of every chain's random stream (default 0).
    init : str, optional
        How the masks are first filled, a name of :data:`~mlm_ppl.inference.INITS` (default
        ``"sample"``).
    anneal : str or None, optional
        ``"FROM:TO"`` (two finite numbers > 0, kept as ``format_anneal`` writes them): the kernel's
        annealing schedule over the whole run (:meth:`schedule`), tau geometrically from FROM at
        the first step to TO at the last, for a kernel that anneals; its options say which terms
        (``options_terms``). A mode seeker: its draws are not samples of the target.
    dtype : str or None, optional
        The model's dtype (None: float32).
    device : str or None, optional
        The model's device (None: the CPU).
    workers : int or None, optional
        Ray workers, or None for one process.
    model_files : dict of str to str or None, optional
        The sha256 of each file the model is read from (``mlm_ppl.models.loading.model_files``),
        recorded by :meth:`with_model_files` for a run directory (which refuses settings without
        them) and checked each time the run loads its model; None in settings that only live in
        memory.
    constraints : dict or None, optional
        A :class:`~mlm_ppl.ConstraintSpec` as its ``to_dict()`` (a spec is turned into one),
        checked with ``ConstraintSpec.from_dict`` and kept in that canonical form; None (or an
        empty spec) for the bare target.
    until_converged : bool, optional
        End the run at the first multiple of :data:`STOP_EVERY` draws whose summary says every
        chain converged (:func:`~mlm_ppl.diagnostics.stop_when_converged`). Not with ``anneal``
        (an annealed run's verdict is never converged) nor ``workers`` (the rule needs every
        chain's draws in one process), and only with ``num_samples`` above :data:`STOP_EVERY`.
    length_prior : dict of str to float or None, optional
        The ``pi(L)`` of a template with a variable gap (length as text -> weight, summing to 1;
        None: uniform), which only a kernel that moves lengths samples.
    starts : dict of str to str or None, optional
        The chains start where the chains of an earlier run of the same model and template are
        (``{"run": its directory, "sha256": of those states}``,
        :func:`mlm_ppl.campaign.starts_record`) instead of a fill of the template (``init``); None:
        a fill. Not with ``workers``.

    Raises
    ------
    TypeError, ValueError
        Where a setting has the wrong type or value, or settings do not go together; the message
        names the setting to fix.

    Examples
    --------
    >>> from mlm_ppl.settings import RunSettings
    >>> settings = RunSettings(template="AC[MASK][MASK]E", num_chains=2, num_samples=10, thin=2)
    >>> settings.kernel, settings.total_steps
    ('mh', 20)
    >>> RunSettings.from_dict(settings.to_dict()) == settings
    True
    """

    model: str = "antiberty"
    template: str | None = None
    length: int | None = None
    kernel: str = _flag("mh", "the kernel (its options are the flags below)")
    kernel_options: Any = None
    energy: str = _flag("norm", "E_norm (negative pseudo-log-likelihood) or E_raw (negative sum of logits)")
    temperature: float = _flag(1.0, "target temperature T")
    num_chains: int = _flag(4, "chains, advanced together", aliases=("--chains",))
    num_samples: int = _flag(100, "draws kept per chain", aliases=("--draws",))
    warmup_steps: int = _flag(0, "steps discarded before the first draw", aliases=("--warmup",))
    thin: int = _flag(1, "keep every k-th step")
    seed: int = _flag(0, "seed of every chain's random stream")
    init: str = _flag("sample", "how the masks are first filled")
    anneal: str | None = _flag(
        None,
        "anneal tau geometrically from FROM at the first step to TO at the last (warmup_steps + num_samples x thin "
        "steps), e.g. 1:0.05; a mode seeker, its draws are not samples of the target (kernels that anneal)",
        metavar="FROM:TO",
    )
    dtype: str | None = None
    device: str | None = None
    workers: int | None = None
    model_files: dict[str, str] | None = None
    constraints: dict[str, Any] | None = None
    until_converged: bool = False
    length_prior: dict[str, float] | None = None
    starts: dict[str, str] | None = None

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
        for name, minimum in (("num_chains", 1), ("num_samples", 1), ("warmup_steps", 0), ("thin", 1)):
            check_count(getattr(self, name), name, minimum)
        for name in ("length", "workers"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 1)
        check_seed(self.seed)
        if self.model_files is not None:
            files = self.model_files
            if not isinstance(files, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v) for k, v in files.items()
            ):
                raise TypeError("model_files must map each file name of the model to its sha256 (64 hex digits)")
            object.__setattr__(self, "model_files", dict(files))
        if self.constraints is not None:
            object.__setattr__(self, "constraints", _canonical_spec(self.constraints))
        cls = kernel_class(self.kernel).Options
        options = self.kernel_options
        if options is None:
            options = cls()
        elif isinstance(options, Mapping):
            options = cls.from_dict(options, self.kernel)
        elif type(options) is not cls:
            raise TypeError(f"kernel_options of kernel {self.kernel!r} must be {cls.__name__} or a mapping")
        object.__setattr__(self, "kernel_options", options)
        self._check_anneal()
        check_type(self.until_converged, "until_converged", bool)
        if self.until_converged and self.anneal is not None:
            raise ValueError(
                "until_converged: an annealed run seeks a mode and never converges to its target; "
                "drop until_converged (--until-converged) or anneal (--anneal)"
            )
        if self.until_converged and self.num_samples <= STOP_EVERY:
            raise ValueError(
                f"until_converged asks every {STOP_EVERY} draws, before the last: give num_samples > {STOP_EVERY} "
                f"(got {self.num_samples})"
            )
        self._check_gap()
        self._check_starts()
        if self.until_converged and self.workers is not None:
            raise ValueError(
                "until_converged: the convergence check needs every chain's draws in one process; "
                "run without workers (--ray), or without until_converged (--until-converged)"
            )

    def _check_gap(self) -> None:
        """A variable gap goes with a kernel that moves lengths (``capabilities.lengths``: gap-jump,
        surrogate-MH around its moves), and a kernel that samples nothing else (gap-jump) with a
        variable gap; its prior is lengths (as text) and weights summing to 1; no workers yet."""
        gap, abilities = has_variable_gap(self.template), kernel_class(self.kernel).capabilities
        if gap and not abilities.lengths:
            raise ValueError(
                f"template: its variable gap MASK{{a,b}} gives loops of several lengths, which kernel {self.kernel} "
                f"does not sample; use kernel {' or '.join(length_kernels())} (--length-mode jump) or one run "
                "per length (--length-mode strata)"
            )
        if not gap and not abilities.fixed:
            raise ValueError(f"kernel {self.kernel} samples a template with a variable gap MASK{{a,b}}; this has none")
        if self.length_prior is not None:
            if not gap:
                raise ValueError("length_prior applies to a template with a variable gap (--length-mode jump)")
            prior = self.length_prior
            if (
                not isinstance(prior, Mapping)
                or not prior
                or not all(
                    isinstance(k, str) and k.isdigit() and isinstance(w, (int, float)) and 0 < w <= 1
                    for k, w in prior.items()
                )
            ):
                raise ValueError("length_prior must map each gap length (as text) to a weight in (0, 1]")
            if not math.isclose(math.fsum(prior.values()), 1.0, rel_tol=1e-9):
                raise ValueError(f"length_prior's weights sum to {math.fsum(prior.values())}, not 1")
            ordered = sorted(prior.items(), key=lambda kv: int(kv[0]))
            object.__setattr__(self, "length_prior", {str(int(k)): float(w) for k, w in ordered})
        if gap and self.workers is not None:
            raise ValueError(
                "a variable gap's run (--length-mode jump) runs in one process for now; drop --ray, or sample "
                "each length as its own run: --length-mode strata (its runs go to Ray workers)"
            )

    def _check_starts(self) -> None:
        """``starts``: the earlier run's directory and the sha256 of its chains' states; one process."""
        if self.starts is None:
            return
        starts = self.starts
        if not (
            isinstance(starts, Mapping)
            and set(starts) == {"run", "sha256"}
            and isinstance(starts["run"], str)
            and isinstance(starts["sha256"], str)
            and _SHA256.fullmatch(starts["sha256"])
        ):
            raise ValueError("starts must hold 'run' (a run directory) and 'sha256' (of its states: 64 hex digits)")
        object.__setattr__(self, "starts", {"run": starts["run"], "sha256": starts["sha256"]})
        if self.workers is not None:
            raise ValueError(
                "starts: chains started from an earlier run's states run in one process for now; drop --ray"
            )

    def length_prior_of(self, gap: GapTemplate) -> LengthPrior:
        """The run's length prior over a variable gap (uniform when none is recorded).

        Parameters
        ----------
        gap : GapTemplate
            The template's variable gap (``mlm_ppl.models.gaps.find_gap``).

        Returns
        -------
        LengthPrior
            ``pi(L)`` over the gap's lengths (``mlm_ppl.models.gaps.LengthPrior``).
        """
        if self.length_prior is None:
            return LengthPrior.uniform(gap)
        return LengthPrior.from_record(self.length_prior)

    def _check_anneal(self) -> None:
        options = self.kernel_options
        if options_schedule(options) is not None:
            raise ValueError(
                f"kernel_options: a {SCHEDULE_OPTION} cannot be recorded with a run; "
                "give anneal='FROM:TO' (tau geometrically from FROM to TO over the run)"
            )
        if self.anneal is None:
            if options_terms(options) != "all":
                raise ValueError(f"{TERMS_OPTION} applies to an annealed run; give anneal='FROM:TO' too")
            return
        check_type(self.anneal, "anneal", str)
        kernel = kernel_class(self.kernel)
        if not kernel.anneals():
            which = " or ".join(name for name, k in KERNELS.items() if k.anneals())
            raise ValueError(f"anneal applies to kernel {which}, not {self.kernel}")
        object.__setattr__(self, "anneal", format_anneal(*parse_anneal(self.anneal)))

    @property
    def total_steps(self) -> int:
        """Warm-up and kept steps together, ``warmup_steps + num_samples * thin``."""
        return self.warmup_steps + self.num_samples * self.thin

    def schedule(self) -> GeometricAnnealing | None:
        """The kernel's annealing schedule of ``anneal``, or None without ``anneal``.

        Returns
        -------
        GeometricAnnealing or None
            Tau from FROM at the first step (step 0) to TO at the last (step ``total_steps - 1``),
            geometrically (:class:`~mlm_ppl.inference.GeometricAnnealing`); None without ``anneal``.
        """
        if self.anneal is None:
            return None
        return GeometricAnnealing(*parse_anneal(self.anneal), self.total_steps - 1)

    def annealing(self) -> dict | None:
        """What a run of these settings records of its annealing (``run.attrs["annealing"]``).

        Returns
        -------
        dict or None
            The schedule and the terms it anneals; None for a run that does not anneal.
        """
        return annealing_record(self.schedule(), options_terms(self.kernel_options))

    def kernel_arguments(self) -> dict[str, Any]:
        """The kernel's options as :func:`~mlm_ppl.inference.make_kernel` takes them.

        Returns
        -------
        dict of str to object
            The recorded options and, for an annealed run, its schedule (:meth:`schedule`) as the
            kernel's ``temperature_schedule``.
        """
        arguments = self.kernel_options.to_dict()
        if self.anneal is not None:
            arguments[SCHEDULE_OPTION] = self.schedule()
        return arguments

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready values (the kernel's options nested, Python-only ones left out).

        Returns
        -------
        dict of str to object
            Every setting by name; a fresh copy the caller may change.
        """
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["kernel_options"] = self.kernel_options.to_dict()
        if self.model_files is not None:
            out["model_files"] = dict(self.model_files)
        if self.constraints is not None:
            out["constraints"] = json.loads(json.dumps(self.constraints))  # a copy the caller may change
        if self.starts is not None:
            out["starts"] = dict(self.starts)
        return out

    @classmethod
    def completed(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """A record as a record of today's format would hold it.

        Each setting added since the record's format was made and each kernel option added since (its
        kernel's ``older_records``) that it lacks is added at its default; where it has no ``anneal``,
        what its kernel anneals is ``"all"`` (without a schedule it annealed nothing). Short names of
        records written before 0.4 (``chains``, ``draws``, ``warmup``) are read under Pyro's names.
        What :meth:`from_dict` reads, and what a resume compares (an old run resumed once has
        checkpoints in today's form beside its old ``config.json``).

        Parameters
        ----------
        values : mapping of str to object
            A record, as :meth:`to_dict` writes it or an older version wrote it.

        Returns
        -------
        dict of str to object
            The record completed; nothing is checked here.
        """
        out = _renamed(values)
        options = out.get("kernel_options")
        if "anneal" not in out and isinstance(options, Mapping) and options_terms(options) != "all":
            out["kernel_options"] = options = {**options, TERMS_OPTION: "all"}
        kernel = out.get("kernel")
        added = KERNELS[kernel].older_records if isinstance(kernel, str) and kernel in KERNELS else None
        if added and isinstance(options, Mapping):
            out["kernel_options"] = {**added, **options}
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        for name in _ADDED:
            out.setdefault(name, defaults[name])
        return out

    @classmethod
    def from_dict(cls, values: Any, what: str = "run settings") -> RunSettings:
        """Read a record in :meth:`to_dict`'s form back into settings.

        Settings added since the record's format was made may be missing: they take their defaults,
        which are what runs did before them (:meth:`completed`).

        Parameters
        ----------
        values : mapping of str to object
            The record (a ``config.json``'s, a checkpoint's).
        what : str, optional
            What the record is, the start of every message (default ``"run settings"``).

        Returns
        -------
        RunSettings
            The settings, checked.

        Raises
        ------
        ValueError
            Where ``values`` is not a mapping, has an unknown setting or lacks one, or a setting fails
            its check; the message starts with ``what``.

        Examples
        --------
        >>> from mlm_ppl.settings import RunSettings
        >>> record = RunSettings(template="AC[MASK]E", num_chains=2).to_dict()
        >>> RunSettings.from_dict(record).num_chains
        2
        >>> RunSettings.from_dict({"template": "AC[MASK]E"}, "config.json")
        Traceback (most recent call last):
        ...
        ValueError: config.json: missing device, dtype, energy, ...
        """
        if not isinstance(values, Mapping):
            raise ValueError(f"{what}: not a mapping of settings")
        values = _renamed(values)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = sorted(set(values) - known), sorted(known - set(values) - _ADDED)
        parts = [f"{word} {', '.join(names)}" for word, names in (("unknown", unknown), ("missing", missing)) if names]
        if parts:
            raise ValueError(f"{what}: {'; '.join(parts)}")
        values = cls.completed(values)
        try:
            return cls(**values)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what}: {err}") from None

    def constraint_spec(self) -> ConstraintSpec | None:
        """The run's constraint spec, or None without constraints.

        Code experts are trusted here: these settings were checked when made (their spec read from the
        file or record with the reader's consent, :func:`~mlm_ppl.models.constraints.trusting_code`) or
        unpickled from settings that were.

        Returns
        -------
        ConstraintSpec or None
            The spec (:class:`~mlm_ppl.ConstraintSpec`) of ``constraints``.
        """
        if self.constraints is None:
            return None
        return ConstraintSpec.from_dict(self.constraints, source="constraints", trust_code=True)

    def with_model_files(self) -> RunSettings:
        """The same settings with ``model_files`` read from the model's files now: what a new run records.

        Returns
        -------
        RunSettings
            A copy whose ``model_files`` holds the sha256 of each file the model is read from.
        """
        return dataclasses.replace(self, model_files=model_files(self.model))

    def for_template(self, template: str) -> RunSettings:
        """The same settings for another template, in one process (a batch's template run).

        Parameters
        ----------
        template : str
            The template (mask tokens at the positions to sample).

        Returns
        -------
        RunSettings
            A copy with ``template`` (no ``length``) and no ``workers``.

        Raises
        ------
        ValueError
            Where the settings have ``starts``: a batch's runs start from fills of their own templates.
        """
        if self.starts is not None:
            raise ValueError(
                "starts: a batch's runs start from fills of their own templates; start one run from an earlier run "
                "(--template and --starts-from), or leave starts out"
            )
        return dataclasses.replace(self, template=template, length=None, workers=None)


def _renamed(values: Mapping[str, Any]) -> dict[str, Any]:
    """A record with the short names of :data:`RENAMED` under Pyro's (a record holding both keeps
    both, and is refused as having an unknown setting)."""
    return {k if RENAMED.get(k, k) in values else RENAMED.get(k, k): v for k, v in values.items()}


def _canonical_spec(value: Any) -> dict[str, Any] | None:
    """A constraint spec (or its ``to_dict()`` form) as the canonical ``to_dict()`` of the spec it
    reads as (None when it holds nothing); a ValueError names the entry and the key."""
    if isinstance(value, ConstraintSpec):
        spec = value
    elif isinstance(value, Mapping):
        spec = ConstraintSpec.from_dict(value, source="constraints")
    else:
        raise TypeError(f"constraints must be a constraint spec (a mapping), got {type(value).__name__}")
    try:
        data = spec.to_dict()
        # what config.json (keys sorted) and checkpoints hold, so that their records compare equal
        data = json.loads(json.dumps(data, allow_nan=False, sort_keys=True))
    except (TypeError, ValueError) as err:
        raise ValueError(f"constraints: {err}") from None
    if not any(data.values()):
        return None
    return data


def option_flags() -> dict[str, list[tuple[str, OptionInfo]]]:
    """Every command-line kernel option of the registered kernels.

    One flag carries the option for all the kernels that take it, so their types must agree.

    Returns
    -------
    dict of str to list of tuple
        Option name -> ``(kernel name, its OptionInfo declaration)`` for each kernel that takes it.

    Raises
    ------
    TypeError
        Where two kernels declare the option with different types (the message names both).

    Examples
    --------
    >>> from mlm_ppl.settings import option_flags
    >>> kernel, declaration = option_flags()["block_size"][0]
    >>> kernel, declaration.type
    ('mh', <class 'int'>)
    """
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
