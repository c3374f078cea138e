"""``mlm-ppl diagnose``: the summary of a run and its plots again."""

from __future__ import annotations

import argparse
import os
from typing import TextIO


def add_parser(sub: argparse._SubParsersAction) -> None:
    diag = sub.add_parser("diagnose", help="summary and plots of a run (DIR/run.nc)")
    diag.add_argument("path", help="run.nc, or its run directory")
    diag.add_argument("--plots", default=None, help="directory for the plots (default: next to run.nc)")
    diag.add_argument(
        "--loops",
        type=int,
        metavar="N",
        help="also print the token frequencies at the sampled positions and the N most frequent loops",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .._checks import check_count
    from ..diagnostics import loop_distribution, plot_diagnostics, read_run, summary
    from ..rundir import MARKER, RunDirectory, plots_of

    if args.loops is not None:
        check_count(args.loops, "--loops")
    idata = read_run(args.path)
    path = os.path.join(args.path, "run.nc") if os.path.isdir(args.path) else args.path
    out.write(str(summary(idata)) + "\n")
    if args.loops is not None:
        out.write("\n" + str(loop_distribution(idata, top=args.loops)) + "\n\n")
    out.flush()
    plot_dir = args.plots or os.path.dirname(os.path.abspath(path))
    if os.path.isfile(os.path.join(plot_dir, MARKER)):  # a run directory: plot under its lock, as its files
        with RunDirectory.open(plot_dir, "sample") as run_dir:
            for name in plots_of(idata):
                run_dir.record(name)
            plots = plot_diagnostics(idata, plot_dir)
    else:
        plots = plot_diagnostics(idata, plot_dir)
    out.write(f"plots: {', '.join(plots)}\n")
    return 0
