"""``mlm-ppl diagnose``: the summary of a run and its plots again."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TextIO


def add_parser(sub: argparse._SubParsersAction) -> None:
    diag = sub.add_parser(
        "diagnose",
        help="summary and plots of a run (DIR/run.nc, or the checkpoint of a run still going)",
        description="Print the summary of a run and redraw its plots. A run directory whose checkpoint holds other "
        "draws than its run.nc (a run still going, cut off, or resumed since) is read from its checkpoint, its draws "
        "so far, and, unless the run is going on, its run.nc, samples.txt, summary.txt and plots are rewritten "
        "from them.",
    )
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
        metavar="FILE|human-cdrh3",
        help="a run over a variable gap: a length distribution to compare its length marginal with (lines "
        "LENGTH<TAB>WEIGHT, as --length-prior's; renormalised over the run's lengths; human-cdrh3: the human "
        "CDR-H3 lengths of OLGA's human IGH model, shipped with the package; ./human-cdrh3 for a file of that "
        "name), as a column of the "
        "summary's length table and a series of length.png",
    )
    diag.add_argument(
        "--deep",
        type=int,
        metavar="K",
        help="also print the K distinct states of lowest energy any chain visited: energy, the designed positions' "
        "own terms and mean conditional probability (read with the model where run.nc lacks them), memorized or "
        "not, which chains visited them, first visit, draws and longest stay",
    )
    diag.add_argument(
        "--reference",
        metavar="LOOP",
        help="the designed positions' tokens of a reference (e.g. the template's own loop): adds hamming_reference, "
        "each draw's Hamming distance to it, to the summary",
    )
    diag.add_argument(
        "--trust-code", action="store_true", help="consent to code experts of a run read from its checkpoint"
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .._checks import check_count
    from ..campaign.current import read_current, write_current
    from ..diagnostics import deep_states, gap_lengths, loop_distribution, plot_diagnostics, summary, with_reference
    from ..models.gaps import LengthReference
    from ..rundir import MARKER, RunDirectory, RunLockedError, plots_directory, plots_of

    if args.loops is not None:
        check_count(args.loops, "--loops")
    if args.deep is not None:
        check_count(args.deep, "--deep", minimum=1)
    current = read_current(args.path, trust_code=args.trust_code, progress=True)
    idata = current.idata
    if args.reference is not None:
        idata = with_reference(idata, args.reference)
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
    out.write(f"{current.source}\n\n" if current.from_checkpoint else "")
    out.write(str(summary(idata, length_reference=reference)) + "\n")
    if args.loops is not None:
        out.write("\n" + str(loop_distribution(idata, top=args.loops)) + "\n")
    if args.deep is not None:
        mlm = current.mlm
        if mlm is None and "site_prob" not in idata.posterior:  # the deepest states are read with the model
            from ..campaign import run_model
            from ..designs import recorded_settings

            mlm = run_model(recorded_settings(dict(idata.attrs), Path(args.path))[0])
        out.write("\n" + str(deep_states(idata, args.deep, mlm=mlm)) + "\n")
    out.write("\n" if args.loops is not None or args.deep is not None else "")
    out.flush()
    plot_dir = args.plots or os.path.dirname(os.path.abspath(path))
    if current.from_checkpoint and args.plots is None:  # the run's own outputs, as its end would write them
        try:
            written = write_current(args.path, current)
        except RunLockedError:
            out.write("the run is going on (its directory is locked): its outputs are left to it\n")
            return 0
        out.write(f"wrote the run's current outputs: {', '.join(os.path.basename(p) for p in written)}\n")
        return 0
    own = os.path.realpath(plot_dir) == os.path.realpath(os.path.dirname(os.path.abspath(path)))
    if own and os.path.isfile(os.path.join(plot_dir, MARKER)):  # the run's directory: under its lock, as its files
        with RunDirectory.open(plot_dir, "sample") as run_dir:
            run_dir.check_names(plots_of(idata))
            plots = plot_diagnostics(idata, plot_dir, length_reference=reference, record=run_dir.record)
    elif not own:  # none of the user's files, nor another run's, replaced; each plot recorded as written
        record = plots_directory(plot_dir, plots_of(idata))
        plots = plot_diagnostics(idata, plot_dir, length_reference=reference, record=record)
    else:
        plots = plot_diagnostics(idata, plot_dir, length_reference=reference)
    out.write(f"plots: {', '.join(plots)}\n")
    return 0
