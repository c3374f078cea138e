"""What a finished sampling run writes: ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots."""

from __future__ import annotations

from typing import Any

from ..inference.runner import Run
from .directory import RunDirectory

__all__ = ["OUTPUTS", "PLOTS", "write_outputs"]

PLOTS = ("trace_lp.png", "rank_lp.png", "acceptance.png", "token_frequency.png")
OUTPUTS = ("run.nc", "samples.txt", "summary.txt", *PLOTS)


def write_outputs(run_dir: RunDirectory, run: Run, mlm: Any) -> tuple[Any, list[str]]:
    """Write ``run.nc``, ``samples.txt``, ``summary.txt`` and the plots of a finished run.

    Returns the :class:`~mlm_ppl.diagnostics.Summary` (``str()`` of it is ``summary.txt``) and
    the paths written (``run.nc`` first).
    """
    from ..diagnostics import plot_diagnostics, summary, to_inference_data

    idata = to_inference_data(run, mlm=mlm)
    with run_dir.atomic("run.nc") as tmp:
        idata.to_netcdf(str(tmp))
    lp = run.stats["lp"]
    lines = ["chain\tdraw\tlp\tsequence"]
    for c in range(run.num_chains):
        for d, seq in enumerate(mlm.decode(run.tokens[c])):
            lines.append(f"{c}\t{d}\t{float(lp[c, d]):.4f}\t{seq}")
    run_dir.write_text("samples.txt", "\n".join(lines) + "\n")
    report = summary(idata)
    run_dir.write_text("summary.txt", str(report) + "\n")
    for name in PLOTS:  # recorded before plot_diagnostics writes them
        run_dir.record(name)
    plots = plot_diagnostics(idata, str(run_dir.path), mlm=mlm)
    return report, [str(run_dir.path / name) for name in ("run.nc", "samples.txt", "summary.txt")] + plots
