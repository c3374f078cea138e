"""Restricted against unrestricted proposals on a constrained AntiBERTy design, side by side.

The task of notebook 04: AntiBERTy, the 120-residue heavy chain of ``mlm_ppl.data.example_heavy_chain``
with its CDR-H3 (13 positions) masked, E_norm in float32, and a constraint spec of every antibody
liability (docs/constraints.md) and a hydropathy expert (mean Kyte-Doolittle over the loop,
weight -1: hydrophilic loops preferred). Two targets with the same density:

* **restricted**: ``spec.constrain(dist)``, a ``ConstraintTarget``: proposals drawn within the
  alphabets, and a proposal that breaks a rule rejected before its forward pass;
* **unrestricted**: ``ConstrainedTarget(dist, bound.log_factor)``, the same log-factor as an
  opaque callable: proposals over every ordinary token, a rule-breaking one scored by a full
  forward pass and then rejected (``-inf``), as every kernel did before issue 23.

For each kernel (``--kernels``: ``mh``, ``surrogate-mh`` with the bfloat16 surrogate of
``make demo``), the two targets run for ``--minutes`` at the same time in two processes of one
thread each, from the same feasible start (4 chains). Each reports: steps, outer acceptance,
accepted single-site moves, masked copies per accepted move (through the model; for surrogate-MH
its own count, inner copies on the surrogate included), draws that break a rule (must be 0),
whether the two chains went through the same states (with no ``Allowed`` rule in the spec the
proposals are the same and only the rejected rule-breakers' passes differ), and the bulk ESS of
``lp`` and of the hydropathy per minute (ArviZ, over the 4 chains; rough from few draws).

    python benchmarks/bench_constraints.py [--minutes 10] [--kernels mh,surrogate-mh] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from bench_sampling import Counter, ess

from mlm_ppl import ConstraintSpec, MaskedLMDistribution, load_mlm
from mlm_ppl import constraints as c
from mlm_ppl.data import example_heavy_chain
from mlm_ppl.inference import ChainStreams, MetropolisHastings, SurrogateMH, fill_template, step_stats
from mlm_ppl.inference.starts import repair_start
from mlm_ppl.models import ConstrainedTarget

KERNELS = {
    "mh": lambda target: MetropolisHastings(target),
    "surrogate-mh": lambda target: SurrogateMH(target, surrogate_dtype="bfloat16"),
}
SPEC = ConstraintSpec(liabilities=True, experts=[c.hydropathy(weight=-1.0)])


def task(chains: int):
    """The model, the two targets and their common feasible start (an MLM fill-in, seed 0, repaired)."""
    mlm = load_mlm("antiberty")
    seq, cdr3 = example_heavy_chain()
    dist = MaskedLMDistribution(mlm, seq[: cdr3.start] + "[MASK]" * (cdr3.stop - cdr3.start) + seq[cdr3.stop :])
    restricted = SPEC.constrain(dist)
    unrestricted = ConstrainedTarget(dist, restricted.constraints.log_factor)
    streams = ChainStreams(0, chains)
    start = repair_start(restricted, fill_template(restricted, chains, streams, "sample"), streams)
    return mlm, {"restricted": restricted, "unrestricted": unrestricted}, start, restricted.constraints


def worker(args) -> None:
    """One side: one thread, one kernel on one target, for ``--minutes``."""
    torch.set_num_threads(1)
    kernel_name, target_name = args.worker.split("/")
    mlm, targets, start, bound = task(args.chains)
    kernel = KERNELS[kernel_name](targets[target_name])
    counter = Counter(mlm)
    streams = ChainStreams(1, start.shape[0])
    state = kernel.init(start)
    counter.reset()  # the start's energies are not the chain's moves: count from the first step
    lp, hydro, path = [], [], []
    steps = n_moves = violating = copies = 0
    accepted = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 60 * args.minutes:
        state, info = kernel.step(state, streams)
        stats = step_stats(info)
        steps += 1
        n_moves += int(stats["n_moves"].sum())
        accepted += float(stats["is_accepted"].float().mean())
        violating += int((~bound.feasible(state.tokens)).sum())
        # surrogate-MH counts its own copies (inner, on its bfloat16 copy of the model, and the correction)
        copies += int(stats["masked_copies"].sum()) if "masked_copies" in stats else 0
        path.append(hash(tuple(state.tokens.reshape(-1).tolist())))
        lp.append(stats["lp"].double().numpy())
        hydro.append(bound.expert_values(state.tokens)["hydropathy"].numpy())
    wall = time.perf_counter() - t0
    result = dict(
        seconds=wall,
        steps=steps,
        acceptance=accepted / max(steps, 1),
        n_moves=n_moves,
        copies=copies if "masked_copies" in kernel.stat_names() else counter.rows,
        violating=violating,
        path=path,
        lp=np.array(lp).T.tolist(),  # (C, steps)
        hydropathy=np.array(hydro).T.tolist(),
    )
    with open(args.worker_out, "w") as f:
        json.dump(result, f)


def side_by_side(kernel_name: str, args) -> dict[str, dict]:
    """Both targets under ``kernel_name`` at the same time, one process and one thread each."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for target_name in ("restricted", "unrestricted"):
            path = os.path.join(tmp, f"{target_name}.json")
            cmd = [sys.executable, __file__, "--worker", f"{kernel_name}/{target_name}", "--worker-out", path]
            cmd += ["--minutes", str(args.minutes), "--chains", str(args.chains)]
            env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            procs[target_name] = (subprocess.Popen(cmd, env=env), path)
        for target_name, (proc, path) in procs.items():
            if proc.wait() != 0:
                raise SystemExit(f"worker {kernel_name}/{target_name} failed")
            with open(path) as f:
                out[target_name] = json.load(f)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="minutes per side-by-side pair (default 10)")
    ap.add_argument("--kernels", default="mh,surrogate-mh", help="comma-separated: mh, surrogate-mh")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    kernels = args.kernels.split(",")
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        raise SystemExit(f"unknown kernel {unknown[0]!r}; choose from {', '.join(KERNELS)}")
    print(
        f"# Restricted vs unrestricted proposals: AntiBERTy, CDR-H3 (13 free of 120), E_norm fp32, every "
        f"liability + hydropathy (weight -1), {args.chains} chains, {args.minutes:g} minutes per side, "
        f"one thread each, torch {torch.__version__}\n"
    )
    results = {}
    for kernel_name in kernels:
        pair = side_by_side(kernel_name, args)
        results[kernel_name] = pair
        print(f"## {kernel_name}\n")
        print(
            "| proposals | steps | acceptance | accepted moves | masked copies | copies per accepted move "
            "| violating draws | ESS(lp)/min | ESS(hydropathy)/min |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        a, b = pair["restricted"].pop("path"), pair["unrestricted"].pop("path")
        common = min(len(a), len(b))
        for target_name, r in pair.items():
            minutes = r["seconds"] / 60
            r["ess_lp"], r["ess_hydropathy"] = ess(r.pop("lp")), ess(r.pop("hydropathy"))
            per_move = r["copies"] / r["n_moves"] if r["n_moves"] else float("inf")
            print(
                f"| {target_name} | {r['steps']} | {r['acceptance']:.3f} | {r['n_moves']} | {r['copies']} | "
                f"{per_move:.1f} | {r['violating']} | {r['ess_lp'] / minutes:.2f} | "
                f"{r['ess_hydropathy'] / minutes:.2f} |",
                flush=True,
            )
        same = "the same" if a[:common] == b[:common] else "different"
        print(f"\nOver their first {common} steps the two chains' states were {same} (same seed and start).\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(results=results, chains=args.chains, minutes=args.minutes), f, indent=1)


if __name__ == "__main__":
    main()
