"""What a finished sampling run writes: ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .._files import load_json, write_text_atomic
from ..inference.runner import Run
from .directory import MARKER, RunDirectory, first_unclaimed

__all__ = ["OUTPUTS", "OUTPUT_NAMES", "PLOTS", "PLOTS_RECORD", "plots_of", "plots_directory", "write_outputs"]

PLOTS_RECORD = ".mlm-ppl-plots"
"""The names of the plots ``diagnose --plots DIR`` wrote in ``DIR`` (a JSON list): what it may redraw."""

PLOTS = ("trace_lp.png", "rank_lp.png", "acceptance.png", "token_frequency.png", "deep_states.png")
"""The plots every finished run draws in its directory."""
OUTPUTS = ("run.nc", "samples.txt", "summary.txt", *PLOTS)
"""A finished run's outputs: ArviZ InferenceData, the draws as text, the summary, the plots."""
LENGTH_PLOT = "length.png"
OUTPUT_NAMES = (*OUTPUTS, LENGTH_PLOT)
"""Every name a sampling run's outputs may take: a file of the user's by one of them is refused
when the run starts or resumes (:meth:`~mlm_ppl.rundir.RunDirectory.check_names`), not replaced."""


def plots_of(idata: Any) -> tuple[str, ...]:
    """Name the plots :func:`~mlm_ppl.plot_diagnostics` writes for a run.

    Parameters
    ----------
    idata : arviz.InferenceData
        The run's InferenceData.

    Returns
    -------
    tuple of str
        :data:`~mlm_ppl.rundir.PLOTS`, and ``length.png`` for a run over the lengths of a
        variable gap (one whose ``idata.attrs`` has a ``length_prior``).
    """
    return (*PLOTS, LENGTH_PLOT) if "length_prior" in idata.attrs else PLOTS


def plots_directory(directory: str | os.PathLike, names: Sequence[str]) -> Callable[[str], None]:
    r"""Check a directory for plots written outside a run (``diagnose --plots DIR``), made if missing.

    Refused before anything is written: another run's directory, and a file by one of the names
    that an earlier ``diagnose --plots`` there did not write (the user's); other files may be there.

    Parameters
    ----------
    directory : str or path
        Where the plots go.
    names : sequence of str
        The plots' file names.

    Returns
    -------
    callable
        ``record(name)``, which records each name as its file is written (in
        :data:`~mlm_ppl.rundir.PLOTS_RECORD`, a JSON list in ``directory``).

    Raises
    ------
    ValueError
        When ``directory`` is a run's directory, its plots record is damaged, or a file by one of
        ``names`` is there that ``diagnose --plots`` did not write.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mlm_ppl.rundir import plots_directory
    >>> directory = Path(tempfile.mkdtemp()) / "plots"
    >>> record = plots_directory(directory, ["trace_lp.png"])
    >>> record("trace_lp.png")
    >>> (directory / ".mlm-ppl-plots").read_text()
    '["trace_lp.png"]\n'
    """
    path = Path(directory)
    if (path / MARKER).exists():
        raise ValueError(
            f"--plots {path}: it is a run's directory, whose plots are its own (diagnose that run); give another "
            "directory"
        )
    record_file = path / PLOTS_RECORD
    try:
        listed = set(load_json(record_file, "plots record")) if record_file.exists() else set()
    except (TypeError, ValueError):
        raise ValueError(f"{record_file} is damaged; remove it, and the plots it listed, by hand") from None
    name = first_unclaimed(path, names, listed)
    if name is not None:
        raise ValueError(
            f"--plots {path}: {name} exists there and diagnose --plots did not write it; it is never replaced: "
            "move it away, or give another directory"
        )
    path.mkdir(parents=True, exist_ok=True)

    def record(name: str) -> None:
        listed.add(name)
        write_text_atomic(record_file, json.dumps(sorted(listed)) + "\n")

    return record


def write_outputs(
    run_dir: RunDirectory, run: Run, mlm: Any, constraints: Any = None, idata: Any = None
) -> tuple[Any, list[str]]:
    """Write ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots of a finished run.

    With ``constraints``, each rule's and expert's value per draw goes in ``run.nc`` and the
    summary, and a ``feasible`` column in ``samples.txt``; a variable gap's run adds a ``length``
    column. Every draw's designed positions are scored once per distinct state (``site_prob``,
    ``site_energy``, ``memorized``: :func:`~mlm_ppl.diagnostics.site_scores`), in ``run.nc`` and,
    but for ``site_energy``, in ``samples.txt``, unless that takes more than
    :data:`~mlm_ppl.diagnostics.SITE_COPY_BUDGET` masked copies (the summary then says so). Each
    file's name is recorded in the run's marker before it is written.

    Parameters
    ----------
    run_dir : RunDirectory
        The run's directory, locked by this process.
    run : Run
        The finished run (:class:`~mlm_ppl.Run`).
    mlm : MaskedLM
        The run's model (it decodes the draws and scores the designed positions).
    constraints : BoundConstraints or None, optional
        The run's :class:`~mlm_ppl.models.constraints.BoundConstraints`; None (the default) for a
        run without constraints.
    idata : arviz.InferenceData or None, optional
        The run's InferenceData already made so
        (``to_inference_data(run, mlm=, constraints=, sites=True)``); None (the default) makes it.

    Returns
    -------
    summary : Summary
        The run's :class:`~mlm_ppl.diagnostics.Summary` (``str()`` of it is ``summary.txt``).
    paths : list of str
        The paths written, ``run.nc`` first, then ``samples.txt``, ``summary.txt`` and the plots.

    Raises
    ------
    ValueError
        When a file of the user's in the directory bears the name of an output or a plot
        (checked before the first plot is written).
    """
    from ..diagnostics import SITE_COPY_BUDGET, plot_diagnostics, summary, to_inference_data

    if idata is None:
        idata = to_inference_data(run, mlm=mlm, constraints=constraints, sites=True, site_budget=SITE_COPY_BUDGET)
    with run_dir.atomic("run.nc") as tmp:
        idata.to_netcdf(str(tmp))
    lp = run.stats["lp"]
    columns = {k: idata.posterior[k].values for k in ("feasible", "length") if k in idata.posterior}
    if "site_prob" in idata.posterior:
        columns.update(site_prob=idata.posterior["site_prob"].values, memorized=idata.posterior["memorized"].values)
    lines = ["\t".join(["chain", "draw", "lp", *columns, "sequence"])]
    for c in range(run.num_chains):
        for d, seq in enumerate(mlm.decode(run.tokens[c])):
            flags = "".join(_cell(k, v[c, d]) + "\t" for k, v in columns.items())
            lines.append(f"{c}\t{d}\t{float(lp[c, d]):.4f}\t{flags}{seq}")
    run_dir.write_text("samples.txt", "\n".join(lines) + "\n")
    report = summary(idata)
    run_dir.write_text("summary.txt", str(report) + "\n")
    run_dir.check_names(plots_of(idata))  # none of them the user's: refused before the first is written
    plots = plot_diagnostics(idata, str(run_dir.path), mlm=mlm, record=run_dir.record)  # each recorded as written
    return report, [str(run_dir.path / name) for name in ("run.nc", "samples.txt", "summary.txt")] + plots


def _cell(name: str, value: Any) -> str:
    """A column of ``samples.txt``: ``site_prob`` to 4 decimals, the flags as 0 or 1."""
    return f"{float(value):.4f}" if name == "site_prob" else str(int(value))
