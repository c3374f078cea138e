"""PLL scoring throughput on AntiBERTy, side by side with baselines.

Scores human heavy-chain germline V genes (from anarci) with:

  library        mlm_ppl MaskedLM.score (chunked masked copies, head only at the masked position)
  naive-loop     one full model forward per masked position
  pure-forward   the full HF forward over the same masked copies in the same chunks, no scoring
                 (what the machine can do; the library's overhead is measured against it)
  pure-encoder   the encoder alone over the same chunks (the library skips the head elsewhere)
  minicons       minicons.scorer.MaskedLMScorer, when installed (values compared to 1e-4); it runs
                 in its own interpreter (--minicons-python) and only its scoring call is timed
  bf16           the library with dtype=torch.bfloat16 (approximate; max error reported)
  compile        the library with torch.compile (after a warm-up call; error reported)

Timings on a shared 2-core machine are noisy, so the sequences are split into rounds and
every method runs on each round in turn; ratios are medians over rounds.

    python benchmarks/bench_score.py [--n 32] [--rounds 4] [--skip naive-loop,compile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import torch

from mlm_ppl import load_mlm
from mlm_ppl.data import germline_sequences


def _pure(mlm, seqs, encoder_only: bool) -> None:
    """Forward passes over exactly the library's masked copies and chunks, nothing else."""
    enc = mlm.encode(seqs)
    rows, query = enc.scorable.nonzero(as_tuple=True)
    lengths = enc.lengths[rows]
    order = torch.argsort(lengths, stable=True)
    with torch.inference_mode():
        for chunk in mlm.chunks(lengths[order].tolist()):
            idx = order[chunk]
            T = int(lengths[idx].max())
            ids = enc.input_ids[rows[idx], :T].clone()
            ids[torch.arange(len(idx)), query[idx]] = mlm.mask_id
            attn = enc.attention_mask[rows[idx], :T]
            if encoder_only:
                mlm.encoder(input_ids=ids, attention_mask=attn)
            else:
                mlm.model(input_ids=ids, attention_mask=attn)


def _naive(mlm, seqs) -> torch.Tensor:
    out = []
    with torch.inference_mode():
        for s in seqs:
            ids = mlm.encode([s]).input_ids[0]
            total = 0.0
            for t in range(1, len(ids) - 1):
                x = ids.clone()
                x[t] = mlm.mask_id
                logits = mlm.model(input_ids=x[None]).logits[0, t]
                total -= float(torch.log_softmax(logits, -1)[ids[t]])
            out.append(total)
    return torch.tensor(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=32, help="number of germline genes (default 32)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds the genes are split into (default 4)")
    ap.add_argument("--skip", default="", help="comma-separated methods to skip")
    ap.add_argument(
        "--minicons-python",
        default=sys.executable,
        help="python of an environment with minicons (0.3.x needs transformers<5)",
    )
    ap.add_argument("--json", default=None, help="also write the raw figures to this file")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))

    genes = germline_sequences("human", "H", "V")
    seqs = list(genes.values())[: args.n]
    rounds = [seqs[i :: args.rounds] for i in range(args.rounds)]
    n_copies = sum(len(s) for s in seqs)
    print(
        f"# {len(seqs)} human IGHV genes, {n_copies} masked copies, lengths {min(map(len, seqs))}-"
        f"{max(map(len, seqs))}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{platform.processor() or platform.machine()}",
        flush=True,
    )

    mlm = load_mlm("antiberty")
    methods: dict[str, callable] = {
        "library": lambda s: mlm.score(s),
        "naive-loop": lambda s: _naive(mlm, s),
        "pure-forward": lambda s: _pure(mlm, s, encoder_only=False),
        "pure-encoder": lambda s: _pure(mlm, s, encoder_only=True),
    }
    minicons_time: list[float] = []
    if "minicons" not in skip:

        def run_minicons(batch):
            worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_minicons_worker.py")
            env = dict(os.environ, BENCH_THREADS=str(torch.get_num_threads()))
            done = subprocess.run(
                [args.minicons_python, worker], input=json.dumps(batch), env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            minicons_time.append(result["seconds"])  # scoring only: not the worker's start and load
            return torch.tensor(result["energies"])

        try:
            run_minicons(seqs[:1])
            minicons_time.clear()
            methods["minicons"] = run_minicons
        except (RuntimeError, OSError) as err:
            print(f"# minicons unavailable with {args.minicons_python}: {err}", flush=True)
    bf16 = load_mlm("antiberty", dtype=torch.bfloat16)
    methods["bf16"] = lambda s: bf16.score(s)
    if "compile" not in skip:
        comp = load_mlm("antiberty", compile=True)
        t0 = time.perf_counter()
        comp.score(seqs[:2])  # compile (dynamic shapes) before timing
        print(f"# torch.compile warm-up: {time.perf_counter() - t0:.1f} s", flush=True)
        methods["compile"] = lambda s: comp.score(s)
    methods = {k: v for k, v in methods.items() if k not in skip}

    mlm.score(seqs[:1])  # warm caches
    times: dict[str, list[float]] = {k: [] for k in methods}
    values: dict[str, list[torch.Tensor]] = {k: [] for k in methods}
    for r, batch in enumerate(rounds):
        for name, fn in methods.items():
            t0 = time.perf_counter()
            out = fn(batch)
            times[name].append(minicons_time[-1] if name == "minicons" else time.perf_counter() - t0)
            values[name].append(out if isinstance(out, torch.Tensor) else torch.tensor([]))
        print(f"# round {r + 1}/{len(rounds)}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()), flush=True)

    ref = torch.cat(values["library"])
    print()
    print(
        "| method | total s | sequences/s | masked copies/s | time vs pure-forward (median over rounds) "
        "| time vs library | max abs error vs library fp32 (nats) |"
    )
    print("|---|---|---|---|---|---|---|")
    results = {}
    for name in methods:
        total = sum(times[name])
        vs_pure = (
            statistics.median(a / b for a, b in zip(times[name], times["pure-forward"]))
            if "pure-forward" in times
            else float("nan")
        )
        vs_lib = statistics.median(a / b for a, b in zip(times[name], times["library"]))
        vals = torch.cat(values[name])
        err = float((vals - ref).abs().max()) if vals.numel() == ref.numel() else float("nan")
        err_s = "-" if err != err else f"{err:.2e}"
        results[name] = dict(
            total_s=total,
            seq_per_s=len(seqs) / total,
            copies_per_s=n_copies / total,
            vs_pure_forward=vs_pure,
            vs_library=vs_lib,
            max_abs_err=err,
        )
        print(
            f"| {name} | {total:.1f} | {len(seqs) / total:.2f} | {n_copies / total:.1f} | {vs_pure:.2f}x "
            f"| {vs_lib:.2f}x | {err_s} |"
        )
    if "bf16" in values:
        rel = (torch.cat(values["bf16"]) - ref).abs() / torch.tensor([len(s) for r in rounds for s in r])
        print(f"\nbf16 error per residue: max {float(rel.max()):.4f} nat")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                dict(n=len(seqs), copies=n_copies, threads=torch.get_num_threads(), results=results), fh, indent=1
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
