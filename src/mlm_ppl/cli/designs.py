"""``mlm-ppl designs``: the best distinct designs of a run or batch directory, TSV out."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from ._common import at_least


def add_parser(sub: argparse._SubParsersAction) -> None:
    des = sub.add_parser(
        "designs",
        help="the best distinct designs of a run or batch directory (TSV)",
        description="Rank every kept feasible draw of a run (or of each template of a batch) by its log "
        "density lp, merge identical sequences (count), and take the best in turn when they lie at Hamming "
        "distance >= --min-hamming from every design taken before, up to --top per template. Columns: rank, "
        "template, chain, draw, count, lp, energy (the MLM energy E), feasible, one per expert, site_prob (the "
        "designed positions' mean conditional probability), memorized (site_prob >= 0.9: most likely a sequence "
        "the model was trained on), n_mutations, mutations, delta_energy and delta_expert_<name> (from a reference "
        "loop, where the run has one or --reference gives it), min_hamming, sequence. A run still going is read "
        "from its checkpoint. Reads the directory only, and the model where it needs it (docs/constraints.md, "
        "Picking designs).",
    )
    des.add_argument("directory", metavar="DIR", help="a run or batch directory of mlm-ppl sample --out")
    des.add_argument("--top", type=int, default=10, help="designs per template, at least 1 (default 10)")
    des.add_argument(
        "--min-hamming",
        type=int,
        default=1,
        help="least Hamming distance (token positions) between two designs of a template, >= 0 (default 1)",
    )
    des.add_argument(
        "--exclude-memorized",
        action="store_true",
        help="leave out memorized loops (site_prob >= 0.9) before picking",
    )
    des.add_argument(
        "--novel-from",
        metavar="FILE",
        help="leave out loops within --min-distance of a loop in FILE (one loop of the designed positions per line: "
        "a training set, known binders)",
    )
    des.add_argument(
        "--min-distance",
        type=int,
        default=1,
        help="with --novel-from: least Hamming distance from every loop in FILE, >= 1 (default 1: not one of them)",
    )
    des.add_argument(
        "--trust-code", action="store_true", help="consent to code experts of a run read from its checkpoint"
    )
    des.add_argument(
        "--reference",
        metavar="LOOP",
        help="count each design's mutations (n_mutations, mutations: D3G,R4Y) from LOOP, the designed positions' "
        "tokens (default: the run's constraint spec's reference, where it has one)",
    )
    des.add_argument(
        "--where",
        metavar="CONDITION",
        help="keep only draws that meet CONDITION before picking, e.g. 'hydropathy < reference and "
        "n_mutations <= 4' (columns lp, energy, experts, n_mutations, delta_*; 'reference': the column's value "
        "at the reference loop; and, or, not, parentheses)",
    )
    des.add_argument("--out", metavar="FILE.tsv", help="write the table to FILE (atomically) instead of stdout")


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .._files import write_text_atomic
    from ..designs import pick_designs
    from ..rundir import kind_of

    at_least(args.top, "top", 1)
    at_least(args.min_hamming, "min-hamming", 0)
    at_least(args.min_distance, "min-distance", 1)
    if args.min_distance != 1 and args.novel_from is None:
        raise ValueError("--min-distance applies to --novel-from FILE: give the file of loops to keep away from")
    if args.out is not None:  # checked before any run is read
        if os.path.isdir(args.out):
            raise ValueError(f"--out {args.out} is a directory; give a file name")
        parent = Path(os.path.realpath(args.out)).parent
        if not parent.is_dir():
            raise ValueError(f"--out {args.out}: its directory {parent} does not exist; make it first")
        for folder in (parent, *parent.parents):  # a run directory at any depth above it
            if kind_of(folder) is not None:
                raise ValueError(
                    f"--out {args.out} lies in the mlm-ppl run directory {folder}, whose files are the run's; "
                    "write it elsewhere"
                )
    found = pick_designs(
        args.directory,
        args.top,
        args.min_hamming,
        exclude_memorized=args.exclude_memorized,
        novel_from=args.novel_from,
        min_distance=args.min_distance,
        trust_code=args.trust_code,
        reference=args.reference,
        where=args.where,
    )
    table = found.to_tsv()
    if args.out is None:
        out.write(table)
    else:
        write_text_atomic(args.out, table)
        out.write(f"wrote {len(found.designs)} designs to {args.out}\n")
    out.flush()
    for name, taken in found.excluded.items():
        for what, k in taken.items():
            did = "passed over memorized loops" if what == "exclude_memorized" else "left out distinct sequences"
            if what == "where":
                did = "left out distinct sequences that do not meet it"
            print(f"mlm-ppl designs: {name!r}: --{what.replace('_', '-')} {did}: {k}", file=sys.stderr)
    for name, k in found.short().items():
        print(
            f"mlm-ppl designs: note: only {k} of {args.top} designs at --min-hamming {args.min_hamming} in {name!r}",
            file=sys.stderr,
        )
    return 0
