"""A sampling job, one schema: :class:`JobSpec`.

The same job is read alike from keyword arguments (:func:`mlm_ppl.sample`), from a TOML job file
(:meth:`JobSpec.from_toml`, ``mlm-ppl sample JOB.toml``) and from the command line's flags: each
door turns what it was given into one mapping of the keys below and calls
:meth:`JobSpec.from_mapping`, so that a key means the same thing, is checked the same way and
fails with the same message wherever it comes from. Every key is checked when the spec is made,
before any model loads.

A job file holds the keys at its top level, the kernel's options in a ``[kernel_options]`` table
and the constraints as a spec file's name (``constraints = "spec.toml"``, relative to the job
file) or inline, as a ``[constraints]`` table in the spec file's own format::

    model = "antiberty"
    template = "EVQLLESGG...YYC[MASK]{10,14}WGQGTLVTVSS"
    length_mode = "jump"
    kernel = "surrogate-mh"
    num_chains = 4
    num_samples = 200
    warmup_steps = 20
    out = "runs/cdrh3"

    [kernel_options]
    inner_steps = 26

    [constraints]
    liabilities = true
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._checks import check_choice, check_count, check_interval, check_type
from .._files import read_toml, split_lines
from ..campaign import LENGTH_MODES, parse_templates, plan_gap
from ..inference.registry import KERNELS, length_kernels
from ..models.constraints import ConstraintSpec
from ..models.gaps import LengthPrior, has_variable_gap
from ..settings import MAX_CHAINS, RENAMED, RunSettings, option_flags

__all__ = ["JobSpec", "JOB_KEYS"]


@dataclass(frozen=True)
class JobSpec:
    """Every setting of a sampling job, under the names the Python call, the job file and the flags share.

    The names are Pyro's (``num_chains``, ``num_samples``, ``warmup_steps``). Every key is checked
    when the spec is made, before any model loads; a TypeError or ValueError names the key to fix.

    Parameters
    ----------
    model : str, optional
        What is sampled: a name :func:`~mlm_ppl.load_mlm` loads (default ``"antiberty"``).
    template : str or None, optional
        Mask tokens at the positions to sample; a variable gap ``MASK{a,b}`` gives loops of several
        lengths. Exactly one of ``template``, ``length`` and ``templates``.
    length : int or None, optional
        A whole sequence of N tokens.
    templates : str or sequence of tuple of (str, str) or None, optional
        A batch: a file of one template per line (``TEMPLATE`` or ``NAME<TAB>TEMPLATE``), or
        ``(name, template)`` pairs, each run with the same settings.
    length_mode : str or None, optional
        For a variable gap: ``"jump"`` (one run whose chains move between lengths) or ``"strata"``
        (one run per length). Default: ``"jump"`` where ``kernel`` names a kernel that moves lengths.
    length_prior : str or LengthPrior or None, optional
        For a variable gap: ``"uniform"`` (None) or a file of lines ``LENGTH<TAB>WEIGHT``.
    energy : str, optional
        ``"norm"`` (default) or ``"raw"``.
    temperature : float, optional
        The target temperature T (default 1.0).
    constraints : ConstraintSpec or str or mapping or None, optional
        A :class:`~mlm_ppl.ConstraintSpec`, a spec file, or its mapping.
    kernel : str or None, optional
        How: a name of :data:`~mlm_ppl.inference.KERNELS`; default ``"mh"``, or the first kernel
        that moves lengths for ``length_mode="jump"``.
    kernel_options : mapping of str to object, optional
        That kernel's own options, checked by its ``Options``; an option of another kernel is refused
        with its kernel's name.
    num_chains : int, optional
        Chains, advanced together (default 4); more than :data:`~mlm_ppl.settings.MAX_CHAINS` only
        with ``force``.
    num_samples : int, optional
        Draws kept per chain (default 100).
    warmup_steps : int, optional
        Steps discarded before the first draw (default 0).
    thin : int, optional
        Keep every k-th step (default 1).
    seed : int, optional
        Seed of every chain's random stream (default 0).
    init : str or None, optional
        How the masks are first filled (None: ``"sample"``); not with ``starts_from``.
    anneal : str or None, optional
        ``"FROM:TO"``: tau geometrically from FROM to TO over the run, for a kernel that anneals.
    until_converged : bool, optional
        End the run once every chain converged (at most ``num_samples`` draws).
    dtype : str or None, optional
        The model's dtype (None: float32).
    device : str or None, optional
        The model's device (None: the CPU).
    starts_from : str or None, optional
        A run directory whose chains' states this run starts from (one run, not a batch).
    workers : int or None, optional
        Ray workers (None: this process).
    out : str or None, optional
        Where: the run directory (None: the run stays in memory).
    overwrite : bool, optional
        Replace an earlier run in ``out`` (default False).
    force : bool, optional
        Run past the size limits (default False).
    checkpoint_seconds : float, optional
        Seconds between two checkpoints of a run directory (default 30).
    threads : int or None, optional
        Torch's intra-op threads for this process while it runs the job (None: torch's default, one
        per core).

    Attributes
    ----------
    settings : RunSettings
        The run's record (:class:`~mlm_ppl.settings.RunSettings`, written to ``config.json``).
    batch : tuple of tuple of (str, str) or None
        The ``(name, template)`` pairs of a batch (``templates``, or the strata of a variable gap);
        None for one run.
    lengths : dict of str to object or None
        A batch of strata's record of its gap and prior; None otherwise.
    python_options : dict of str to object
        The kernel options no record can hold (a ``temperature_schedule``, a Python callable: a run
        in memory only).

    Raises
    ------
    TypeError, ValueError
        Where a key has the wrong type or value, or keys do not go together; the message names the
        key to fix.

    See Also
    --------
    mlm_ppl.sample : Run a job given as keyword arguments.
    mlm_ppl.run_job : Run a job.

    Examples
    --------
    >>> from mlm_ppl import JobSpec
    >>> job = JobSpec(template="AC[MASK][MASK]E", num_chains=2, num_samples=10)
    >>> job.settings.kernel, job.settings.total_steps, job.batch is None
    ('mh', 10, True)
    >>> JobSpec(template="AC[MASK]{2,3}E", length_mode="strata").batch  # one run per length
    (('L02', 'AC[MASK][MASK]E'), ('L03', 'AC[MASK][MASK][MASK]E'))
    """

    model: str = "antiberty"
    template: str | None = None
    length: int | None = None
    templates: Any = None
    length_mode: str | None = None
    length_prior: str | LengthPrior | None = None
    energy: str = "norm"
    temperature: float = 1.0
    constraints: Any = None
    kernel: str | None = None
    kernel_options: Mapping[str, Any] = field(default_factory=dict)
    num_chains: int = 4
    num_samples: int = 100
    warmup_steps: int = 0
    thin: int = 1
    seed: int = 0
    init: str | None = None
    anneal: str | None = None
    until_converged: bool = False
    dtype: str | None = None
    device: str | None = None
    starts_from: str | None = None
    workers: int | None = None
    out: str | None = None
    overwrite: bool = False
    force: bool = False
    checkpoint_seconds: float = 30.0
    threads: int | None = None
    settings: RunSettings = field(init=False, repr=False, compare=False)
    batch: tuple[tuple[str, str], ...] | None = field(init=False, repr=False, compare=False)
    lengths: dict[str, Any] | None = field(init=False, repr=False, compare=False)
    python_options: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("out", "starts_from", "constraints", "templates", "length_prior"):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))
        for name in ("out", "starts_from", "kernel", "init"):
            if getattr(self, name) is not None:
                check_type(getattr(self, name), name, str)
        if self.length_prior is not None and not isinstance(self.length_prior, (str, LengthPrior)):
            raise TypeError("length_prior must be 'uniform', a file of lines LENGTH<TAB>WEIGHT or a LengthPrior")
        for name in ("overwrite", "force"):
            check_type(getattr(self, name), name, bool)
        check_interval(self.checkpoint_seconds, "checkpoint_seconds")
        if self.threads is not None:
            check_count(self.threads, "threads", 1)
        if self.length_mode is not None:
            check_choice(self.length_mode, "length_mode", LENGTH_MODES)
        if not isinstance(self.kernel_options, Mapping):
            raise TypeError(f"kernel_options must be a mapping of the kernel's options, got {self.kernel_options!r}")
        given = [name for name in ("template", "length", "templates") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                "give one of template (--template: mask tokens at the positions to sample), length (--length: a "
                f"whole sequence of N tokens) or templates (--templates: a batch)"
                f"{'' if not given else ', not ' + ' and '.join(given)}"
            )
        self._check_options()
        kernel: str | None = self.kernel
        prior, batch, lengths = None, None, None
        if self.templates is not None:
            batch = _batch_templates(self.templates)
        gapped = isinstance(self.template, str) and has_variable_gap(self.template)
        if gapped or self.length_mode is not None or self.length_prior is not None:
            if not gapped:
                raise ValueError(
                    "length_mode and length_prior (--length-mode, --length-prior) apply to one template with a "
                    "variable gap, e.g. 'CAR[MASK]{10,16}WGQG'"
                )
            mode = self.length_mode
            if (
                mode is None
                and isinstance(self.kernel, str)
                and self.kernel in KERNELS
                and KERNELS[self.kernel].capabilities.lengths
            ):
                mode = "jump"  # a kernel that moves lengths, named: one run over every length
            plan = plan_gap(str(self.template), mode, self.length_prior, self.kernel)
            if plan.mode == "jump":
                kernel, prior = plan.kernel, plan.prior.record()
            else:
                strata, lengths = plan.strata()
                batch = tuple(strata)
        if self.starts_from is not None:
            if batch is not None:
                raise ValueError(
                    "starts_from (--starts-from) starts one run from an earlier run's states; a batch (templates, "
                    "length_mode strata) starts each template's run from its own fills"
                )
            if self.init is not None:
                raise ValueError(
                    "init (--init) fills the template; starts_from (--starts-from) starts from an earlier run's "
                    "states: give one"
                )
        spec = constraint_spec(self.constraints)
        name = kernel or "mh"
        python_only = {i.name for i in KERNELS[name].Options.describe() if not i.cli} if name in KERNELS else set()
        recorded = {k: v for k, v in self.kernel_options.items() if k not in python_only}
        settings = RunSettings(
            model=self.model,
            template=batch[0][1] if batch is not None else self.template,
            length=self.length,
            kernel=kernel or "mh",
            kernel_options=recorded,
            energy=self.energy,
            temperature=self.temperature,
            num_chains=self.num_chains,
            num_samples=self.num_samples,
            warmup_steps=self.warmup_steps,
            thin=self.thin,
            seed=self.seed,
            init=self.init or "sample",
            anneal=self.anneal,
            dtype=self.dtype,
            device=self.device,
            workers=self.workers,
            constraints=None if spec is None else spec.to_dict(),
            until_converged=self.until_converged,
            length_prior=prior,
        )
        if settings.num_chains > MAX_CHAINS and not self.force:
            raise ValueError(
                f"num_chains {settings.num_chains} (--num-chains) is more than {MAX_CHAINS}: plots and per-chain "
                "diagnostics stop being readable; split the chains over several runs, or pass force (--force)"
            )
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "batch", batch)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "python_options", {k: v for k, v in self.kernel_options.items() if k in python_only})

    def _check_options(self) -> None:
        """Each kernel option is one the kernel takes: an option of another kernel is named with its kernel."""
        kernel = self.kernel or (length_kernels()[0] if self.length_mode == "jump" else "mh")  # plan_gap's default
        if kernel not in KERNELS:
            return  # RunSettings names the unknown kernel and the known ones
        flags = option_flags()
        own = {i.name for i in KERNELS[kernel].Options.describe()}
        for name in self.kernel_options:
            if name not in own and name in flags:
                kernels = [k for k, _ in flags[name]]
                raise ValueError(
                    f"kernel_options: {name} ({flags[name][0][1].flag}) is an option of kernel "
                    f"{' or '.join(kernels)}, not of {kernel}; drop it, or choose that kernel"
                )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str | None = None) -> JobSpec:
        """Make the job of a mapping of :data:`~mlm_ppl.jobs.JOB_KEYS` (a job file's, the flags', keyword arguments').

        Parameters
        ----------
        values : mapping of str to object
            The job's keys.
        source : str or None, optional
            Where the keys come from (a file): every message then starts with it.

        Returns
        -------
        JobSpec
            The job, checked.

        Raises
        ------
        ValueError
            Where a key is unknown (the message says which key to write instead), or a value is bad.
        TypeError
            Where a value has the wrong type.

        Examples
        --------
        >>> from mlm_ppl import JobSpec
        >>> JobSpec.from_mapping({"template": "AC[MASK]E", "chains": 2}, "job.toml")
        Traceback (most recent call last):
        ...
        ValueError: job.toml: unknown key 'chains'; write num_chains (Pyro's name; --chains is its flag)
        """
        try:
            unknown = [k for k in values if k not in JOB_KEYS]
            if unknown:
                raise ValueError(f"unknown key {unknown[0]!r}; {_instead(unknown[0])}")
            return cls(**values)
        except (TypeError, ValueError) as err:
            if source is None:
                raise
            raise type(err)(f"{source}: {err}") from None

    @classmethod
    def from_toml(cls, path: str | os.PathLike, **overrides: Any) -> JobSpec:
        r"""Read the job in a TOML job file, with ``overrides`` over its keys.

        The file holds the keys at its top level, the kernel's options in a ``[kernel_options]``
        table and the constraints as a spec file's name (``constraints = "spec.toml"``, read relative
        to the job file) or inline, as a ``[constraints]`` table in the spec file's own format. Its
        keys are replaced by ``overrides`` (the command line's flags) and its kernel options updated
        by theirs.

        Parameters
        ----------
        path : str or os.PathLike
            The job file.
        **overrides
            Job keys that replace the file's.

        Returns
        -------
        JobSpec
            The job, checked.

        Raises
        ------
        ValueError, TypeError
            Where the file cannot be read or is not TOML, or a key is unknown or bad; every problem is
            one line that names the file and the key.

        Examples
        --------
        >>> from pathlib import Path
        >>> from mlm_ppl import JobSpec
        >>> _ = Path("job.toml").write_text('template = "AC[MASK][MASK]E"\nnum_chains = 2\n')
        >>> job = JobSpec.from_toml("job.toml", num_samples=10)
        >>> job.num_chains, job.num_samples
        (2, 10)
        """
        return cls.from_mapping(read_job_file(path, overrides), str(path))


JOB_KEYS = tuple(f.name for f in dataclasses.fields(JobSpec) if f.init)
"""Every key of a job, in the order of :class:`JobSpec`'s fields."""


def read_job_file(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    r"""Read the keys of a job file, with ``overrides`` over them.

    Parameters
    ----------
    path : str or os.PathLike
        The job file (TOML).
    overrides : mapping of str to object or None, optional
        Keys that replace the file's; their ``kernel_options`` are merged into the file's.

    Returns
    -------
    dict of str to object
        The job's keys, unchecked (:meth:`JobSpec.from_mapping <mlm_ppl.JobSpec.from_mapping>` checks
        them); a relative ``constraints`` file name is resolved against the job file's folder, and an
        inline ``[constraints]`` table is kept to be read as a spec file.

    Raises
    ------
    ValueError
        Where the file cannot be read, is not TOML, or its ``kernel_options`` is not a table.

    Examples
    --------
    >>> from pathlib import Path
    >>> from mlm_ppl.jobs import read_job_file
    >>> _ = Path("job.toml").write_text('num_chains = 2\n[kernel_options]\nblock_size = 2\n')
    >>> read_job_file("job.toml", {"kernel_options": {"top_k": 3}})
    {'num_chains': 2, 'kernel_options': {'block_size': 2, 'top_k': 3}}
    """
    data = read_toml(path, "job file")
    if not isinstance(data.get("kernel_options", {}), dict):
        raise ValueError(f"{path}: kernel_options must be a table ([kernel_options]) of the kernel's options")
    constraints = data.get("constraints")
    if isinstance(constraints, str) and not os.path.isabs(constraints):
        data["constraints"] = os.path.join(os.path.dirname(os.path.abspath(path)), constraints)
    elif isinstance(constraints, dict):
        data["constraints"] = _InlineSpec(constraints, f"{path} [constraints]")
    out = {**data, **(overrides or {})}
    if overrides and "kernel_options" in overrides and "kernel_options" in data:
        out["kernel_options"] = {**data["kernel_options"], **overrides["kernel_options"]}
    return out


@dataclass(frozen=True)
class _InlineSpec:
    """A job file's ``[constraints]`` table, read as a spec file with the table as its source."""

    data: Mapping[str, Any]
    source: str


def _instead(key: str) -> str:
    """What to write instead of the unknown ``key``."""
    if key in RENAMED:
        return f"write {RENAMED[key]} (Pyro's name; --{key} is its flag)"
    options = option_flags()
    if key in options:
        kernels = " or ".join(k for k, _ in options[key])
        return f"it is an option of kernel {kernels}: put it under kernel_options ([kernel_options] in a job file)"
    close = difflib.get_close_matches(key, JOB_KEYS, n=1)
    return f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(JOB_KEYS)}"


def _batch_templates(templates: Any) -> tuple[tuple[str, str], ...]:
    """A batch's ``(name, template)`` pairs: from a templates file, or checked pairs."""
    if isinstance(templates, str):  # a file (- for stdin): TEMPLATE or NAME<TAB>TEMPLATE per line
        return tuple(parse_templates(split_lines(templates, "one template per line"), templates))
    if not isinstance(templates, Sequence) or not templates:
        raise TypeError("templates must be a templates file or a non-empty list of (name, template) pairs")
    pairs = []
    for i, pair in enumerate(templates):
        if not (isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2):
            raise TypeError(f"templates[{i}] must be a pair (name, template), got {pair!r}")
        pairs.append("\t".join(map(str, pair)))
    return tuple(parse_templates(pairs, "templates"))


def constraint_spec(value: Any) -> ConstraintSpec | None:
    """A job's constraint spec: a spec, a spec file, a job file's inline table, or a mapping."""
    if value is None or isinstance(value, ConstraintSpec):
        return value
    if isinstance(value, str):
        return ConstraintSpec.from_toml(value)
    if isinstance(value, _InlineSpec):
        return ConstraintSpec.from_dict(value.data, source=value.source)
    if isinstance(value, Mapping):
        return ConstraintSpec.from_dict(value, source="constraints")
    raise TypeError(f"constraints must be a ConstraintSpec, a spec file or its mapping, got {type(value).__name__}")
