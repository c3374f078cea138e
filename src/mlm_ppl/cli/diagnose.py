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
    diag.add_argument(
        "--length-reference",
        metavar="FILE",
        help="a run over a variable gap: a length distribution to compare its length marginal with (lines "
        "LENGTH<TAB>WEIGHT, as --length-prior's; renormalised over the run's lengths), as a column of the "
        "summary's length table and a series of length.png",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .._checks import check_count
    from ..diagnostics import gap_lengths, loop_distribution, plot_diagnostics, read_run, summary
    from ..models.gaps import LengthReference
    from ..rundir import MARKER, RunDirectory, plots_of

    if args.loops is not None:
        check_count(args.loops, "--loops")
    idata = read_run(args.path)
    reference = None
    if args.length_reference is not None:
        lengths = gap_lengths(idata)
        if lengths is None:
            raise ValueError(
                f"--length-reference: {args.path} is a run of one length; it applies to a run over a variable gap "
                "(--length-mode jump)"
            )
        reference = LengthReference.read(args.length_reference, lengths)
    path = os.path.join(args.path, "run.nc") if os.path.isdir(args.path) else args.path
    out.write(str(summary(idata, length_reference=reference)) + "\n")
    if args.loops is not None:
        out.write("\n" + str(loop_distribution(idata, top=args.loops)) + "\n\n")
    out.flush()
    plot_dir = args.plots or os.path.dirname(os.path.abspath(path))
    if os.path.isfile(os.path.join(plot_dir, MARKER)):  # a run directory: plot under its lock, as its files
        with RunDirectory.open(plot_dir, "sample") as run_dir:
            for name in plots_of(idata):
                run_dir.record(name)
            plots = plot_diagnostics(idata, plot_dir, length_reference=reference)
    else:
        plots = plot_diagnostics(idata, plot_dir, length_reference=reference)
    out.write(f"plots: {', '.join(plots)}\n")
    return 0
