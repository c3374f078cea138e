"""Command line: thin wrappers over the Python API.

``mlm-ppl sample``     sample the masked positions of a template; a resumable run directory.
``mlm-ppl diagnose``   print the summary of a run and redraw its plots.
``mlm-ppl score``      energies of sequences read from a file or stdin, TSV out.
``mlm-ppl germlines``  score real germline genes against shuffled controls.
``mlm-ppl pairs``      derived pair joints (naive, MRF, MRF-logit, HCB, AG) evaluated on held-out pairs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from typing import Sequence, TextIO

from .inference.kernels import INITS
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

    smp = sub.add_parser(
        "sample",
        help="sample the masked positions of a template (MH, pseudo-Gibbs or mask-predict)",
        description="Run C chains on the masked positions of a template and write a run directory: "
        "config.json, checkpoint.pt (as it goes), run.nc (ArviZ InferenceData), samples.txt, summary.txt, "
        "plots. --resume DIR continues an interrupted run exactly.",
    )
    model_args(smp)
    smp.set_defaults(model=None)
    what = smp.add_mutually_exclusive_group()
    what.add_argument("--template", help="sequence with mask tokens at the positions to sample, e.g. 'CAR[MASK][MASK]W'")
    what.add_argument("--length", type=int, help="sample a whole sequence of N tokens")
    smp.add_argument("--kernel", choices=("mh", "pseudo-gibbs", "mask-predict"))
    smp.add_argument("--energy", choices=ENERGIES)
    smp.add_argument("--temperature", type=float, help="target temperature T (default 1)")
    smp.add_argument("--chains", type=int, help="chains, advanced together (default 4)")
    smp.add_argument("--draws", type=int, help="draws kept per chain (default 100)")
    smp.add_argument("--warmup", type=int, help="steps discarded before the first draw (default 0)")
    smp.add_argument("--thin", type=int, help="keep every k-th step (default 1)")
    smp.add_argument("--seed", type=int, help="seed (default 0)")
    smp.add_argument("--init", choices=INITS, help="how the masks are first filled")
    smp.add_argument("--scan", help="random, random_sweep, left_to_right (pseudo-Gibbs also: parallel)")
    smp.add_argument("--block-size", type=int, help="MH: positions proposed together")
    smp.add_argument("--proposal-temperature", type=float, help="MH: proposal temperature")
    smp.add_argument("--top-k", type=int, help="MH / pseudo-Gibbs: truncate proposals to the k most likely tokens")
    smp.add_argument("--top-p", type=float, help="MH: nucleus truncation of proposals")
    smp.add_argument("--burnin", type=int, help="pseudo-Gibbs: steps before --top-k applies")
    smp.add_argument("--iterations", type=int, help="mask-predict: decoding iterations")
    smp.add_argument("--out", help="run directory to create")
    smp.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    smp.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR")
    smp.add_argument("--checkpoint-seconds", type=float, default=30.0, help="checkpoint interval (default 30 s)")

    diag = sub.add_parser("diagnose", help="summary and plots of a run (DIR/run.nc)")
    diag.add_argument("path", help="run.nc, or its run directory")
    diag.add_argument("--plots", default=None, help="directory for the plots (default: next to run.nc)")

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

    prs = sub.add_parser(
        "pairs",
        help="explicit joints over two positions derived from the MLM, evaluated on real pairs",
        description="For N pairs of positions drawn from real sequences, derive each joint (Torroba Hennigen "
        "& Kim 2023) from the MLM's conditionals and report pairwise and unary perplexity, KL/JSD to the "
        "MLM's conditionals and the compatibility score (mean and standard error). Writes config.json, "
        "pairs.csv (one row per pair and method, appended as it goes), summary.csv, summary.txt and "
        "pairs.png. Rerunning the same command continues an interrupted run.",
    )
    model_args(prs)
    prs.add_argument("--data", default="germlines:human:H",
                     help="a text file with one sequence per line, or germlines:SPECIES:CHAIN[:SEGMENT] "
                     "(anarci; default germlines:human:H, the human heavy V genes)")
    prs.add_argument("--pairs", choices=("contiguous", "random"), default="contiguous")
    prs.add_argument("--n", type=int, default=200, help="number of pairs (default 200), cycling through the sequences")
    prs.add_argument("--methods", default="naive,mrf,mrf_logit,hcb,ag",
                     help="comma-separated: naive, mrf, mrf_logit, hcb (= hcb:both), hcb:one, ag")
    prs.add_argument("--support", type=int, default=None,
                     help="K candidates per position as in the paper (default: every ordinary token)")
    prs.add_argument("--seed", type=int, default=0, help="seed of the pair positions")
    prs.add_argument("--out", default=None, help="output directory (default runs/pairs_<pairs>)")
    prs.add_argument("--overwrite", action="store_true", help="replace an existing directory with other settings")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mlm-ppl`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "score":
            return _score(args, sys.stdout)
        if args.command == "sample":
            return _sample(args, sys.stdout)
        if args.command == "diagnose":
            return _diagnose(args, sys.stdout)
        if args.command == "pairs":
            return _pairs(args, sys.stdout)
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


# ---------------------------------------------------------------------- sample / diagnose
_SAMPLE_DEFAULTS = dict(
    model="antiberty", kernel="mh", energy="norm", temperature=1.0, chains=4, draws=100, warmup=0, thin=1,
    seed=0, init="sample", dtype=None, device=None,
)
_KERNEL_FLAGS = {  # flag -> (kernel option, kernels it applies to)
    "scan": ("scan", ("mh", "pseudo-gibbs")),
    "block_size": ("block_size", ("mh",)),
    "proposal_temperature": ("proposal_temperature", ("mh",)),
    "top_k": ("top_k", ("mh", "pseudo-gibbs")),
    "top_p": ("top_p", ("mh",)),
    "burnin": ("burnin", ("pseudo-gibbs",)),
    "iterations": ("iterations", ("mask-predict",)),
}
_SETTINGS = tuple(_SAMPLE_DEFAULTS) + ("template", "length") + tuple(_KERNEL_FLAGS)


def _sample_config(args) -> dict:
    """Settings of a new run from the flags, checked before any work."""
    config = {k: getattr(args, k) for k in _SETTINGS}
    for k, v in _SAMPLE_DEFAULTS.items():
        if config[k] is None:
            config[k] = v
    if config["template"] is None and config["length"] is None:
        raise ValueError("give --template TEXT (mask tokens at the positions to sample) or --length N")
    if not args.out:
        raise ValueError("give --out DIR for the run directory")
    for name in ("chains", "draws"):
        if config[name] < 1:
            raise ValueError(f"--{name} must be >= 1, got {config[name]}")
    if config["warmup"] < 0:
        raise ValueError(f"--warmup must be >= 0, got {config['warmup']}")
    if config["thin"] < 1:
        raise ValueError(f"--thin must be >= 1, got {config['thin']}")
    if config["length"] is not None and config["length"] < 1:
        raise ValueError(f"--length must be >= 1, got {config['length']}")
    for flag, (_, kernels) in _KERNEL_FLAGS.items():
        if config[flag] is not None and config["kernel"] not in kernels:
            raise ValueError(f"--{flag.replace('_', '-')} applies to --kernel {' or '.join(kernels)}, "
                             f"not {config['kernel']}")
    return config


def _build(config: dict):
    """Model, target and kernel of a run configuration."""
    from .inference.runner import make_kernel
    from .models.distribution import MaskedLMDistribution
    from .models.loading import load_mlm

    mlm = load_mlm(config["model"], device=config["device"], dtype=config["dtype"])
    template = config["template"]
    if template is None:
        mask = mlm.vocab[mlm.mask_id]
        template = (mask * config["length"]) if mlm.residue_level else " ".join([mask] * config["length"])
    dist = MaskedLMDistribution(mlm, template, energy=config["energy"], temperature=config["temperature"])
    options = {opt: config[flag] for flag, (opt, _) in _KERNEL_FLAGS.items() if config[flag] is not None}
    if config["kernel"] == "pseudo-gibbs" and "proposal_temperature" in options:
        options["temperature"] = options.pop("proposal_temperature")
    return mlm, dist, make_kernel(config["kernel"], dist, **options)


def _sample(args, out: TextIO) -> int:
    from . import rundir
    from .inference.runner import run_chains

    if args.resume:
        config = rundir.read_config(args.resume)
        given = {k: getattr(args, k) for k in _SETTINGS if getattr(args, k) is not None}
        clash = {k: (v, config.get(k)) for k, v in given.items() if config.get(k) != v}
        if clash:
            detail = ", ".join(f"--{k.replace('_', '-')} {v!r} (run has {c!r})" for k, (v, c) in clash.items())
            raise ValueError(f"--resume {args.resume}: settings differ from the run's: {detail}; "
                             "resume with the run's own settings, or start a new run")
        if args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
            raise ValueError("--out and --resume name different directories; give only --resume DIR")
        directory = args.resume
        checkpoint = rundir.load_checkpoint(directory)
        mlm, dist, kernel = _build(config)
    else:
        config = _sample_config(args)
        mlm, dist, kernel = _build(config)  # loads the model and checks template and options first
        directory = str(rundir.prepare(args.out, config, overwrite=args.overwrite))
        checkpoint = None
    total = config["warmup"] + config["draws"] * config["thin"]
    if checkpoint is not None and checkpoint.step >= total:
        print(f"run in {directory} is already complete; writing its outputs", file=sys.stderr)
    show = args.progress if args.progress is not None else True
    try:
        run = run_chains(
            kernel, config["chains"], config["draws"], warmup_steps=config["warmup"], thin=config["thin"],
            seed=config["seed"], init=config["init"], progress=show,
            on_checkpoint=lambda cp: rundir.save_checkpoint(directory, cp),
            checkpoint_seconds=args.checkpoint_seconds, resume=checkpoint,
        )
    except KeyboardInterrupt:
        print(f"interrupted; checkpoint saved. Continue with: mlm-ppl sample --resume {directory}", file=sys.stderr)
        return 130
    run.attrs.update(model=mlm.name, kernel=config["kernel"], template_text=config["template"] or "",
                     config=json.dumps(config, sort_keys=True))
    return _write_outputs(run, mlm, directory, out)


def _write_outputs(run, mlm, directory: str, out: TextIO) -> int:
    from .rundir import write_outputs

    report, paths = write_outputs(directory, run, mlm)
    out.write(report + "\n\n")
    last = mlm.decode(run.tokens[:, -1])
    out.write("last draw of each chain:\n" + "".join(f"  chain {c}: {s}\n" for c, s in enumerate(last)))
    out.write(f"\nwrote {paths[0]}, {', '.join(os.path.basename(p) for p in paths[1:])} in {directory}\n")
    return 0


def _diagnose(args, out: TextIO) -> int:
    from .diagnostics import _arviz, plot_diagnostics, summary

    path = args.path
    if os.path.isdir(path):
        path = os.path.join(path, "run.nc")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist")
    try:
        idata = _arviz().from_netcdf(path)
        if "tokens" not in idata.posterior or "is_accepted" not in idata.sample_stats:
            raise ValueError("no tokens or is_accepted")
    except Exception as err:  # noqa: BLE001
        raise ValueError(f"{path} is not an mlm-ppl run file ({err})") from None
    out.write(str(summary(idata)) + "\n")
    plots = plot_diagnostics(idata, args.plots or os.path.dirname(os.path.abspath(path)))
    out.write(f"plots: {', '.join(plots)}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


# ---------------------------------------------------------------------- pairs
_PAIRS_FORMAT = "mlm-ppl-pairs-1"


def _pair_data(source: str) -> list[str]:
    """The sequences of ``--data``: a file, or ``germlines:SPECIES:CHAIN[:SEGMENT]``."""
    if source.startswith("germlines:"):
        from .data import germline_sequences

        parts = source.split(":")[1:]
        if not 2 <= len(parts) <= 3:
            raise ValueError(f"--data {source!r}: write germlines:SPECIES:CHAIN[:SEGMENT], e.g. germlines:human:H")
        genes = germline_sequences(*parts)
        return list(genes.values())
    lines = _read_lines(source)
    return lines


def _pairs_directory(args, config: dict):
    """Create the output directory, or reopen it to continue a run with the same settings.

    Returns the directory and the rows already computed (complete pairs only).
    """
    import csv
    from pathlib import Path

    from .evaluation.pairs import ROW_FIELDS
    from .rundir import _atomic_write_text

    path = Path(args.out or f"runs/pairs_{args.pairs}")
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a file; give a directory")
    rows: list[dict] = []
    cfg_path, csv_path = path / "config.json", path / "pairs.csv"
    if path.is_dir() and any(path.iterdir()) and not args.overwrite:
        try:
            old = json.loads(cfg_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{str(path)!r} exists and is not an mlm-ppl pairs run; use another --out") from None
        if old != config:
            changed = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise ValueError(f"{str(path)!r} holds a pairs run with other settings ({', '.join(changed)}); "
                             "use --overwrite to replace it or another --out")
        if csv_path.exists():
            with open(csv_path, newline="") as fh:
                rows = list(csv.DictReader(fh))
        per_pair = len(config["methods"]) + 1
        rows = [r for r in rows if None not in r and None not in r.values()]  # a row cut off mid-write has gaps
        counts: dict[str, int] = {}
        for r in rows:
            counts[r["pair"]] = counts.get(r["pair"], 0) + 1
        rows = [r for r in rows if counts[r["pair"]] == per_pair]
    else:
        path.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "pairs.csv", "summary.csv", "summary.txt", "pairs.png"):
            (path / name).unlink(missing_ok=True)
        _atomic_write_text(cfg_path, json.dumps(config, indent=1, sort_keys=True))
    _write_csv(csv_path, ROW_FIELDS, rows)  # drops a pair cut off mid-write
    return path, rows


def _write_csv(path, fields, rows) -> None:
    """Write a CSV atomically (a temporary file, then a rename)."""
    import csv

    from .rundir import _atomic_write_text

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    _atomic_write_text(path, buffer.getvalue())


def _pairs(args, out: TextIO) -> int:
    import csv

    from .evaluation.pairs import (
        ROW_FIELDS, draw_pairs, evaluate_pairs, format_differences, format_summary, paired_differences,
        parse_methods, plot_pairs, summarize_pairs,
    )
    from .rundir import _atomic_write_text

    methods = [label for label, _, _ in parse_methods(args.methods)]
    if args.support is not None and args.support < 1:
        raise ValueError(f"--support must be >= 1, got {args.support}")
    sequences = _pair_data(args.data)
    mlm = _load(args)
    if args.support is not None and args.support > int(mlm.ordinary_mask.sum()):
        raise ValueError(f"--support {args.support} exceeds the {int(mlm.ordinary_mask.sum())} ordinary tokens")
    pairs = draw_pairs(mlm, sequences, args.pairs, args.n, args.seed)  # validates the sequences
    config = {"format": _PAIRS_FORMAT, "model": args.model, "dtype": args.dtype, "data": args.data,
              "pairs": args.pairs, "n": args.n, "methods": methods, "support": args.support, "seed": args.seed}
    path, rows = _pairs_directory(args, config)
    done = {int(r["pair"]) for r in rows}
    t0 = time.perf_counter()
    with _bar(len(pairs), args, "pair") as bar, open(path / "pairs.csv", "a", newline="") as fh:
        bar.update(len(done))
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS, lineterminator="\n")
        for pair_rows in evaluate_pairs(mlm, sequences, pairs, methods, support=args.support, skip=done):
            writer.writerows(pair_rows)
            fh.flush()
            rows.extend(pair_rows)
            bar.update(1)
    elapsed = time.perf_counter() - t0
    summary = summarize_pairs(rows)
    _write_csv(path / "summary.csv", ("method", "metric", "mean", "se", "n"), summary)
    ag = [r for r in rows if r["method"] == "ag"]
    compute = sum(float(r["seconds"]) for r in rows if r["method"] == "mlm")
    lines = [
        f"model {mlm.name}  |  data {args.data} ({len(sequences)} sequences)  |  {len(pairs)} {args.pairs} pairs, "
        f"seed {args.seed}  |  support {'all ordinary tokens' if args.support is None else f'K={args.support}'}",
        "",
        format_summary(summary),
        "",
        "pair_ppl, unary_ppl: exp(mean NLL) with delta-method SE; kl_fwd = KL(MLM || joint), kl_rev = KL(joint || MLM), "
        "jsd: conditionals at the observed value (_gold) or averaged over all values (_all); "
        "compatibility: Arnold-Press score of the MLM's conditionals (0 = compatible).",
    ]
    if "ag" in methods:
        lines += ["", format_differences(paired_differences(rows, "ag"))]
    if ag:
        iters = sorted(int(r["iterations"]) for r in ag)
        conv = sum(str(r["converged"]) == "True" for r in ag)
        lines.append(f"ag: converged on {conv}/{len(ag)} pairs, median {iters[len(iters) // 2]} iterations, "
                     f"max {iters[-1]}")
    lines.append(f"compute {compute:.1f} s over {len(pairs)} pairs ({compute / len(pairs):.2f} s/pair); "
                 f"this invocation {elapsed:.1f} s")
    report = "\n".join(lines)
    _atomic_write_text(path / "summary.txt", report + "\n")
    plot_pairs(summary, str(path / "pairs.png"),
               title=f"{mlm.name}: {len(pairs)} {args.pairs} pairs from {args.data}")
    out.write(report + "\n")
    out.write(f"\nwrote {path / 'pairs.csv'}, {path / 'summary.csv'}, {path / 'summary.txt'}, {path / 'pairs.png'}\n")
    return 0
