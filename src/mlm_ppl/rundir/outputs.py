"""What a finished sampling run writes: ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots."""

from __future__ import annotations

from typing import Any

from ..inference.runner import Run
from .directory import RunDirectory

__all__ = ["OUTPUTS", "OUTPUT_NAMES", "PLOTS", "plots_of", "write_outputs"]

PLOTS = ("trace_lp.png", "rank_lp.png", "acceptance.png", "token_frequency.png", "deep_states.png")
OUTPUTS = ("run.nc", "samples.txt", "summary.txt", *PLOTS)
LENGTH_PLOT = "length.png"
OUTPUT_NAMES = (*OUTPUTS, LENGTH_PLOT)
"""Every name a sampling run's outputs may take: a file of the user's by one of them is refused
when the run starts or resumes (:meth:`~mlm_ppl.rundir.RunDirectory.check_names`), not replaced."""


def plots_of(idata: Any) -> tuple[str, ...]:
    """The plots :func:`~mlm_ppl.diagnostics.plot_diagnostics` writes for a run: :data:`PLOTS`, and
    ``length.png`` for a run over the lengths of a variable gap."""
    return (*PLOTS, LENGTH_PLOT) if "length_prior" in idata.attrs else PLOTS


def write_outputs(
    run_dir: RunDirectory, run: Run, mlm: Any, constraints: Any = None, idata: Any = None
) -> tuple[Any, list[str]]:
    """Write ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots of a finished run
    (with ``constraints``, a run's ``BoundConstraints``: each rule's and expert's value per draw
    in ``run.nc`` and the summary, and a ``feasible`` column in ``samples.txt``; a variable gap's
    run adds a ``length`` column). Every draw's designed positions are scored once per distinct
    state (``site_prob``, ``site_energy``, ``memorized``: :func:`~mlm_ppl.diagnostics.site_scores`),
    in ``run.nc`` and, but for ``site_energy``, in ``samples.txt``. ``idata``: the run's
    InferenceData already made so (``to_inference_data(run, mlm=, constraints=, sites=True)``).

    Returns the :class:`~mlm_ppl.diagnostics.Summary` (``str()`` of it is ``summary.txt``) and
    the paths written (``run.nc`` first).
    """
    from ..diagnostics import plot_diagnostics, summary, to_inference_data

    if idata is None:
        idata = to_inference_data(run, mlm=mlm, constraints=constraints, sites=True)
    with run_dir.atomic("run.nc") as tmp:
        idata.to_netcdf(str(tmp))
    lp = run.stats["lp"]
    columns = {k: idata.posterior[k].values for k in ("feasible", "length") if k in idata.posterior}
    prob, memorized = idata.posterior["site_prob"].values, idata.posterior["memorized"].values
    lines = ["\t".join(["chain", "draw", "lp", *columns, "site_prob", "memorized", "sequence"])]
    for c in range(run.num_chains):
        for d, seq in enumerate(mlm.decode(run.tokens[c])):
            flags = "".join(f"{int(v[c, d])}\t" for v in columns.values())
            lines.append(
                f"{c}\t{d}\t{float(lp[c, d]):.4f}\t{flags}{float(prob[c, d]):.4f}\t{int(memorized[c, d])}\t{seq}"
            )
    run_dir.write_text("samples.txt", "\n".join(lines) + "\n")
    report = summary(idata)
    run_dir.write_text("summary.txt", str(report) + "\n")
    for name in plots_of(idata):  # recorded before plot_diagnostics writes them
        run_dir.record(name)
    plots = plot_diagnostics(idata, str(run_dir.path), mlm=mlm)
    return report, [str(run_dir.path / name) for name in ("run.nc", "samples.txt", "summary.txt")] + plots
