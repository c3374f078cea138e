"""One process against 1 and 2 Ray workers on the main job's task (docs/scaling.md).

AntiBERTy, the 120-residue heavy chain with its 13-residue CDR-H3 masked, E_norm, MH with
4 chains and a few draws: the same run (same seed, so the same draws, checked) in one process,
on 1 Ray worker and on 2. Wall time includes everything a user waits for: Ray's start, each
worker's imports and model load, the sampling and the merge. Run it where Ray may only use
loopback (as the tests do):

    unshare --net sh -c 'ip link set lo up && exec python benchmarks/bench_ray.py --draws 6'
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from mlm_ppl import load_mlm, sample
from mlm_ppl.data import example_heavy_chain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--draws", type=int, default=6)
    ap.add_argument("--kernel", default="mh")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    mlm = load_mlm("antiberty")
    seq, cdr3 = example_heavy_chain()
    template = seq[: cdr3.start] + "[MASK]" * (cdr3.stop - cdr3.start) + seq[cdr3.stop :]
    opts = dict(kernel=args.kernel, num_chains=args.chains, num_samples=args.draws, seed=0)
    rows = {}
    reference = None
    for label, extra in (
        ("one process", {}),
        ("Ray, 1 worker", dict(workers=1)),
        ("Ray, 2 workers", dict(workers=2)),
    ):
        t0 = time.perf_counter()
        run = sample(mlm, template, **opts, **extra)
        seconds = time.perf_counter() - t0
        if reference is None:
            reference = run
        same = torch.equal(run.tokens, reference.tokens)
        rows[label] = dict(seconds=round(seconds, 1), same_draws=same)
        print(f"{label:16s} {seconds:7.1f} s   same draws as one process: {same}", flush=True)
    base = rows["one process"]["seconds"]
    for row in rows.values():
        row["ratio_to_one_process"] = round(row["seconds"] / base, 2)
    print(json.dumps(rows, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(settings=vars(args), threads=torch.get_num_threads(), rows=rows), fh, indent=1)


if __name__ == "__main__":
    main()
