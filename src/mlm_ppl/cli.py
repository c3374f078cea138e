"""Command line: thin wrappers over the Python API.

``mlm-ppl score``      energies of sequences read from a file or stdin, TSV out.
``mlm-ppl germlines``  score real germline genes against shuffled controls (the demo job).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence, TextIO

from .models.energy import ENERGIES, VARIANTS

__all__ = ["main", "build_parser"]

_GROUP = 16  # sequences scored (and written) together


def build_parser() -> argparse.ArgumentParser:
    """The ``mlm-ppl`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="mlm-ppl", description="Masked language models as probabilistic models: scoring and sampling."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def model_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default="antiberty", help="'antiberty', a model directory or a cached HF id")
        p.add_argument("--dtype", default=None, help="float32 (default, exact) or bfloat16 (faster, approximate)")
        p.add_argument("--device", default=None, help="cpu (default) or cuda")
        p.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="progress bar on stderr (default: on for 8 or more sequences)",
        )

    score = sub.add_parser(
        "score",
        help="energies of sequences, one per line (TSV: sequence, energy, n_positions)",
        description="Energy (nats, lower is more likely) of each input line. E_norm is the negative "
        "pseudo-log-likelihood; E_raw the negative sum of masked logits (Goyal et al. 2021).",
    )
    model_args(score)
    score.add_argument("--energy", choices=ENERGIES, default="norm")
    score.add_argument("--variant", choices=VARIANTS, default="pll", help="PLL variant (default: pll)")
    score.add_argument("input", nargs="?", default="-", help="file with one sequence per line, or - for stdin")

    germ = sub.add_parser(
        "germlines",
        help="score real germline V genes against shuffled versions of themselves",
        description="Score IMGT germline genes (from anarci) and a residue shuffle of each; "
        "a good model gives the real gene the lower energy.",
    )
    model_args(germ)
    germ.add_argument("--species", default="human")
    germ.add_argument("--chain", default="H", help="H, K or L")
    germ.add_argument("--n", type=int, default=12, help="number of genes (default 12; 0 for all)")
    germ.add_argument("--seed", type=int, default=0, help="seed of the shuffles")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mlm-ppl`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "score":
            return _score(args, sys.stdout)
        return _germlines(args, sys.stdout)
    except (ValueError, TypeError, ModuleNotFoundError, FileNotFoundError) as err:
        print(f"mlm-ppl {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"mlm-ppl {args.command}: interrupted", file=sys.stderr)
        return 130


def _read_lines(source: str) -> list[str]:
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(source, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            raise FileNotFoundError(f"input file {source!r} does not exist") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"input file {source!r} is not UTF-8 text: {err}") from None
    lines = text.splitlines()
    if not lines:
        raise ValueError(f"no sequences in {'stdin' if source == '-' else repr(source)}")
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"line {i} is blank; give one sequence per line")
    return lines


def _load(args):
    from .models.loading import load_mlm

    return load_mlm(args.model, device=args.device, dtype=args.dtype)


def _bar(total: int, args, unit: str):
    from tqdm.auto import tqdm

    show = args.progress if args.progress is not None else total >= 8
    return tqdm(total=total, unit=f" {unit}", disable=not show, file=sys.stderr, dynamic_ncols=True)


def _score(args, out: TextIO) -> int:
    lines = _read_lines(args.input)
    mlm = _load(args)
    mlm.encode(lines)  # validate every line before any work or output
    with _bar(len(lines), args, "seq") as bar:
        for start in range(0, len(lines), _GROUP):
            group = lines[start : start + _GROUP]
            terms = mlm.energy_terms(group, variant=args.variant)
            energies = terms.total(args.energy).tolist()
            counts = terms.n_positions.tolist()
            out.write("".join(f"{s}\t{e:.6f}\t{n}\n" for s, e, n in zip(group, energies, counts)))
            out.flush()
            bar.update(len(group))
    return 0


def _germlines(args, out: TextIO) -> int:
    from .data import germline_sequences, shuffled

    if args.n < 0:
        raise ValueError(f"--n must be >= 0, got {args.n}")
    genes = germline_sequences(args.species, args.chain, "V")
    names = list(genes)[: args.n or None]
    real = [genes[g] for g in names]
    controls = [shuffled(s, args.seed + i) for i, s in enumerate(real)]
    mlm = _load(args)
    mlm.encode(real + controls)
    t0 = time.perf_counter()
    energies: list[float] = []
    with _bar(2 * len(real), args, "seq") as bar:
        for start in range(0, len(real), _GROUP // 2):
            batch = real[start : start + _GROUP // 2] + controls[start : start + _GROUP // 2]
            e = mlm.score(batch).tolist()
            half = len(batch) // 2
            energies.extend(zip(e[:half], e[half:]))
            bar.update(len(batch))
    elapsed = time.perf_counter() - t0
    out.write(f"model {mlm.name}  |  {args.species} {args.chain}-chain germline V genes vs residue shuffles  |  "
              f"E_norm = negative pseudo-log-likelihood (nats, lower = more likely)\n\n")
    header = f"{'gene':<12} {'len':>4} {'E_norm real':>12} {'E_norm shuf':>12} {'per res real':>13} {'per res shuf':>13}"
    out.write(header + "\n" + "-" * len(header) + "\n")
    wins = 0
    for name, seq, (e_real, e_shuf) in zip(names, real, energies):
        wins += e_real < e_shuf
        out.write(f"{name:<12} {len(seq):>4} {e_real:>12.2f} {e_shuf:>12.2f} "
                  f"{e_real / len(seq):>13.3f} {e_shuf / len(seq):>13.3f}\n")
    n_copies = 2 * sum(len(s) for s in real)
    out.write(f"\nreal gene scored lower than its shuffle: {wins}/{len(real)} ({100 * wins / len(real):.1f}%)\n")
    out.write(f"{len(real) * 2} sequences, {n_copies} masked copies in {elapsed:.1f} s "
              f"({n_copies / elapsed:.1f} copies/s, dtype {str(mlm.dtype).replace('torch.', '')})\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
