"""Sampler speed on AntiBERTy, side by side.

On a 120-residue human heavy chain (``mlm_ppl.data.example_heavy_chain``) with (a) its
CDR-H3 masked (13 free positions) and (b) 30 free positions spread along it, prints:

* seconds per MH step and per pseudo-Gibbs step (C chains batched);
* MH step time against the pure forward pass over the same masked copies (same chunks);
* 8 chains batched against 8 chains one after another (pseudo-Gibbs and MH);
* the overhead of running through ``pyro.infer.MCMC`` (``MLMKernel``) against calling the
  kernel directly, same seed, same steps;
* ``--parts surrogate`` (CDR-H3 task only, 4 chains): surrogate-transition MH against plain MH.
  (1) Each variant runs for ``--short-seconds`` from the same start: accepted single-site moves
  (``n_moves``) per second, outer acceptance, masked copies per second, for ``inner_steps`` of
  1, 2, 4 and 8 sweeps (13 to 104) and the bfloat16 surrogate. (2) Plain MH and surrogate-MH
  (default settings) run side by side for ``--minutes`` each, in two processes of one thread,
  from the same start; ESS of ``lp`` and of the Hamming distance to the start per second.

Timings on a shared 2-core machine are noisy: each comparison runs its variants
interleaved over several repeats and reports medians.

    python benchmarks/bench_sampling.py [--steps 8] [--repeats 3]
    python benchmarks/bench_sampling.py --parts surrogate [--short-seconds 100] [--minutes 20] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import pyro
import torch
from pyro.infer import MCMC

from mlm_ppl import MaskedLMDistribution, MLMKernel, load_mlm
from mlm_ppl.data import example_heavy_chain
from mlm_ppl.inference import ChainStreams, MetropolisHastings, PseudoGibbs, SurrogateMH, fill_template, step_stats


class Counter:
    """Counts masked copies through MaskedLM.logits_at and the seconds spent there."""

    def __init__(self, mlm):
        self.mlm, self.real, self.rows, self.seconds = mlm, mlm.logits_at, 0, 0.0
        mlm.logits_at = self

    def __call__(self, ids, attn, q):
        t0 = time.perf_counter()
        out = self.real(ids, attn, q)
        self.seconds += time.perf_counter() - t0
        self.rows += ids.shape[0]
        return out

    def reset(self):
        self.rows, self.seconds = 0, 0.0


def pure_forward(mlm, tokens, n_copies):
    """Time the bare encoder+head over ``n_copies`` single-masked copies of ``tokens`` rows."""
    enc = mlm.encoding_from_ids(tokens)
    rows, query = enc.scorable.nonzero(as_tuple=True)
    reps = -(-n_copies // len(rows))
    rows, query = rows.repeat(reps)[:n_copies], query.repeat(reps)[:n_copies]
    masks = torch.zeros((len(rows), tokens.shape[1]), dtype=torch.bool)
    masks[torch.arange(len(rows)), query] = True
    t0 = time.perf_counter()
    mlm.masked_reduce(enc, rows, masks, query, lambda lg, tgt: lg[:, :1])
    return time.perf_counter() - t0


def timed_steps(kernel, state, steps, seed):
    gen = ChainStreams(seed, state.tokens.shape[0])
    t0 = time.perf_counter()
    for _ in range(steps):
        state, info = kernel.step(state, gen)
    return time.perf_counter() - t0, state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6, help="MH steps per measurement (default 6)")
    ap.add_argument("--pg-steps", type=int, default=20, help="pseudo-Gibbs steps per measurement (default 20)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chains", type=int, default=8)
    ap.add_argument("--mcmc-steps", type=int, default=40, help="steps per MCMC-overhead measurement (default 40)")
    ap.add_argument("--parts", default="mh,pg,batch,mcmc", help="comma-separated subset of mh,pg,batch,mcmc,surrogate")
    ap.add_argument("--short-seconds", type=float, default=100.0, help="surrogate: seconds per variant (default 100)")
    ap.add_argument("--minutes", type=float, default=20.0, help="surrogate: side-by-side minutes (default 20)")
    ap.add_argument("--variants", default="all", help="surrogate: 'all', or comma-separated variant names")
    ap.add_argument("--json", help="surrogate: write the measurements here")
    ap.add_argument("--device", default=None, help="cpu (default) or cuda")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # one side of the side-by-side run
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if args.worker:
        return worker(args)
    if parts == {"surrogate"}:
        return surrogate_part(args)

    mlm = load_mlm("antiberty")
    seq, cdr3 = example_heavy_chain()
    spread = sorted(range(2, 120, 4))[:30]
    templates = {
        f"CDR-H3 masked ({cdr3.stop - cdr3.start} free)": seq[: cdr3.start]
        + "[MASK]" * (cdr3.stop - cdr3.start)
        + seq[cdr3.stop :],
        "30 spread positions masked": "".join("[MASK]" if i in spread else c for i, c in enumerate(seq)),
    }
    counter = Counter(mlm)
    C = args.chains
    print(
        f"# AntiBERTy, 120-residue heavy chain, {C} chains, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads\n"
    )
    for label, template in templates.items():
        dist = MaskedLMDistribution(mlm, template)
        start = fill_template(dist, C, ChainStreams(0, C), "sample")
        print(f"## {label}\n")

        if "mh" in parts:
            mh_part(mlm, dist, start, counter, args, C)
        if "pg" in parts or "batch" in parts:
            pg_part(dist, start, args, C, parts)
        if "mcmc" in parts:
            mcmc_part(dist, start, args, C)


def mh_part(mlm, dist, start, counter, args, C):
    """MH: seconds per step, and against the pure forward pass over the same masked copies."""
    mh = MetropolisHastings(dist)
    mh_t, pure_t, copies = [], [], []
    n_scored = int(mlm.ordinary_mask[dist.template].sum()) + dist.num_free
    state = mh.init(start)
    for r in range(args.repeats):
        counter.reset()
        dt, state = timed_steps(mh, state, args.steps, seed=r)
        mh_t.append(dt)
        copies.append(counter.rows)
        pure_t.append(pure_forward(mlm, state.tokens, counter.rows) if counter.rows else float("nan"))
    n_copies = sum(copies)
    steps_total = args.steps * args.repeats
    print(
        f"MH step ({C} chains): median {statistics.median(mh_t) / args.steps:.2f} s/step; "
        f"{n_copies / steps_total:.0f} masked copies per step on average (a step where every chain "
        f"proposes a change costs {C} x {n_scored} "
        f"copies; proposals equal to the state cost none)"
    )
    ratios = [a / b for a, b in zip(mh_t, pure_t) if b == b and b > 0]
    if ratios:
        print(f"MH step / pure forward over the same copies: median {statistics.median(ratios):.3f}x (target <= 1.10)")


def pg_part(dist, start, args, C, parts):
    """Pseudo-Gibbs: seconds per step; C chains batched against one after another."""
    pg = PseudoGibbs(dist, scan="random")
    pg_state = pg.init(start)
    pg_t = []
    for r in range(args.repeats):
        dt, pg_state = timed_steps(pg, pg_state, args.pg_steps, seed=r)
        pg_t.append(dt / args.pg_steps)
    print(f"pseudo-Gibbs step ({C} chains): median {statistics.median(pg_t):.3f} s/step")

    if "batch" not in parts:
        return
    batched, serial = [], []
    for r in range(args.repeats):
        dt, _ = timed_steps(pg, pg.init(start), args.pg_steps, seed=r)
        batched.append(dt)
        t_serial = 0.0
        for c in range(C):
            dt, _ = timed_steps(pg, pg.init(start[c : c + 1]), args.pg_steps, seed=r)
            t_serial += dt
        serial.append(t_serial)
    ratio = statistics.median(s / b for s, b in zip(serial, batched))
    print(f"pseudo-Gibbs, {C} chains batched vs one after another: {ratio:.2f}x faster (target >= 1.25)")


def mcmc_part(dist, start, args, C):
    """MCMC overhead: pseudo-Gibbs, C batched chains inside one Pyro chain, same seed and steps."""

    def model():
        pyro.sample("x", dist)

    direct, via, outside = [], [], []
    inside = [0.0]
    real_step = PseudoGibbs.step

    def timed_step(self, state, streams):  # time spent inside the kernel while MCMC drives it
        t0 = time.perf_counter()
        out = real_step(self, state, streams)
        inside[0] += time.perf_counter() - t0
        return out

    for r in range(args.repeats):
        kernel = MLMKernel(model, kernel="pseudo-gibbs", num_chains=C, seed=r, scan="random")
        kernel.initial_params = {"x": start}
        kernel.setup(0)
        dt, _ = timed_steps(kernel.kernel, kernel.kernel.init(start), args.mcmc_steps, seed=r)
        direct.append(dt)
        kernel = MLMKernel(model, kernel="pseudo-gibbs", num_chains=C, seed=r, scan="random")
        kernel.initial_params = {"x": start}
        inside[0] = 0.0
        PseudoGibbs.step = timed_step
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mcmc = MCMC(kernel, num_samples=args.mcmc_steps, warmup_steps=0, disable_progbar=True)
                t0 = time.perf_counter()
                mcmc.run()
                via.append(time.perf_counter() - t0)
        finally:
            PseudoGibbs.step = real_step
        outside.append((via[-1] - inside[0]) / inside[0])
    wall = statistics.median(v / d for v, d in zip(via, direct)) - 1
    print(
        f"pyro.infer.MCMC overhead: {100 * statistics.median(outside):.2f}% of the kernel's own time is spent "
        f"outside it (MCMC set-up, model trace, hooks; target <= 5%); wall-clock ratio of separate direct and "
        f"MCMC runs {100 * wall:+.1f}% (machine noise dominates that one)\n"
    )


# ---------------------------------------------------------------------- surrogate-transition MH
def cdrh3_task(device=None, chains=4):
    """The main job's task: AntiBERTy, the 120-residue heavy chain with its CDR-H3 (13) masked,
    E_norm in float32, and the chains' common start (an MLM fill-in, seed 0)."""
    mlm = load_mlm("antiberty", device=device)
    seq, cdr3 = example_heavy_chain()
    dist = MaskedLMDistribution(mlm, seq[: cdr3.start] + "[MASK]" * (cdr3.stop - cdr3.start) + seq[cdr3.stop :])
    start = fill_template(dist, chains, ChainStreams(0, chains), "sample")
    return mlm, dist, start


def surrogate_variants(F):
    """name -> kernel options (None: plain MH)."""
    out = {"mh": None}
    for sweeps in (1, 2, 4, 8):
        out[f"surrogate K={sweeps * F}"] = dict(inner_steps=sweeps * F)
    out[f"surrogate K={4 * F} bf16"] = dict(inner_steps=4 * F, surrogate_dtype="bfloat16")
    return out


def run_for(kernel, start, seconds, seed, counter):
    """Steps of ``kernel`` from ``start`` until ``seconds`` have passed; totals and traces."""
    gen = ChainStreams(seed, start.shape[0])
    state = kernel.init(start)
    counter.reset()
    lp, hamming = [], []
    totals = dict(steps=0, n_moves=0, accepted=0.0, inner_acceptance=0.0)
    free = kernel.target.free_positions
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        state, info = kernel.step(state, gen)
        stats = step_stats(info)
        totals["steps"] += 1
        totals["n_moves"] += int(stats["n_moves"].sum())
        totals["accepted"] += float(stats["is_accepted"].float().mean())
        totals["inner_acceptance"] += float(stats.get("inner_acceptance", torch.tensor(float("nan"))).mean())
        lp.append(stats["lp"].double().numpy())
        hamming.append((state.tokens[:, free] != start[:, free]).sum(-1).numpy())
    wall = time.perf_counter() - t0
    n = max(totals["steps"], 1)
    return dict(
        seconds=wall,
        steps=totals["steps"],
        n_moves=totals["n_moves"],
        moves_per_s=totals["n_moves"] / wall,
        outer_acceptance=totals["accepted"] / n,
        inner_acceptance=totals["inner_acceptance"] / n,
        copies_per_s=counter.rows / wall,
        lp=np.array(lp).T.tolist(),  # (C, steps)
        hamming=np.array(hamming).T.tolist(),
    )


def make(dist, options):
    return MetropolisHastings(dist) if options is None else SurrogateMH(dist, **options)


def worker(args):
    """One side of the side-by-side run: one thread, one variant, ``--minutes``."""
    torch.set_num_threads(1)
    mlm, dist, start = cdrh3_task(args.device, args.chains)
    options = surrogate_variants(dist.num_free)[args.worker]
    result = run_for(make(dist, options), start, 60 * args.minutes, seed=1, counter=Counter(mlm))
    with open(args.worker_out, "w") as f:
        json.dump(result, f)


def ess(traces):
    """Bulk ESS of a (C, D) array of draws (ArviZ, rank-normalised)."""
    import arviz as az

    a = np.asarray(traces, dtype=float)
    if a.shape[1] < 8 or np.std(a) == 0:
        return float("nan")
    return float(az.ess(a, method="bulk"))


def surrogate_part(args):
    torch.set_num_threads(2)
    C = 4
    mlm, dist, start = cdrh3_task(args.device, C)
    F = dist.num_free
    variants = surrogate_variants(F)
    chosen = list(variants) if args.variants == "all" else args.variants.split(",")
    counter = Counter(mlm)
    print(
        f"# surrogate-MH vs MH: AntiBERTy, CDR-H3 ({F} free of 120), E_norm fp32, {C} chains, torch "
        f"{torch.__version__}, device {mlm.device}\n"
    )
    short = {}
    if args.short_seconds > 0:
        print(f"## Each variant for {args.short_seconds:.0f} s (2 threads), same start\n")
        print(
            "| variant | steps | accepted single-site moves/s | vs MH | outer acceptance | inner acceptance "
            "| masked copies/s |"
        )
        print("|---|---|---|---|---|---|---|")
        for name in chosen:
            r = run_for(make(dist, variants[name]), start, args.short_seconds, seed=1, counter=counter)
            short[name] = {k: v for k, v in r.items() if k not in ("lp", "hamming")}
            base = short.get("mh", {}).get("moves_per_s")
            ratio = f"{r['moves_per_s'] / base:.1f}x" if base else "-"
            inner = "-" if name == "mh" else f"{r['inner_acceptance']:.3f}"
            print(
                f"| {name} | {r['steps']} | {r['moves_per_s']:.3f} | {ratio} | {r['outer_acceptance']:.3f} | "
                f"{inner} | {r['copies_per_s']:.1f} |",
                flush=True,
            )
    side = {}
    if args.minutes > 0:
        default = f"surrogate K={4 * F}"
        print(f"\n## Side by side for {args.minutes:g} minutes: mh and {default}, one thread each\n", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            procs = {}
            for name in ("mh", default):
                out = os.path.join(tmp, name.replace(" ", "_") + ".json")
                cmd = [
                    sys.executable,
                    __file__,
                    "--parts",
                    "surrogate",
                    "--worker",
                    name,
                    "--worker-out",
                    out,
                    "--minutes",
                    str(args.minutes),
                    "--chains",
                    str(C),
                ]
                if args.device:
                    cmd += ["--device", args.device]
                env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
                procs[name] = (subprocess.Popen(cmd, env=env), out)
            for name, (proc, out) in procs.items():
                if proc.wait() != 0:
                    raise SystemExit(f"worker {name} failed")
                with open(out) as f:
                    side[name] = json.load(f)
        print(
            "| variant | steps | wall s | accepted moves/s | ESS(lp) | ESS(lp)/min | ESS(hamming) | ESS(hamming)/min |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, r in side.items():
            r["ess_lp"], r["ess_hamming"] = ess(r.pop("lp")), ess(r.pop("hamming"))
            minutes = r["seconds"] / 60
            print(
                f"| {name} | {r['steps']} | {r['seconds']:.0f} | {r['moves_per_s']:.3f} | {r['ess_lp']:.1f} | "
                f"{r['ess_lp'] / minutes:.2f} | {r['ess_hamming']:.1f} | {r['ess_hamming'] / minutes:.2f} |"
            )
        mh, sur = side["mh"], side[default]
        for key in ("moves_per_s", "ess_lp", "ess_hamming"):
            a = sur[key] / sur["seconds"] if key != "moves_per_s" else sur[key]
            b = mh[key] / mh["seconds"] if key != "moves_per_s" else mh[key]
            print(f"\nratio surrogate / MH, {key} per second: {a / b:.2f}x" if b > 0 else f"\n{key}: MH has none")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(short=short, side_by_side=side, chains=C, free=F, device=str(mlm.device)), f, indent=1)


if __name__ == "__main__":
    main()
