"""Shared plumbing of the reproduction scripts: flags, heavy-chain templates, CSV and timing."""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from mlm_ppl import load_mlm
from mlm_ppl.data import HEAVY_CHAINS, heavy_chain


def parser(doc: str, out: str) -> argparse.ArgumentParser:
    """Flags every experiment takes: --model, --out, --seed, and one of --smoke / --full."""
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc
    )
    p.add_argument("--model", default="antiberty", help="'antiberty' (default) or a model directory")
    p.add_argument("--out", default=out, help=f"output directory (default {out})")
    p.add_argument("--seed", type=int, default=0)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the script runs (CI)")
    size.add_argument("--full", action="store_true", help="larger runs, whole chains (for a GPU)")
    p.add_argument("--device", default=None, help="cpu (default) or cuda")
    p.add_argument(
        "--dtype",
        default=None,
        help="float32 or bfloat16 (default: bfloat16, float32 with --full); MH is exact for the "
        "energy of the model in the dtype it runs",
    )
    return p


def size(args, smoke: dict, default: dict, full: dict) -> dict:
    """The settings of the chosen size."""
    return dict(smoke if args.smoke else full if args.full else default)


def setup(args, settings: dict):
    """Load the model, create the output directory, write config.json; returns (mlm, out)."""
    torch.manual_seed(args.seed)  # nothing should use the global RNG; this makes sure it is fixed anyway
    dtype = args.dtype or ("float32" if args.full else "bfloat16")
    settings = {**settings, "dtype": dtype}
    mlm = load_mlm(args.model, device=args.device, dtype=dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "model": args.model,
        "seed": args.seed,
        "size": "smoke" if args.smoke else "full" if args.full else "default",
        **settings,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "device": str(mlm.device),
    }
    (out / "config.json").write_text(json.dumps(config, indent=1, default=str))
    return mlm, out


def cdr3_tasks(n: int) -> list[dict]:
    """The first ``n`` heavy chains of :data:`mlm_ppl.data.HEAVY_CHAINS`, whole, with their CDR-H3 masked.

    Each task has ``name``, ``sequence``, ``template`` (CDR-H3 as ``[MASK]``), ``cdr3`` (the
    original) and ``cdr3_slice``.
    """
    if not 1 <= n <= len(HEAVY_CHAINS):
        raise ValueError(f"between 1 and {len(HEAVY_CHAINS)} heavy chains, got {n}")
    tasks = []
    for v, body, j in HEAVY_CHAINS[:n]:
        seq, sl = heavy_chain(v, body, j)
        tasks.append(
            {
                "name": f"{v}/{j}",
                "sequence": seq,
                "cdr3": seq[sl],
                "cdr3_slice": sl,
                "template": seq[: sl.start] + "[MASK]" * (sl.stop - sl.start) + seq[sl.stop :],
            }
        )
    return tasks


def reference_cdr3s() -> list[str]:
    """The CDR-H3 of every chain in :data:`mlm_ppl.data.HEAVY_CHAINS`: the BLEU references."""
    return [task["cdr3"] for task in cdr3_tasks(len(HEAVY_CHAINS))]


def write_csv(path: Path, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


class Clock:
    """Wall time of the work inside ``with clock:`` blocks, summed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self):
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds += time.perf_counter() - self._t
        return False


def decoded(mlm, tokens: torch.Tensor) -> list[str]:
    """Residue strings of ``(N, L)`` token ids (special tokens dropped)."""
    return [s.replace(" ", "") for s in mlm.decode(tokens)]


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
