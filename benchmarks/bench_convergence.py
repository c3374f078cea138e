"""Time to convergence on the main job: effective draws per exact evaluation, kernel by kernel.

The main job's task (AntiBERTy, the 120-residue heavy chain with its CDR-H3 of 13 residues
masked, ``E_norm`` in float32; ``bench_sampling.cdrh3_task``). Every variant starts its
``--chains`` chains from the same draws of a converged run of the job (``--starts``: the second
half of its draws, pooled, evenly spaced), so that the effective sample size measures mixing at
stationarity, not the way there. Two parts:

* ``mixing`` (the default): each variant runs alone (``--threads``, default 2) for ``--minutes`` from those
  starts with the same seed, one after another. Each appends one JSON line per outer step to
  ``<variant>.jsonl`` in ``--log-dir`` (flushed at once: a killed run keeps what it measured;
  ``--from-logs DIR`` reports such logs without running anything). Per variant: outer steps, wall
  minutes, exact evaluations (the float32 target's masked copies / 120: one evaluation of one
  state), exact evaluations per hour, outer acceptance, bulk ESS (ArviZ) and R-hat of ``lp`` and of
  the Hamming distance to the true CDR-H3 over all chains, effective draws per exact evaluation of
  each, the hours to ESS 400 at that rate (the slower of the two), and the rate as a share of the
  bound (about 0.78 effective draws per exact evaluation: docs/performance.md, "The bound"); and how
  far the chains' loops have moved from their starts (mean Hamming distance) after 2, 5, 10, 20 and
  40 minutes, a measure of mixing less noisy than ESS over a few tens of steps.
* ``fidelity``: for each surrogate, ``E - E~`` over ``--draws`` of the run's draws (the second
  half, pooled, evenly spaced): its standard deviation ``s``, the outer acceptance an inner chain
  mixed under the surrogate would give, ``2 Phi(-s / sqrt 2)``, and that acceptance's bound on
  effective draws per exact evaluation, ``a / (2 - a)``.

    python benchmarks/bench_convergence.py --starts docs/converge/run --chains 8 --minutes 20 \\
        --variants mh,whole-52,frozen-208,main --json table.json
    python benchmarks/bench_convergence.py --parts fidelity --starts docs/converge/run --draws 40
    python benchmarks/bench_convergence.py --from-logs /tmp/bench_conv_XXXX

* ``--library LOOPS`` (issue 45): ``main-library`` is the main job with a fixed library of deep
  states mixed into its unmask proposals; every variant's log then says which library loop each
  chain holds, and the report gives the share of draws in the library (MCSE), entries and exits.
  ``--start-loop LOOP`` starts every chain in one loop (how long do chains stay in a deep state?);
  ``--parts library`` gives the inner chain's acceptance of a library proposal from each start.

Timings on a shared 2-core machine are noisy; the variants run one after another, each alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sampling import Counter, cdrh3_task, ess

from mlm_ppl.inference import ChainStreams, MetropolisHastings, SurrogateMH

MARKS = (2, 5, 10, 20, 40)  # minutes at which the report gives how far the chains have moved from their starts
BOUND = 0.78  # effective draws per exact evaluation of an independence sampler with acceptance 0.88
SURROGATE = dict(surrogate_dtype="bfloat16")
VARIANTS = {
    "mh": None,  # plain MH: every proposal that changes the state is one exact evaluation
    "whole-52": dict(SURROGATE, inner_steps=52),  # the main job before issue 34
    "frozen-208": dict(SURROGATE, surrogate_frame="frozen", inner_steps=208),
    "main": dict(SURROGATE, surrogate_frame="frozen", inner_steps=26, p_unmask=0.5),  # the main job now
    "main-52": dict(SURROGATE, surrogate_frame="frozen", inner_steps=52, p_unmask=0.5),
    "main-104": dict(SURROGATE, surrogate_frame="frozen", inner_steps=104, p_unmask=0.5),
    # the main job with a fixed library of deep states mixed into its unmask proposals (--library; issue 45)
    "main-library": dict(SURROGATE, surrogate_frame="frozen", inner_steps=26, p_unmask=0.5, library=None),
    "single-416": dict(SURROGATE, surrogate_frame="frozen", inner_steps=416),  # single sites only
    # the main job's inner chain as 4 replicas of the surrogate at temperatures 1, 1.25, 1.56, 1.95
    "replicas-4": dict(
        SURROGATE, surrogate_frame="frozen", inner_steps=26, p_unmask=0.5, replicas=4, replica_spacing=1.25, p_swap=0.3
    ),
}
FIDELITY = {
    "whole, bfloat16": dict(SURROGATE),
    "frozen, bfloat16": dict(SURROGATE, surrogate_frame="frozen"),
    "frozen, float32": dict(surrogate_frame="frozen"),
    "frozen, window 2, bfloat16": dict(SURROGATE, surrogate_frame="frozen", surrogate_window=2),
    "frozen, window 4, bfloat16": dict(SURROGATE, surrogate_frame="frozen", surrogate_window=4),
    "frozen, window 8, bfloat16": dict(SURROGATE, surrogate_frame="frozen", surrogate_window=8),
    "crop 16, bfloat16": dict(SURROGATE, surrogate_context=16),
}


def kernel_of(dist, name, library=None, library_weight=0.5):
    options = VARIANTS[name]
    if options is not None and "library" in options:
        if library is None:
            raise SystemExit(f"variant {name} needs --library LOOPS (e.g. DeepStates.library() of an earlier run)")
        options = dict(options, library=library, library_weight=library_weight)
    return MetropolisHastings(dist) if options is None else SurrogateMH(dist, **options)


def library_rows(dist, library):
    """``(K, F)`` the library's loops as token ids of the task's free positions (None without one)."""
    if library is None:
        return None
    from mlm_ppl.inference.library import library_ids

    return library_ids(dist, library)


def mixing(args, log_dir):
    torch.set_num_threads(args.threads)
    mlm, dist, start, reference = cdrh3_task(chains=args.chains, starts=args.starts)
    free = dist.free_positions
    if args.start_loop:  # every chain starts in one loop (a deep state: how long do chains stay?)
        start[:, free] = library_rows(dist, args.start_loop)[0]
    exact = Counter.on(mlm)  # the float32 target's model: only exact evaluations run on it
    copies_per_evaluation = int(dist.scored_positions.numel())
    library = library_rows(dist, args.library)
    if library is not None:
        with open(os.path.join(log_dir, "library.txt"), "w") as f:
            f.write(args.library.replace(",", "\n") + "\n")
    for name in args.variants:
        kernel = kernel_of(dist, name, args.library, args.library_weight)
        state = kernel.init(start)
        streams = ChainStreams(1, args.chains)
        exact.reset()
        path = os.path.join(log_dir, f"{name}.jsonl")
        print(f"# {name}: {kernel!r} -> {path}", flush=True)
        t0, step = time.perf_counter(), 0
        with open(path, "w") as log:
            while time.perf_counter() - t0 < 60 * args.minutes:
                state, info = kernel.step(state, streams)
                step += 1
                hamming = (state.tokens[:, free] != reference[free]).sum(-1)
                moved = (state.tokens[:, free] != start[:, free].to(state.tokens.device)).sum(-1)
                line = dict(
                    step=step,
                    seconds=time.perf_counter() - t0,
                    evaluations=exact.rows / copies_per_evaluation,
                    lp=info.lp.tolist(),
                    hamming=hamming.tolist(),
                    moved=moved.tolist(),
                    accepted=info.is_accepted.float().tolist(),
                )
                if library is not None:  # which library loop each chain holds (-1: none)
                    held = (state.tokens[:, None, free] == library[None]).all(-1)  # (C, K)
                    line["library"] = torch.where(held.any(-1), held.float().argmax(-1), -1).tolist()
                log.write(json.dumps(line) + "\n")
                log.flush()
        print(f"# {name}: {step} steps", flush=True)


def summarise(name, lines):
    lp = np.array([line["lp"] for line in lines]).T  # (C, D)
    ham = np.array([line["hamming"] for line in lines]).T
    last = lines[-1]
    hours = last["seconds"] / 3600
    evaluations = last["evaluations"]
    out = dict(variant=name, steps=len(lines), minutes=60 * hours, evaluations=evaluations)
    out["evaluations_per_hour"] = evaluations / hours
    out["acceptance"] = float(np.mean([line["accepted"] for line in lines]))
    for what, draws in (("lp", lp), ("hamming", ham)):
        e = ess(draws)
        out[f"ess_{what}"] = e
        out[f"ess_per_evaluation_{what}"] = e / evaluations
        out[f"rhat_{what}"] = _rhat(draws)
    if "moved" in last:  # mean Hamming distance of the chains' loops from their starts, at wall-clock marks
        out["moved_at_minutes"] = {
            m: float(np.mean([line for line in lines if line["seconds"] <= 60 * m][-1]["moved"]))
            for m in MARKS
            if lines[0]["seconds"] <= 60 * m <= last["seconds"]
        }
    if "library" in last:
        out.update(library_figures(np.array([line["library"] for line in lines]).T))
    rate = min(out["ess_per_evaluation_lp"], out["ess_per_evaluation_hamming"])
    out["hours_to_ess_400"] = 400 / (rate * out["evaluations_per_hour"]) if rate > 0 else math.inf
    out["share_of_bound_lp"] = out["ess_per_evaluation_lp"] / BOUND
    return out


def library_figures(held):
    """From ``held`` ``(C, D)`` (the library loop each chain holds, -1 for none): the share of draws
    in the library with its MCSE (ArviZ, the indicator's draws), the moves between the library and
    the rest (entries and exits, all chains), the chains that ever entered, and the share per loop."""
    import arviz as az

    inside = (held >= 0).astype(float)
    share = float(inside.mean())
    mcse = float(az.mcse(inside)) if 0 < share < 1 and inside.shape[1] >= 4 else float("nan")
    steps = np.diff(inside, axis=1)
    loops = {int(k): float((held == k).mean()) for k in np.unique(held[held >= 0])}
    return dict(
        library_share=share,
        library_mcse=mcse,
        library_entries=int((steps > 0).sum()),
        library_exits=int((steps < 0).sum()),
        library_chains=int((inside.max(1) > 0).sum()),
        library_loops=loops,
    )


def _rhat(draws):
    import arviz as az

    a = np.asarray(draws, dtype=float)
    return float("nan") if a.shape[1] < 4 or np.std(a) == 0 else float(az.rhat(a))


def report(log_dir, json_path=None):
    rows = []
    for name in VARIANTS:
        path = os.path.join(log_dir, f"{name}.jsonl")
        if os.path.exists(path):
            lines = [json.loads(line) for line in open(path) if line.strip()]
            if len(lines) >= 8:
                rows.append(summarise(name, lines))
    head = (
        "| variant | outer steps | minutes | exact evaluations | per hour | outer acceptance | ESS(lp) | "
        "ESS(lp)/evaluation | R-hat(lp) | ESS(Hamming) | ESS(Hamming)/evaluation | R-hat(Hamming) | hours to ESS 400 | "
        "share of the bound (lp) |"
    )
    print(head)
    print("|" + "---|" * head.count(" | ") + "---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['steps']} | {r['minutes']:.1f} | {r['evaluations']:.0f} | "
            f"{r['evaluations_per_hour']:.0f} | {r['acceptance']:.3f} | {r['ess_lp']:.1f} | "
            f"{r['ess_per_evaluation_lp']:.3f} | {r['rhat_lp']:.3f} | {r['ess_hamming']:.1f} | "
            f"{r['ess_per_evaluation_hamming']:.3f} | {r['rhat_hamming']:.3f} | {r['hours_to_ess_400']:.2f} | "
            f"{r['share_of_bound_lp']:.2f} |"
        )
    held = [r for r in rows if "library_share" in r]
    if held:
        print(
            "\n| variant | draws in the library | MCSE | entries | exits | chains that entered | "
            "share by loop (rank: share) |"
        )
        print("|---|---:|---:|---:|---:|---:|---|")
        for r in held:
            loops = ", ".join(f"{k + 1}: {v:.3f}" for k, v in sorted(r["library_loops"].items()))
            print(
                f"| {r['variant']} | {r['library_share']:.3f} | {r['library_mcse']:.3f} | {r['library_entries']} | "
                f"{r['library_exits']} | {r['library_chains']} | {loops} |"
            )
    moved = [r for r in rows if r.get("moved_at_minutes")]
    if moved:
        print("\n| variant | " + " | ".join(f"moved after {m} min" for m in MARKS) + " |")
        print("|---|" + "---:|" * len(MARKS))
        for r in moved:
            at = r["moved_at_minutes"]
            print(f"| {r['variant']} | " + " | ".join(f"{at[m]:.1f}" if m in at else "" for m in MARKS) + " |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def fidelity(args):
    torch.set_num_threads(args.threads)
    _, dist, states, _ = cdrh3_task(chains=args.draws, starts=args.starts)
    energy = torch.cat([dist.evaluate(states[i : i + 4]).energy for i in range(0, len(states), 4)])
    print("| surrogate | draws | sd of E - E~ (nats) | outer acceptance, mixed inner chain | its bound |")
    print("|---|---:|---:|---:|---:|")
    for label, options in FIDELITY.items():
        surrogate = SurrogateMH(dist, **options).surrogate
        approx = torch.cat([surrogate.evaluate(states[i : i + 4]).energy for i in range(0, len(states), 4)])
        s = float((energy - approx).double().std())
        a = math.erfc(s / 2)  # 2 Phi(-s / sqrt 2) = erfc(s / 2)
        print(f"| {label} | {len(states)} | {s:.3f} | {a:.3f} | {a / (2 - a):.3f} |", flush=True)


def library_acceptance(args):
    """The inner chain's acceptance of a library proposal (whole-loop run, ``--orders`` random orders)
    from each start to each library loop, under the main job's surrogate: ``log a = lp~(y) - lp~(x) +
    log q(x) - log q(y)``, ``q`` the mixture. Per loop: its surrogate energy, the median ``log a`` and the
    mean acceptance ``min(1, e^log a)`` over starts and orders; and ``-log q_U(x)`` of the starts."""
    from mlm_ppl.inference.library import fill_from_library

    torch.set_num_threads(args.threads)
    _, dist, start, _ = cdrh3_task(chains=args.chains, starts=args.starts)
    kernel = kernel_of(dist, "main-library", args.library, args.library_weight)
    inner, surrogate = kernel.inner, kernel.surrogate
    lib, free = inner.library.ids, dist.free_positions
    K, C = lib.shape[0], start.shape[0]
    ev = surrogate.evaluate(start)
    lp_x = inner.log_density(ev.energy, ev.log_factor).double()  # (C,)
    ys = torch.cat([fill_from_library(lib, torch.full((C,), k), start, free, torch.arange(len(free)).expand(C, -1))
                    for k in range(K)])  # fmt: skip
    ev_y = surrogate.evaluate(ys)
    lp_y = inner.log_density(ev_y.energy, ev_y.log_factor).double().reshape(K, C)
    gen = torch.Generator().manual_seed(0)
    log_a, q_x, q_y = [], [], []
    for _ in range(args.orders):
        order = torch.randperm(len(free), generator=gen).expand(C * (K + 1), -1)
        both = torch.cat([ys, start])
        _, log_q, _ = inner.unmask(both, order, None)
        mix = inner.library.log_q(log_q, both, order)
        log_a.append(lp_y - lp_x[None] + mix[-C:][None] - mix[:-C].reshape(K, C))
        q_x.append(-log_q[-C:].double())
        q_y.append(-log_q[:-C].double().reshape(K, C))
    a = torch.stack(log_a)  # (orders, K, C)
    print(f"surrogate lp of the {C} starts: median {float(lp_x.median()):.2f}; -log q_unmask of the starts: median "
          f"{float(torch.stack(q_x).median()):.2f} nats")  # fmt: skip
    per_start = a.clamp(max=0).exp().mean(0)  # (K, C): each start's mean acceptance over the orders
    print("starts' surrogate lp:", " ".join(f"{float(v):.1f}" for v in lp_x))
    print("starts' -log q_unmask:", " ".join(f"{float(v):.1f}" for v in torch.stack(q_x).mean(0)))
    neg_q_y = torch.stack(q_y).mean((0, 2))  # (K,): a whole-loop fill is read given the framework alone
    print("| rank | loop | surrogate lp | -log q_unmask | median log a | mean acceptance | per start |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for k, loop in enumerate(args.library.split(",")):
        acc, starts = per_start[k].mean(), " ".join(f"{float(v):.2f}" for v in per_start[k])
        print(
            f"| {k + 1} | {loop} | {float(lp_y[k].median()):.2f} | {float(neg_q_y[k]):.2f} | "
            f"{float(a[:, k].median()):.2f} | {float(acc):.2e} "
            f"| {starts} |"
        )


def main():
    warnings.filterwarnings("ignore", category=UserWarning)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", choices=("mixing", "fidelity", "library"), default="mixing")
    parser.add_argument("--orders", type=int, default=4, help="library: random orders per start")
    parser.add_argument("--starts", help="a run directory of the main job (its draws start the chains)")
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--minutes", type=float, default=20.0, help="minutes per variant")
    parser.add_argument("--variants", default="mh,whole-52,frozen-208,main")
    parser.add_argument("--draws", type=int, default=40, help="fidelity: the run's draws to compare on")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (2: the machine's cores)")
    parser.add_argument(
        "--library",
        help="deep states, loops separated by commas: main-library proposes them, and every variant's log says "
        "which one each chain holds",
    )
    parser.add_argument("--library-weight", type=float, default=0.5)
    parser.add_argument("--start-loop", help="mixing: start every chain with this loop (e.g. a deep state)")
    parser.add_argument("--log-dir")
    parser.add_argument("--from-logs", help="report the logs of an earlier run, running nothing")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.from_logs:
        report(args.from_logs, args.json)
        return
    if not args.starts:
        parser.error("--starts RUN is needed: chains start from a converged run's draws")
    if args.parts == "fidelity":
        fidelity(args)
        return
    if args.parts == "library":
        if not args.library:
            parser.error("--parts library needs --library LOOPS")
        library_acceptance(args)
        return
    args.variants = args.variants.split(",")
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    log_dir = args.log_dir or tempfile.mkdtemp(prefix="bench_conv_")
    os.makedirs(log_dir, exist_ok=True)
    print(f"# logs in {log_dir}", flush=True)
    mixing(args, log_dir)
    report(log_dir, args.json)


if __name__ == "__main__":
    main()
