"""``mlm-ppl pairs``: derived pair joints evaluated on pairs of positions of real sequences."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from ._common import add_model_args, at_least, load, read_lines


def add_parser(sub: argparse._SubParsersAction) -> None:
    prs = sub.add_parser(
        "pairs",
        help="explicit joints over two positions derived from the MLM, evaluated on real pairs",
        description="For N pairs of positions drawn from real sequences, derive each joint (Torroba Hennigen "
        "& Kim 2023) from the MLM's conditionals and report pairwise and unary perplexity, KL/JSD to the "
        "MLM's conditionals and the compatibility score (mean and standard error). Writes config.json, "
        "pairs.csv (one row per pair and method, appended as it goes), summary.csv, summary.txt and "
        "pairs.png. Rerunning the same command continues an interrupted run.",
    )
    add_model_args(prs)
    prs.add_argument(
        "--data",
        default="germlines:human:H",
        help="a text file with one sequence per line, or germlines:SPECIES:CHAIN[:SEGMENT] "
        "(anarci; default germlines:human:H, the human heavy V genes)",
    )
    prs.add_argument("--pairs", choices=("contiguous", "random"), default="contiguous")
    prs.add_argument("--n", type=int, default=200, help="number of pairs (default 200), cycling through the sequences")
    prs.add_argument(
        "--methods",
        default="naive,mrf,mrf_logit,hcb,ag",
        help="comma-separated: naive, mrf, mrf_logit, hcb (= hcb:both), hcb:one, ag",
    )
    prs.add_argument(
        "--support",
        type=int,
        default=None,
        help="K candidates per position, chosen by the reference code's --joint-size rule (default: every "
        "ordinary token)",
    )
    prs.add_argument(
        "--convention",
        choices=("mlm-ppl", "reference"),
        default="mlm-ppl",
        help="reference: the setting of the paper's code (lms-from-mlms) in one switch: every token id, special "
        "tokens included; AG stops after 40 plain steps; random pairs keep their drawn order (see docs/pairs.md)",
    )
    prs.add_argument("--seed", type=int, default=0, help="seed of the pair positions")
    prs.add_argument("--out", default=None, help="output directory (default runs/pairs_<pairs>)")
    prs.add_argument("--overwrite", action="store_true", help="replace an existing directory with other settings")


def pair_data(source: str) -> list[str]:
    """The sequences of ``--data``: a file, or ``germlines:SPECIES:CHAIN[:SEGMENT]``."""
    if source.startswith("germlines:"):
        from ..data import germline_sequences

        parts = source.split(":")[1:]
        if not 2 <= len(parts) <= 3:
            raise ValueError(f"--data {source!r}: write germlines:SPECIES:CHAIN[:SEGMENT], e.g. germlines:human:H")
        genes = germline_sequences(*parts)
        return list(genes.values())
    return read_lines(source)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..evaluation.pairs import draw_pairs, parse_methods
    from ..evaluation.pairs_run import PAIRS_FORMAT, run_pairs
    from ..models.loading import file_sha256, model_files
    from ..rundir import RunExistsError

    methods = [label for label, _, _ in parse_methods(args.methods)]
    at_least(args.support, "support", 1)
    if args.support is not None and args.convention == "reference":
        raise ValueError("--support applies to --convention mlm-ppl; the reference convention reads every token id")
    out_dir = args.out or f"runs/pairs_{args.pairs}"
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ValueError(f"--out {out_dir!r} is a file; give a directory")
    sequences = pair_data(args.data)
    # the model's files and the data file are part of the record: a rerun with other contents is refused
    recorded_files = {"model_files": model_files(args.model)}
    recorded_files["data_files"] = {} if args.data.startswith("germlines:") else {args.data: file_sha256(args.data)}
    mlm = load(args)
    n_ordinary = int(mlm.ordinary_mask.sum())
    if args.support is not None and args.support > n_ordinary:
        raise ValueError(f"--support {args.support} exceeds the {n_ordinary} ordinary tokens")
    pairs = draw_pairs(mlm, sequences, args.pairs, args.n, args.seed, convention=args.convention)  # checks them
    config = {
        "format": PAIRS_FORMAT,
        "model": args.model,
        "dtype": args.dtype,
        "data": args.data,
        "pairs": args.pairs,
        "n": args.n,
        "methods": methods,
        "support": args.support,
        "convention": args.convention,
        "seed": args.seed,
        **recorded_files,
    }
    try:
        result = run_pairs(
            mlm,
            sequences,
            pairs,
            methods,
            out_dir,
            config=config,
            support=args.support,
            convention=args.convention,
            overwrite=args.overwrite,
            progress=args.progress,
            data_label=args.data,
        )
    except RunExistsError as err:
        raise ValueError(err.remedy("use --overwrite to replace it or another --out")) from None
    out.write(result.report + "\n")
    out.write(f"\nwrote {', '.join(str(p) for p in result.paths)}\n")
    return 0
