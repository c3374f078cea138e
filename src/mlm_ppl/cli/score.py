"""``mlm-ppl score``: energies of sequences read from a file or stdin, TSV out."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..models.energy import ENERGIES, VARIANTS
from ._common import add_model_args, bar, load, read_lines

_GROUP = 16  # sequences scored (and written) together


def add_parser(sub: argparse._SubParsersAction) -> None:
    score = sub.add_parser(
        "score",
        help="energies of sequences, one per line (TSV: sequence, energy, n_positions)",
        description="Energy (nats, lower is more likely) of each input line. E_norm is the negative "
        "pseudo-log-likelihood; E_raw the negative sum of masked logits (Goyal et al. 2021).",
    )
    add_model_args(score)
    score.add_argument("--energy", choices=ENERGIES, default="norm")
    score.add_argument("--variant", choices=VARIANTS, default="pll", help="PLL variant (default: pll)")
    score.add_argument("input", nargs="?", default="-", help="file with one sequence per line, or - for stdin")


def run(args: argparse.Namespace, out: TextIO) -> int:
    lines = read_lines(args.input)
    mlm = load(args)
    mlm.encode(lines)  # validate every line before any work or output
    with bar(len(lines), args, "seq") as progress:
        for start in range(0, len(lines), _GROUP):
            group = lines[start : start + _GROUP]
            terms = mlm.energy_terms(group, variant=args.variant)
            energies = terms.total(args.energy).tolist()
            counts = terms.n_positions.tolist()
            out.write("".join(f"{s}\t{e:.6f}\t{n}\n" for s, e, n in zip(group, energies, counts)))
            out.flush()
            progress.update(len(group))
    return 0
