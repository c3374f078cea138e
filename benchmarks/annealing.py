"""Mode seeking on the main job: the best energy reached per exact evaluation, annealed MH against
annealed surrogate-MH (issue 46, item 4).

The main job's task (AntiBERTy, the 120-residue heavy chain with its CDR-H3 of 13 residues
masked, ``E_norm`` in float32; ``bench_sampling.cdrh3_task``), ``--chains`` chains from the same MLM
fill-ins, each variant annealed geometrically from tau 1 to 0.05 over its own ``steps``:

* ``mh-N``: MetropolisHastings, N steps (each one exact evaluation per chain);
* ``surrogate-N``: the main job's surrogate-MH (frozen bfloat16 surrogate, 26 inner steps, unmask
  proposals at 0.5), N outer steps, each chain stopping cooling where its outer acceptance falls
  below 0.2 (the default);
* ``surrogate-whole-N``: the same with ``anneal_floor=0``, the whole schedule (what issue 46 saw).

Each appends one JSON line per step to ``<variant>.jsonl`` in ``--log-dir`` (exact evaluations so
far: the float32 target's masked copies / 120; seconds; each chain's energy, tau and whether it
moved); ``--report DIR`` prints the table: best energy (min over chains and steps) after 40, 80,
160 exact evaluations and at the end, the minutes taken, the share of steps in the last quarter
that changed a chain's state, and the taus the chains ended at.

    python benchmarks/annealing.py --variants surrogate-40,surrogate-whole-40 --log-dir /tmp/anneal
    python benchmarks/annealing.py --report /tmp/anneal

Run the variants side by side one thread each (``--threads 1``), or one after another alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sampling import Counter, cdrh3_task

from mlm_ppl.inference import ChainStreams, GeometricAnnealing, MetropolisHastings, SurrogateMH

MAIN = dict(surrogate_dtype="bfloat16", surrogate_frame="frozen", inner_steps=26, p_unmask=0.5)
BUDGETS = (40, 80, 160)  # exact evaluations (all chains) at which the report gives the best energy


def kernel_of(dist, variant):
    """The kernel a variant's name describes, annealed 1 -> 0.05 over its steps."""
    kind, steps = variant.rsplit("-", 1)
    schedule = GeometricAnnealing(1.0, 0.05, int(steps) - 1)
    if kind == "mh":
        return MetropolisHastings(dist, temperature_schedule=schedule), int(steps)
    if kind in ("surrogate", "surrogate-whole"):
        floor = {"anneal_floor": 0.0} if kind == "surrogate-whole" else {}
        return SurrogateMH(dist, **MAIN, temperature_schedule=schedule, **floor), int(steps)
    raise SystemExit(f"unknown variant {variant!r}: mh-N, surrogate-N or surrogate-whole-N")


def taus_of(kernel, state):
    """Each chain's tau at its next step (MH: the schedule's)."""
    if isinstance(kernel, SurrogateMH):
        return kernel.taus(state).tolist()
    return [float(kernel.options.temperature_schedule(state.step))] * state.tokens.shape[0]


def run(args):
    torch.set_num_threads(args.threads)
    mlm, dist, start, _ = cdrh3_task(chains=args.chains)
    exact = Counter.on(mlm)  # the float32 target's model: only exact evaluations run on it
    per_evaluation = int(dist.scored_positions.numel())
    os.makedirs(args.log_dir, exist_ok=True)
    for variant in args.variants:
        kernel, steps = kernel_of(dist, variant)
        exact.reset()
        t0 = time.perf_counter()
        state = kernel.init(start)
        streams = ChainStreams(1, args.chains)
        path = os.path.join(args.log_dir, f"{variant}.jsonl")
        print(f"# {variant}: {kernel!r}, {steps} steps -> {path}", flush=True)
        with open(path, "w") as log:
            log.write(json.dumps(dict(step=0, seconds=time.perf_counter() - t0, energy=state.energy.tolist())) + "\n")
            for step in range(1, steps + 1):
                tau = taus_of(kernel, state)
                new, info = kernel.step(state, streams)
                moved = (new.tokens != state.tokens).any(-1)
                state = new
                line = dict(
                    step=step,
                    seconds=time.perf_counter() - t0,
                    evaluations=exact.rows / per_evaluation,
                    energy=state.energy.tolist(),
                    tau=tau,
                    moved=moved.tolist(),
                    acceptance=info.acceptance_rate.tolist(),
                )
                log.write(json.dumps(line) + "\n")
                log.flush()
        end = kernel.annealing_end(state) if isinstance(kernel, SurrogateMH) else {}
        best = min(min(json.loads(x)["energy"]) for x in open(path))
        print(f"# {variant}: done, best E_norm {best:.3f}, {end}", flush=True)


def report(log_dir):
    rows = []
    for name in sorted(os.listdir(log_dir)):
        if not name.endswith(".jsonl"):
            continue
        lines = [json.loads(x) for x in open(os.path.join(log_dir, name))]
        best, at = float("inf"), {}
        for line in lines:
            best = min(best, min(line["energy"]))
            for b in BUDGETS:
                if line.get("evaluations", 0) <= b:
                    at[b] = best
        steps = lines[1:]
        quarter = steps[-max(1, len(steps) // 4) :]
        moved = sum(sum(line["moved"]) for line in quarter) / sum(len(line["moved"]) for line in quarter)
        reached = {b: (f"{at[b]:.2f}" if b in at and steps[-1]["evaluations"] >= b else "-") for b in BUDGETS}
        rows.append(
            (
                name[: -len(".jsonl")],
                len(steps),
                f"{steps[-1]['evaluations']:.0f}",
                f"{steps[-1]['seconds'] / 60:.1f}",
                *reached.values(),
                f"{best:.2f}",
                f"{moved:.2f}",
                " ".join(f"{t:.2g}" for t in steps[-1]["tau"]),
            )
        )
    head = ("variant", "steps", "evaluations", "minutes", *(f"best@{b}" for b in BUDGETS), "best", "moved", "taus")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(v) for v in row) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=lambda s: s.split(","), default=["mh-40", "surrogate-40"])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log-dir", default="/tmp/bench_annealing")
    parser.add_argument("--report", metavar="DIR", help="print the table of the logs in DIR; run nothing")
    args = parser.parse_args()
    if args.report:
        report(args.report)
    else:
        run(args)


if __name__ == "__main__":
    main()
