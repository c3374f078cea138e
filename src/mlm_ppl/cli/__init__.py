"""Command line: one module per subcommand, each flags -> library call -> print.

``mlm-ppl sample``     sample the masked positions of a template; a resumable run directory.
``mlm-ppl diagnose``   print the summary of a run and redraw its plots.
``mlm-ppl score``      energies of sequences read from a file or stdin, TSV out.
``mlm-ppl germlines``  score real germline genes against shuffled controls.
``mlm-ppl pairs``      derived pair joints (naive, MRF, MRF-logit, HCB, AG) evaluated on held-out pairs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import diagnose, germlines, pairs, sample, score

__all__ = ["main", "build_parser"]

_COMMANDS = {"score": score, "sample": sample, "diagnose": diagnose, "germlines": germlines, "pairs": pairs}


def build_parser() -> argparse.ArgumentParser:
    """The ``mlm-ppl`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="mlm-ppl", description="Masked language models as probabilistic models: scoring and sampling."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mlm-ppl`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return _COMMANDS[args.command].run(args, sys.stdout)
    except (ValueError, TypeError, ModuleNotFoundError, FileNotFoundError) as err:
        print(f"mlm-ppl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mlm-ppl {args.command}: interrupted", file=sys.stderr)
        return 130
