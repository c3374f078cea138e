"""``mlm-ppl germlines``: real germline V genes against shuffles of themselves."""

from __future__ import annotations

import argparse
from typing import TextIO

from ._common import add_model_args, at_least, load


def add_parser(sub: argparse._SubParsersAction) -> None:
    germ = sub.add_parser(
        "germlines",
        help="score real germline V genes against shuffled versions of themselves",
        description="Score IMGT germline genes (from anarci) and a residue shuffle of each; "
        "a good model gives the real gene the lower energy.",
    )
    add_model_args(germ)
    germ.add_argument("--species", default="human")
    germ.add_argument("--chain", default="H", help="H, K or L")
    germ.add_argument("--n", type=int, default=12, help="number of genes (default 12; 0 for all)")
    germ.add_argument("--seed", type=int, default=0, help="seed of the shuffles")


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..data import germline_sequences
    from ..evaluation.germlines import compare_germlines

    at_least(args.n, "n", 0)
    germline_sequences(args.species, args.chain, "V")  # an unknown species or chain fails before the model loads
    mlm = load(args)
    result = compare_germlines(mlm, args.species, args.chain, args.n, seed=args.seed, progress=args.progress)
    out.write(result.report())
    return 0
