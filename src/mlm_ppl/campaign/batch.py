"""Batches of templates: the batch directory's format (``config.json``, ``batch-record.json``, one run
directory per template), strata of a variable gap, and running the templates (here or as Ray tasks)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import rundir
from .._files import load_json
from ..inference.annealing import annealing_note
from ..inference.distributed import run_tasks_ray
from ..inference.runner import Checkpoint
from ..inference.spec import KernelBase
from ..models.constraints import code_trusted, trusting_code
from ..models.gaps import LengthPrior, parse_gap
from ..models.target import energy_from_log_density
from ..rundir import RunDirectory
from ..settings import RunSettings
from .lengths import strata_name
from .run import build, connect_workers, constraints_of, execute

BATCH_FORMAT = "mlm-ppl-batch-2"
"""The format of a batch directory's ``config.json`` and ``batch-record.json``."""


BATCH_RECORD = "batch-record.json"
"""A batch's record: its settings and templates as the batch started, and the run id of each
template's run (what ``config.json`` and the template runs are checked against on resume)."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


RESERVED_NAMES = frozenset({rundir.CONFIG, "designs.tsv", "summary.txt", BATCH_RECORD, rundir.MARKER, rundir.LOCK})
"""The batch directory's own files: no template may be named like one (compared ignoring case)."""


def check_template_name(name: str) -> str:
    """Check a template's name as the name of its run directory in the batch.

    Parameters
    ----------
    name : str
        The template's name.

    Returns
    -------
    str
        ``name``, unchanged.

    Raises
    ------
    ValueError
        Where ``name`` is not 1 to 64 letters, digits, ``_``, ``.`` or ``-`` starting with a letter or
        digit, or is one of the batch directory's own files (:data:`RESERVED_NAMES`, compared
        ignoring case); the message says what to fix.

    Examples
    --------
    >>> from mlm_ppl.campaign import check_template_name
    >>> check_template_name("cdrh3_a")
    'cdrh3_a'
    >>> check_template_name("Summary.txt")
    Traceback (most recent call last):
    ...
    ValueError: name 'Summary.txt' is a file of the batch directory; choose another
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"name {name!r} must be letters, digits, '_', '.' or '-' (a directory name: at most 64, the first "
            "a letter or digit)"
        )
    if name.casefold() in {n.casefold() for n in RESERVED_NAMES}:
        raise ValueError(f"name {name!r} is a file of the batch directory; choose another")
    return name


@dataclass
class Batch:
    """A locked batch directory and its record; use it as a context manager to release the lock.

    Parameters
    ----------
    directory : RunDirectory
        The batch directory, locked (:class:`~mlm_ppl.rundir.RunDirectory`).
    settings : RunSettings
        The settings shared by every template's run (with the first template).
    templates : list of tuple of (str, str)
        The ``(name, template)`` pairs.
    runs : dict of str to str or None
        The run id of each template's run (None while it is being created).
    lengths : dict of str to object or None, optional
        For a batch of strata, its ``lengths`` record (:func:`strata`: the template with its gap,
        the prior and its source); None for an ordinary batch.
    """

    directory: RunDirectory
    settings: RunSettings
    templates: list[tuple[str, str]]
    runs: dict[str, str | None]
    lengths: dict[str, Any] | None = None

    def config(self) -> dict[str, Any]:
        """The batch's ``config.json``: the settings and templates, and a batch of strata's ``lengths``.

        Returns
        -------
        dict of str to object
            ``format`` (:data:`BATCH_FORMAT`), ``settings`` (every setting but the template),
            ``templates`` and, for a batch of strata, ``lengths`` (:func:`strata`: the template with its
            gap, the prior and its source).
        """
        out = {
            "format": BATCH_FORMAT,
            "settings": _shared(self.settings),
            "templates": [list(t) for t in self.templates],
        }
        if self.lengths is not None:
            out["lengths"] = self.lengths
        return out

    def length_prior(self) -> LengthPrior | None:
        """A batch of strata's ``pi(L)``, or None for an ordinary batch.

        Returns
        -------
        LengthPrior or None
            The prior over the gap's lengths (its template of length ``L`` is named by
            :func:`strata_name`); None for an ordinary batch.
        """
        if self.lengths is None:
            return None
        return LengthPrior.from_record(self.lengths["prior"], self.lengths["source"])

    def write_record(self) -> None:
        """Write the batch's record (:data:`BATCH_RECORD`): what :meth:`config` holds, and each run's id."""
        self.directory.write_text(
            BATCH_RECORD, json.dumps({**self.config(), "runs": self.runs}, indent=1, sort_keys=True)
        )

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.directory.close()


def parse_templates(lines: Sequence[str], source: str) -> list[tuple[str, str]]:
    r"""Read a templates file's ``(name, template)`` pairs from its lines.

    One template per line, ``TEMPLATE`` or ``NAME<TAB>TEMPLATE``. Names (default ``t001``, ``t002``
    ... by line) become directory names: letters, digits, ``_ . -``, unique, and none of the batch
    directory's own files (:func:`check_template_name`).

    Parameters
    ----------
    lines : sequence of str
        The file's lines.
    source : str
        The file's name, for the messages.

    Returns
    -------
    list of tuple of (str, str)
        The ``(name, template)`` pairs, in the file's order.

    Raises
    ------
    ValueError
        Where the file is empty, a line is blank or not ``TEMPLATE`` or ``NAME<TAB>TEMPLATE``, or a
        name is bad or repeated; the message names the file and the line.

    Examples
    --------
    >>> from mlm_ppl.campaign import parse_templates
    >>> parse_templates(["AC[MASK]E", "long\tAC[MASK][MASK]E"], "templates.txt")
    [('t001', 'AC[MASK]E'), ('long', 'AC[MASK][MASK]E')]
    """
    if not lines:
        raise ValueError(
            f"templates file {source!r} is empty; give one template per line (NAME<TAB>TEMPLATE or TEMPLATE)"
        )
    out: list[tuple[str, str]] = []
    for i, line in enumerate(lines, 1):
        fields = line.split("\t")
        if not line.strip() or len(fields) > 2 or not fields[-1].strip():
            raise ValueError(
                f"{source}, line {i}: {line!r} is not TEMPLATE or NAME<TAB>TEMPLATE "
                "(one template per line, no blank lines)"
            )
        name = fields[0].strip() if len(fields) == 2 else f"t{i:03d}"
        try:
            check_template_name(name)
        except ValueError as err:
            raise ValueError(f"{source}, line {i}: {err}") from None
        if name in {n for n, _ in out}:
            raise ValueError(f"{source}, line {i}: name {name!r} is used twice")
        out.append((name, fields[-1].strip()))
    return out


def _check_lengths(lengths: Any, templates: Sequence[tuple[str, str]], file: Path) -> dict[str, Any] | None:
    """A batch record's ``lengths`` (None for an ordinary batch), its shape checked against the templates."""
    if lengths is None:
        return None
    prior = lengths.get("prior") if isinstance(lengths, dict) else None
    ok = (
        isinstance(prior, dict)
        and isinstance(lengths.get("template"), str)
        and isinstance(lengths.get("source"), str)
        and all(
            isinstance(k, str) and k.isdigit() and isinstance(v, (int, float)) and 0 < v <= 1 for k, v in prior.items()
        )
        and math.isclose(math.fsum(prior.values()), 1.0)
    )
    if not ok or [strata_name(int(L)) for L in sorted(prior or {}, key=int)] != [n for n, _ in templates]:
        raise ValueError(
            f"{file}: lengths must record the template, a prior over the templates' lengths and its source"
        )
    return dict(lengths)


def _shared(settings: RunSettings) -> dict[str, Any]:
    """A batch's settings as recorded: every setting but the template (each template has its own)."""
    return {k: v for k, v in settings.to_dict().items() if k not in ("template", "length")}


def check_batch(
    settings: RunSettings, templates: Sequence[tuple[str, str]], lengths: dict[str, Any] | None = None
) -> KernelBase:
    """Check every name, the model (loaded) and every template of a batch, before any work.

    For a batch of strata (``lengths``), its gap is checked first against the model's mask token and
    maximum length.

    Parameters
    ----------
    settings : RunSettings
        The batch's shared settings.
    templates : sequence of tuple of (str, str)
        The ``(name, template)`` pairs.
    lengths : dict of str to object or None, optional
        A batch of strata's ``lengths`` record (:func:`strata`); None for an ordinary batch.

    Returns
    -------
    KernelBase
        The first template's kernel (for the size check).

    Raises
    ------
    ValueError
        Where there is no template, a name is bad or used twice, the templates are not the strata of
        ``lengths``' template, or a template's target or kernel cannot be built (the message names
        the template); and the errors of :func:`build` for the first template.
    """
    names = [check_template_name(name) for name, _ in templates]
    if not names:
        raise ValueError("a batch needs at least one template")
    if len(set(names)) < len(names):
        raise ValueError(f"template names are used twice: {sorted({n for n in names if names.count(n) > 1})}")
    mlm, _, kernel = build(settings.for_template(templates[0][1]))
    if lengths is not None:
        gap = parse_gap(lengths["template"], mlm.vocab[mlm.mask_id])
        if gap is None or [t for _, t in templates] != [
            gap.template(int(L)) for L in sorted(lengths["prior"], key=int)
        ]:
            raise ValueError(f"the templates are not the strata of {lengths['template']!r}")
        gap.check_fits(mlm.max_length, int(mlm.encode([gap.template(gap.lo)], allow_mask=True).input_ids.shape[1]))
    for name, template in templates[1:]:
        try:  # the kernel too: its checks depend on the template (block_size, a surrogate's window)
            build(settings.for_template(template), mlm)
        except (TypeError, ValueError) as err:
            raise ValueError(f"template {name!r}: {err}") from None
    return kernel


def start_batch(
    directory: str | os.PathLike,
    settings: RunSettings,
    templates: Sequence[tuple[str, str]],
    *,
    overwrite: bool,
    check_size: Callable[[KernelBase], None] | None = None,
    lengths: dict[str, Any] | None = None,
) -> Batch:
    """Check a new batch, then create and lock its directory and write its record and ``config.json``.

    The batch is checked by :func:`check_batch` (which loads the model), then by ``check_size`` on
    the first template's kernel, which may refuse it; Ray is connected (for settings with
    ``workers``) before the directory is made.

    Parameters
    ----------
    directory : str or os.PathLike
        The batch directory to create.
    settings : RunSettings
        The batch's shared settings, which record the model's files
        (:meth:`RunSettings.with_model_files <mlm_ppl.settings.RunSettings.with_model_files>`).
    templates : sequence of tuple of (str, str)
        The ``(name, template)`` pairs.
    overwrite : bool
        Whether to replace an earlier batch in ``directory`` (only the files it owns).
    check_size : callable or None, optional
        Called with the first template's kernel; raises to refuse the batch (its size).
    lengths : dict of str to object or None, optional
        A batch of strata's ``lengths`` record (:func:`strata`); None for an ordinary batch.

    Returns
    -------
    Batch
        The batch, its directory locked (use it as a context manager).

    Raises
    ------
    ValueError
        Where ``settings`` do not record the model's files, or :func:`check_batch` refuses the batch.
    RunExistsError
        Where ``directory`` holds anything but an earlier batch, or one without ``overwrite``
        (:class:`~mlm_ppl.rundir.RunExistsError`).
    RunLockedError
        While another process holds ``directory`` (:class:`~mlm_ppl.rundir.RunLockedError`).
    """
    if settings.model_files is None:
        raise ValueError("a batch records its model's files: give settings.with_model_files()")
    kernel = check_batch(settings, templates, lengths)
    if check_size is not None:
        check_size(kernel)
    connect_workers(settings, batch=True)  # Ray answers before the directory is made (or nothing is left)
    run_dir = RunDirectory.create(directory, "batch", overwrite=overwrite, names=[name for name, _ in templates])
    batch = Batch(run_dir, settings, list(templates), {}, lengths)
    try:
        batch.write_record()
        run_dir.write_text(rundir.CONFIG, json.dumps(batch.config(), indent=1, sort_keys=True))
    except BaseException:
        run_dir.discard()
        raise
    return batch


def resume_batch(directory: str | os.PathLike) -> Batch:
    """Lock a batch directory and check it against its record before any work.

    Checked: ``config.json`` (every setting and template), the model's files, and every template's
    folder, which must be empty or hold the run this batch started there with the batch's settings
    (compared with its own ``config.json`` and checkpoint). A template's run whose creation was cut
    off before its id was recorded is adopted.

    Parameters
    ----------
    directory : str or os.PathLike
        The batch directory.

    Returns
    -------
    Batch
        The batch, its directory locked (use it as a context manager).

    Raises
    ------
    ValueError
        Where the directory is not a batch, its files are missing or unreadable, or differ from its
        record; the message names each difference, with both values and files.
    RunLockedError
        While another process holds the batch (:class:`~mlm_ppl.rundir.RunLockedError`).
    """
    run_dir = RunDirectory.open(directory, "batch")
    try:
        batch = _read_batch(run_dir)
        for name, template in batch.templates:
            path = run_dir.path / name
            if _started(path):
                pending = name in batch.runs and batch.runs[name] is None
                run_id = batch.runs.get(name)
                with _open_template(path, batch.settings.for_template(template), run_id, pending=pending)[0] as run:
                    if pending:  # its creation was cut off before its id was recorded
                        batch.runs[name] = run.run_id
                        batch.write_record()
    except BaseException:
        run_dir.close()
        raise
    return batch


def batch_templates(directory: str | os.PathLike) -> list[tuple[str, str]]:
    """Read the ``(name, template)`` pairs of a batch from its record, without the lock.

    To read a batch's results: the shape of the record is checked, its settings are not.

    Parameters
    ----------
    directory : str or os.PathLike
        The batch directory.

    Returns
    -------
    list of tuple of (str, str)
        The ``(name, template)`` pairs, in the batch's order.

    Raises
    ------
    ValueError
        Where the record (:data:`BATCH_RECORD`) is missing, unreadable, not of a batch, or names a
        template badly.
    """
    templates = _read_batch_file(Path(directory) / BATCH_RECORD)["templates"]
    for name, _ in templates:
        try:
            check_template_name(name)
        except ValueError as err:
            raise ValueError(f"{Path(directory) / BATCH_RECORD}: {err}") from None
    return list(templates)


def _read_batch(run_dir: RunDirectory) -> Batch:
    config_file, record_file = run_dir.path / rundir.CONFIG, run_dir.path / BATCH_RECORD
    config, record = _read_batch_file(config_file), _read_batch_file(record_file)
    runs = record.get("runs")
    if not isinstance(runs, dict) or not all(isinstance(v, (str, type(None))) for v in runs.values()):
        raise ValueError(f"{record_file}: runs must map each template's name to its run id")
    detail = ", ".join(
        d
        for d in (
            rundir.differences(config["settings"], record["settings"], rundir.CONFIG, BATCH_RECORD),
            rundir.differences(
                {"templates": dict(config["templates"]), "lengths": config.get("lengths")},
                {"templates": dict(record["templates"]), "lengths": record.get("lengths")},
                rundir.CONFIG,
                BATCH_RECORD,
            ),
        )
        if d
    )
    if not detail and [n for n, _ in config["templates"]] != [n for n, _ in record["templates"]]:
        detail = f"the order of the templates ({[n for n, _ in config['templates']]} in {rundir.CONFIG})"
    if detail:
        raise ValueError(
            f"{config_file} differs from the batch's record {BATCH_RECORD}: {detail}; restore {rundir.CONFIG}, "
            "or start a new batch with the new settings"
        )
    templates = record["templates"]
    try:
        for name, _ in templates:
            check_template_name(name)
        settings = RunSettings.from_dict(dict(record["settings"], template=templates[0][1], length=None), "settings")
        if settings.model_files is None:
            raise ValueError("settings: model_files is not recorded")
        lengths = _check_lengths(record.get("lengths"), templates, record_file)
        check_batch(settings, templates, lengths)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{config_file}: {err}") from None
    return Batch(run_dir, settings, templates, runs, lengths)


def _read_batch_file(file: Path) -> dict[str, Any]:
    """``config.json`` or the record of a batch, its shape checked (each problem named with its key)."""
    try:
        data = load_json(file, "batch record")
    except FileNotFoundError:
        raise ValueError(
            f"{file} is missing: the batch was cut off as it started; start it again with --overwrite"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(f"{file} is not readable as JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != BATCH_FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise ValueError(f"{file} is not an mlm-ppl batch configuration (format {found!r}, {BATCH_FORMAT!r} expected)")
    if not isinstance(data.get("settings"), dict):
        raise ValueError(f"{file}: settings must be a mapping of the batch's settings")
    templates = data.get("templates")
    if not isinstance(templates, list) or not templates:
        raise ValueError(f"{file}: templates must be a non-empty list of [NAME, TEMPLATE] pairs")
    for i, pair in enumerate(templates):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"{file}: templates[{i}] must be a pair of strings [NAME, TEMPLATE], found {pair!r}")
    data["templates"] = [(n, t) for n, t in templates]
    if len(dict(data["templates"])) < len(templates):
        raise ValueError(f"{file}: templates: a name is used twice")
    return data


def _started(path: Path) -> bool:
    """Whether a template's folder holds anything (an absent or empty one has no run yet)."""
    if path.is_symlink() or not path.is_dir():
        return path.exists() or path.is_symlink()
    return any(p.name != rundir.LOCK for p in path.iterdir())


def _open_template(
    path: Path, settings: RunSettings, run_id: str | None, *, pending: bool = False
) -> tuple[RunDirectory, Checkpoint | None]:
    """Open (locked) the run of one template of a batch, which must be the run the batch started
    there (``run_id``) with ``settings``; a ValueError otherwise. Its own files are only read.

    ``pending``: the batch was cut off while it created this run, before it recorded its id; the
    run is the batch's if it has the batch's settings and no checkpoint yet."""
    if path.is_symlink() or not path.is_dir():
        raise ValueError(f"{path} is not a run directory of the batch; move it out of the batch directory, then resume")
    run_dir, own, checkpoint = rundir.resume_run(path)  # its config.json against its own checkpoints
    try:
        detail = rundir.differences(own.to_dict(), settings.to_dict(), f"{path.name}/{rundir.CONFIG}", BATCH_RECORD)
        if detail:
            raise ValueError(
                f"{path / rundir.CONFIG} differs from the batch's record {path.parent / BATCH_RECORD}: {detail}; "
                "restore the template's run, or start a new batch"
            )
        ours = run_dir.run_id == run_id or (pending and not rundir.checkpoint_files(path))
        if not ours:
            raise ValueError(
                f"{path} holds a run this batch did not start (run id {run_dir.run_id}; the batch recorded "
                f"{run_id or 'none'} for template {path.name!r}); move it out of the batch directory, then resume"
            )
    except BaseException:
        run_dir.close()
        raise
    return run_dir, checkpoint


def run_template(
    directory: str,
    settings: RunSettings,
    run_id: str | None,
    checkpoint_seconds: float,
    trust_code: bool = False,
    threads: int | None = None,
) -> dict:
    """Run (or finish) one template's run of a batch: the run the batch started there.

    Module-level so that a Ray task can run it: a worker that dies leaves the template's
    checkpoint, and the retried task continues from it.

    Parameters
    ----------
    directory : str
        The template's run directory.
    settings : RunSettings
        The template's settings (:meth:`RunSettings.for_template
        <mlm_ppl.settings.RunSettings.for_template>`).
    run_id : str or None
        The id of the run the batch started there.
    checkpoint_seconds : float
        Seconds between two checkpoints.
    trust_code : bool, optional
        The batch's caller's consent to code experts (:func:`~mlm_ppl.models.constraints.code_trusted`),
        for the template's record read here.
    threads : int or None, optional
        Torch's intra-op threads in this process (None: left as they are).

    Returns
    -------
    dict
        ``rows``: per draw, ``(chain, draw, MLM energy, sequence, values)``, the values of
        ``columns``; ``columns``: ``feasible`` and each expert, for a constrained run (else empty);
        ``summary``: the run's summary line (``r_hat``, ``ess`` of ``lp``, ``acceptance``, and the
        lowest energy ``best_energy`` among feasible draws, with its sequence ``best``; NaN and
        ``"-"`` where no draw is feasible).

    Raises
    ------
    ValueError
        Where the folder does not hold the run the batch started there with ``settings``.
    RunLockedError
        While another process holds the template's run (:class:`~mlm_ppl.rundir.RunLockedError`).
    """
    if threads is not None:
        torch.set_num_threads(threads)
    with trusting_code(trust_code):  # the consent of the batch's caller, in this worker too
        run_dir, checkpoint = _open_template(Path(directory), settings, run_id)
    with run_dir:
        mlm, _, kernel = build(settings)
        result, report, _ = execute(
            run_dir, settings, checkpoint, mlm, kernel, progress=False, checkpoint_seconds=checkpoint_seconds
        )
    constraints = constraints_of(kernel.target)
    C, D, L = result.tokens.shape
    flat = result.tokens.reshape(-1, L)
    factor = torch.zeros(C * D, dtype=torch.float64)
    columns: dict[str, Tensor] = {}  # per-draw values beside the energy: feasible, then each expert
    if constraints is not None:  # the experts run once over the draws: their values give the factor too
        feasible = constraints.feasible(flat)
        values = constraints.expert_values(flat)
        factor = constraints.spec.expert_sum(values, C * D)
        factor[~feasible] = 0.0  # the factor is -inf there; the energy column keeps -T log p's value
        columns = {"feasible": feasible.double(), **values}
    # E = -T (log p - log_factor): the MLM energy of each draw, whatever the constraints add
    energy = energy_from_log_density(result.stats["lp"].double().reshape(-1), factor, settings.temperature)
    energy = energy.reshape(C, D)
    rows = [
        (c, d, float(energy[c, d]), seq, tuple(float(v[c * D + d]) for v in columns.values()))
        for c in range(C)
        for d, seq in enumerate(mlm.decode(result.tokens[c]))
    ]
    feasible_rows = [r for r in rows if constraints is None or r[4][0] == 1.0]
    # the lowest energy among feasible draws; none feasible, none named (an infeasible draw would read as a design)
    best = min(feasible_rows, key=lambda r: r[2]) if feasible_rows else (0, 0, float("nan"), "-", ())
    lp = report.table.loc["lp"] if "lp" in report.table.index else None
    line = dict(
        r_hat=float(lp["r_hat"]) if lp is not None else float("nan"),
        ess=float(lp["ess_bulk"]) if lp is not None else float("nan"),
        acceptance=float(report.acceptance_rate),
        best_energy=best[2],
        best=best[3],
    )
    return {"rows": rows, "columns": list(columns), "summary": line}


def run_batch(batch: Batch, *, checkpoint_seconds: float, on_done: Callable[[], None] | None = None) -> str:
    """Run every template of a locked batch, then write ``designs.tsv`` and ``summary.txt``.

    The templates run as Ray tasks when the settings have ``workers``. Set-up is linear in the number
    of templates: the marker and the record are written once for all of them; each run not started
    yet is created just before it runs (on Ray, all of them first, the record written once after),
    so the first template samples within seconds however long the batch is.

    Parameters
    ----------
    batch : Batch
        The batch, locked (:func:`start_batch`, :func:`resume_batch`).
    checkpoint_seconds : float
        Seconds between two checkpoints of each template's run.
    on_done : callable or None, optional
        Called with no argument as each template's run ends (in this process).

    Returns
    -------
    str
        The text of the batch's ``summary.txt``: one line per template (an annealed batch's starts
        with a ``#`` line that says its draws are not samples of the target).
    """
    batch_dir, settings = batch.directory, batch.settings
    batch_dir.record_all([name for name, _ in batch.templates])  # the template folders are the batch's
    pending = {name for name, _ in batch.templates if not _started(batch_dir.path / name)}
    if pending:  # a kill while they are created leaves them recognisable: a resume adopts what it finds
        batch.runs.update(dict.fromkeys(pending))
        batch.write_record()
    trusted = code_trusted()

    def job(name: str, template: str) -> tuple:
        return (
            str(batch_dir.path / name),
            settings.for_template(template),
            batch.runs[name],
            checkpoint_seconds,
            trusted,
        )

    def create(name: str, template: str) -> None:
        with rundir.start_run(batch_dir.path / name, settings.for_template(template)) as run_dir:
            batch.runs[name] = run_dir.run_id

    results = []
    if settings.workers:
        for name, template in batch.templates:
            if name in pending:
                create(name, template)
        if pending:
            batch.write_record()
        jobs = [job(name, template) for name, template in batch.templates]
        results = run_tasks_ray(run_template, jobs, workers=settings.workers, on_done=on_done, device=settings.device)
    else:
        for name, template in batch.templates:
            if name in pending:
                create(name, template)
                batch.write_record()
            results.append(run_template(*job(name, template)))
            if on_done is not None:
                on_done()
    extra = results[0]["columns"] if results else []  # one spec for the batch: the same columns everywhere
    prior = batch.length_prior()
    # a batch of strata: each draw's length and its weight pi(L) / N_L in the mixture sum_L pi(L) p_L
    strata_cols = ["length", "weight"] if prior is not None else []
    length_of = {strata_name(L): L for L in prior.weights} if prior is not None else {}
    weights = (
        prior.draw_weights({length_of[name]: len(res["rows"]) for (name, _), res in zip(batch.templates, results)})
        if prior is not None
        else {}
    )
    lines = ["\t".join(["template", *strata_cols, "chain", "draw", "energy", *extra, "sequence"])]
    table = [
        "template\t" + "".join(f"{c}\t" for c in ("length", "prior") if prior is not None) + "r_hat_lp\tess_lp\t"
        "acceptance\tbest_energy\tbest_sequence"
    ]
    mixed = 0.0
    for (name, _), res in zip(batch.templates, results):
        cells = []
        if prior is not None:
            weight = weights[length_of[name]]
            cells = [str(length_of[name]), f"{weight:.6g}"]
            mixed += weight * math.fsum(e for _, _, e, _, _ in res["rows"])
        lines += [
            "\t".join([name, *cells, str(c), str(d), f"{e:.4f}", *(f"{v:.4g}" for v in values), seq])
            for c, d, e, seq, values in res["rows"]
        ]
        s = res["summary"]
        first = f"{name}\t" + (f"{cells[0]}\t{prior.weights[length_of[name]]:.4g}\t" if prior is not None else "")
        table.append(
            f"{first}{s['r_hat']:.3f}\t{s['ess']:.0f}\t{s['acceptance']:.3f}\t{s['best_energy']:.4f}\t{s['best']}"
        )
    batch_dir.write_text("designs.tsv", "\n".join(lines) + "\n")
    if prior is not None and batch.lengths is not None:
        table.insert(
            0,
            f"# strata of {batch.lengths['template']}: one run per gap length, prior {batch.lengths['source']}; in the "
            "mixture sum_L pi(L) p_L a draw of length L weighs pi(L) / N_L (designs.tsv: length, weight)",
        )
        table.append(f"# mixture: mean MLM energy {mixed:.4f} (the weighted mean over every draw)")
    record = settings.annealing()
    if record is not None:  # mode seeking: the table's R-hat and ESS are the annealed chains'
        table.insert(0, f"# {annealing_note(record)}")
    text = "\n".join(table) + "\n"
    batch_dir.write_text("summary.txt", text)
    return text
