"""Torch threads on the main job: 1 against 2, on an idle machine and beside a busy core.

The workload is the main job's exact evaluation (AntiBERTy, the 120-residue heavy chain with its
13-residue CDR-H3 masked, ``E_norm`` in float32) of ``--states`` states, each 120 masked copies:
what one outer step of the main job pays per chain that moved. Each configuration runs
``--repeats`` times, interleaved (idle 1, idle 2, busy 1, busy 2, then again), and the table gives
the median seconds and the ratio to idle with 1 thread. "Busy": another process spins one core
(a pure Python loop) for the duration. The energies of every configuration are compared bit for
bit: a run's draws do not depend on its thread count where they agree.

    python benchmarks/threads.py --states 8 --repeats 5

Run it alone (a long run or a test beside it is a busy core of its own).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sampling import cdrh3_task

SPIN = "x = 0\nwhile True:\n    x += 1\n"


def main() -> None:
    warnings.filterwarnings("ignore", category=UserWarning)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--starts", default="docs/converge/run", help="a run of the main job whose draws are scored")
    args = parser.parse_args()
    _, dist, states, _ = cdrh3_task(chains=args.states, starts=args.starts)
    times: dict[tuple[str, int], list[float]] = {}
    energies: dict[tuple[str, int], torch.Tensor] = {}
    for _ in range(args.repeats):
        for load in ("idle", "busy"):
            spin = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "busy" else None
            try:
                time.sleep(0.5 if spin else 0.0)
                for threads in (1, 2):
                    torch.set_num_threads(threads)
                    t0 = time.perf_counter()
                    energy = dist.evaluate(states).energy
                    times.setdefault((load, threads), []).append(time.perf_counter() - t0)
                    energies[(load, threads)] = energy
            finally:
                if spin is not None:
                    spin.kill()
                    spin.wait()
    base = statistics.median(times[("idle", 1)])
    copies = dist.scored_positions.numel()
    print(f"{args.states} states x {copies} copies, {args.repeats} repeats, {os.cpu_count()} CPUs")
    print("| machine | threads | median seconds | min | max | against idle, 1 thread |")
    print("|---|---:|---:|---:|---:|---:|")
    for (load, threads), ts in times.items():
        m = statistics.median(ts)
        print(f"| {load} | {threads} | {m:.2f} | {min(ts):.2f} | {max(ts):.2f} | {m / base:.2f} |")
    first = next(iter(energies.values()))
    same = all(torch.equal(first, e) for e in energies.values())
    diff = max(float((first - e).abs().max()) for e in energies.values())
    print(f"energies bit for bit equal across configurations: {same} (largest difference {diff:.3g})")


if __name__ == "__main__":
    main()
