"""Sampler speed on AntiBERTy, side by side.

On a 120-residue human heavy chain (``mlm_ppl.data.example_heavy_chain``) with (a) its
CDR-H3 masked (13 free positions) and (b) 30 free positions spread along it, the parts
``mh,pg,batch,mcmc`` (the default) print:

* seconds per MH step and per pseudo-Gibbs step (C chains batched);
* MH step time against the pure forward pass over the same masked copies (same chunks);
* 8 chains batched against 8 chains one after another (pseudo-Gibbs and MH);
* the overhead of running through ``pyro.infer.MCMC`` (``MLMKernel``) against calling the
  kernel directly, same seed, same steps.

Timings on a shared 2-core machine are noisy: each comparison runs its variants
interleaved over several repeats and reports medians.

Two parts compare surrogate-transition MH (``SurrogateMH``) with plain MH
(``MetropolisHastings``) on the main job: AntiBERTy, the CDR-H3 (13 residues) of the example
chain masked, E_norm in float32, ``--chains`` chains (default 8) from one common start (an MLM
fill-in, ``fill_template(dist, C, ChainStreams(0, C), "sample")``), seed 1.

* ``--parts sweep``: a grid of surrogate variants, the cartesian product of ``--inner-steps``
  (K, surrogate steps per exact correction; ``default`` is the kernel's, 4 x free positions),
  ``--contexts`` (R, ``surrogate_context``: ``none`` = the whole sequence, else the surrogate's
  masked copies see the tokens within R columns of a free position; ``none`` leaves the option
  unset) and ``--surrogate-dtype`` (default bfloat16; ``none`` = the target's dtype), plus plain
  MH once as the baseline. Each runs alone for ``--short-seconds`` (2 threads) from the same
  start. Per variant: outer steps, seconds per outer step, outer and inner acceptance, accepted
  single-site moves per second (``n_moves``), the mean jump (Hamming distance between the state
  before and after an outer step, 0 for a rejected one), the expected squared jump distance of
  ``lp`` per second, and masked copies per second and per outer step with the seconds spent in
  the model, for the target's model and the surrogate's (cast) model separately (counted
  together when the surrogate runs in the target's own dtype). ``--json`` is rewritten after
  each variant.
* ``--parts surrogate``: plain MH and ONE surrogate variant (single values of ``--inner-steps``,
  ``--contexts``, ``--surrogate-dtype``) side by side, in two processes of one thread each, for
  ``--minutes``, from the same start with the same seed. Each worker appends one JSON line per
  outer step to ``mh.jsonl`` / ``surrogate.jsonl`` in ``--log-dir`` (default: a new directory
  under /tmp, printed at the start), flushed at once, so a killed run keeps what it measured;
  ``--from-logs DIR`` reports such logs without running anything. Per side: steps, wall
  seconds, outer acceptance, accepted moves per second, and for ``lp``, the Hamming distance to
  the start and the Hamming distance to the reference (the true CDR-H3): bulk ESS over all
  chains (ArviZ), ESS per minute, the ESS of each half of the chains (scaled to all chains),
  MCSE of the mean and R-hat; then surrogate / MH ratios of ESS per minute. ``--burn F`` drops
  the first fraction F of each side's draws first (default 0). ``--starts RUN`` starts both
  sides' chains from draws of a run of the main job (``runs/converge``) instead of MLM fill-ins:
  from near stationarity, so that ESS measures mixing and not the way to the posterior's bulk.

    python benchmarks/bench_sampling.py [--steps 8] [--repeats 3]
    python benchmarks/bench_sampling.py --parts sweep --short-seconds 240 --inner-steps 52,104,208,416 \\
        --contexts none,32,16 --json sweep.json
    python benchmarks/bench_sampling.py --parts surrogate --minutes 60 --chains 8 --inner-steps 208 \\
        --contexts none --json side.json
    python benchmarks/bench_sampling.py --parts surrogate --minutes 60 --chains 8 --starts runs/converge
    python benchmarks/bench_sampling.py --parts surrogate --from-logs /tmp/bench_side_XXXX [--burn 0.1]

``--device cuda`` runs the model on the GPU (``load_mlm(device=...)``); the default is CPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
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
from mlm_ppl.inference.surrogate_mh import SURROGATE_DTYPES

SPEED_PARTS = {"mh", "pg", "batch", "mcmc"}
PARTS = SPEED_PARTS | {"sweep", "surrogate"}


class Counter:
    """Counts masked copies through MaskedLM.logits_at and the seconds spent there (one per model:
    the target's and a cast surrogate model are separate MaskedLMs, each with its own Counter)."""

    def __init__(self, mlm):
        self.mlm, self.real, self.rows, self.seconds = mlm, mlm.logits_at, 0, 0.0
        mlm.logits_at = self

    @classmethod
    def on(cls, mlm):
        """The Counter already wrapping ``mlm.logits_at``, or a new one."""
        current = mlm.__dict__.get("logits_at")
        return current if isinstance(current, cls) else cls(mlm)

    def __call__(self, ids, attn, q, **kwargs):
        t0 = time.perf_counter()
        out = self.real(ids, attn, q, **kwargs)
        if out.is_cuda:  # the seconds the model ran, not the seconds to queue it
            torch.cuda.synchronize(out.device)
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
    ap.add_argument("--parts", default="mh,pg,batch,mcmc", help=f"comma-separated subset of {','.join(sorted(PARTS))}")
    ap.add_argument("--short-seconds", type=float, default=100.0, help="sweep: seconds per variant (default 100)")
    ap.add_argument("--minutes", type=float, default=20.0, help="surrogate: side-by-side minutes (default 20)")
    ap.add_argument(
        "--inner-steps",
        help=f"sweep: comma-separated K (default {SWEEP_INNER_STEPS}); surrogate: one K (default: the kernel's, "
        "4 x free positions); 'default' is the kernel's",
    )
    ap.add_argument(
        "--contexts", default="none", help="surrogate_context R: comma-separated (sweep) or one; 'none' (default)"
    )
    ap.add_argument(
        "--frames",
        default="crop",
        help="surrogate_frame: crop (default) or frozen (the rest of a reference sequence, frozen; R none means 0); "
        "comma-separated (sweep) or one",
    )
    ap.add_argument(
        "--surrogate-dtype",
        default="bfloat16",
        help=f"{', '.join(SURROGATE_DTYPES)} or none (the target's); comma-separated for the sweep (default bfloat16)",
    )
    ap.add_argument("--burn", type=float, default=0.0, help="surrogate: drop this fraction of draws (default 0)")
    ap.add_argument(
        "--starts",
        metavar="RUN",
        help="surrogate: start both sides' chains from draws of RUN (a run directory of the main job, e.g. "
        "runs/converge): chains that start near stationarity, so that ESS measures mixing (default: MLM fill-ins)",
    )
    ap.add_argument("--log-dir", help="surrogate: the workers' logs (default: a new directory under /tmp)")
    ap.add_argument("--from-logs", metavar="DIR", help="surrogate: only report the logs in DIR, run nothing")
    ap.add_argument("--json", help="sweep, surrogate: write the measurements here")
    ap.add_argument("--device", default=None, help="cpu (default) or cuda")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # one side of the side-by-side run: mh or surrogate
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if parts - PARTS:
        ap.error(f"unknown parts {sorted(parts - PARTS)}; choose from {sorted(PARTS)}")
    if not 0 <= args.burn < 1:
        ap.error("--burn must be in [0, 1)")
    if args.worker:
        return worker(args)
    if args.from_logs:
        return write_json(args, {"side_by_side": side_part(args)})
    if parts & SPEED_PARTS:
        speed_parts(args, parts)
    results = {}
    if "sweep" in parts:
        sweep_part(args, results)
    if "surrogate" in parts:
        results["side_by_side"] = side_part(args)
        write_json(args, results)


def speed_parts(args, parts) -> None:
    """The parts mh, pg, batch and mcmc."""
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
SWEEP_INNER_STEPS = "52,104,208,416"
SIDES = ("mh", "surrogate")
QUANTITIES = {"lp": "lp", "ham_start": "Hamming to start", "ham_ref": "Hamming to reference"}
MIN_DRAWS = 8  # per chain, for ESS, MCSE and R-hat


def cdrh3_task(device=None, chains=8, starts=None):
    """The main job's task: AntiBERTy, the 120-residue heavy chain with its CDR-H3 (13) masked,
    E_norm in float32, the chains' starts and the reference: the true sequence's tokens (``(L,)``,
    CPU), encoded as the target encodes its template. The starts are MLM fill-ins (seed 0), or,
    with ``starts`` (a run directory or run.nc of this task), draws of that run (:func:`run_starts`)."""
    mlm = load_mlm("antiberty", device=device)
    seq, cdr3 = example_heavy_chain()
    dist = MaskedLMDistribution(mlm, seq[: cdr3.start] + "[MASK]" * (cdr3.stop - cdr3.start) + seq[cdr3.stop :])
    if starts is None:
        start = fill_template(dist, chains, ChainStreams(0, chains), "sample").cpu()
    else:
        start = run_starts(starts, dist, chains)
    reference = mlm.encode(seq).input_ids[0].cpu()
    if reference.shape != dist.template.shape:
        raise SystemExit(f"the true sequence encodes to {reference.shape}, the template to {dist.template.shape}")
    return mlm, dist, start, reference


def run_starts(path, dist, chains):
    """``(chains, L)`` starts taken from the draws of a run of the same task (``docs/converge/run``; of a run
    still going, its checkpoint's draws so far): the
    second half of its draws, pooled over its chains, at evenly spaced indices. Chains started
    there start (close to) stationary, so that their ESS measures mixing, not the way from a
    fill-in to the posterior's bulk, which plain MH does not finish in an hour (docs/performance.md)."""
    from mlm_ppl.diagnostics import read_run

    checkpoint = os.path.join(path, "checkpoint.pt")
    try:
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, "run.nc")) and os.path.exists(checkpoint):
            saved = torch.load(checkpoint, weights_only=True)  # a run still going: its draws so far
            tokens = saved["draws"][:, : saved["stats"]["lp"].shape[1]]
        else:
            tokens = torch.as_tensor(read_run(path).posterior["tokens"].values)  # (C, D, L)
    except (OSError, ValueError, KeyError) as err:
        raise SystemExit(f"--starts {path}: {err}") from None
    C, D, L = tokens.shape
    template = dist.template.cpu()
    fixed = ~dist.free.cpu()
    if L != template.numel() or not (tokens[..., fixed] == template[fixed]).all():
        raise SystemExit(f"--starts {path}: its draws are not of this task's template")
    pool = tokens[:, D // 2 :].reshape(-1, L)
    if pool.shape[0] < chains:
        raise SystemExit(f"--starts {path}: {pool.shape[0]} draws in its second half, fewer than {chains} chains")
    pick = torch.linspace(0, pool.shape[0] - 1, chains).round().long()
    return pool[pick].clone()


def parse_values(text, parse, what):
    try:
        return [parse(v.strip()) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"bad {what}: {text!r}") from None


def parse_k(v):
    return None if v == "default" else int(v)


def parse_r(v):
    return None if v.lower() == "none" else int(v)


def parse_dtype(v):
    if v.lower() == "none":
        return None
    if v not in SURROGATE_DTYPES:
        raise ValueError(v)
    return v


def parse_frame(v):
    if v not in ("crop", "frozen"):
        raise ValueError(v)
    return v


def options_of(K, R, dtype, frame="crop"):
    """SurrogateMH keyword options; an unset value is left out (the kernel's default)."""
    out = {}
    if frame != "crop":
        out["surrogate_frame"] = frame
    if K is not None:
        out["inner_steps"] = K
    if dtype is not None:
        out["surrogate_dtype"] = dtype
    if R is not None:
        out["surrogate_context"] = R
    return out


def variant_name(options):
    if options is None:
        return "mh"
    K = options.get("inner_steps", "default")
    frame = options.get("surrogate_frame", "crop")
    R = options.get("surrogate_context", 0 if frame == "frozen" else "none")
    return f"surrogate K={K} R={R} {frame} {options.get('surrogate_dtype', 'target dtype')}"


def make(dist, options):
    """Plain MH (options None) or SurrogateMH(dist, **options)."""
    return MetropolisHastings(dist) if options is None else SurrogateMH(dist, **options)


def counters_for(mlm, options):
    """(target counter, surrogate counter or None when the surrogate runs on the target's model)."""
    target = Counter.on(mlm)
    dtype = None if options is None else options.get("surrogate_dtype")
    if dtype is None:
        return target, None
    model = mlm.cast(SURROGATE_DTYPES[dtype])  # the cached copy the surrogate will use
    return target, (None if model is mlm else Counter.on(model))


def run_steps(kernel, start, seed, seconds, counters, record):
    """Steps of ``kernel`` from ``start`` until ``seconds`` have passed (at least one). After each,
    ``record(i, t, before, after, lp_before, stats)``: ``t`` seconds since the first step began
    (initialising the chains excluded), token rows (CPU), ``lp`` before the step (CPU, float64)
    and ``step_stats`` of the step. The counters are reset after the initialisation."""
    gen = ChainStreams(seed, start.shape[0])
    state = kernel.init(start)
    lp = kernel.log_density(state.energy, state.log_factor).detach().double().cpu()
    for c in counters:
        if c is not None:
            c.reset()
    t0 = time.perf_counter()
    i = 0
    while True:
        before = state.tokens.cpu()
        state, info = kernel.step(state, gen)
        stats = {k: v.detach().cpu() for k, v in step_stats(info).items()}
        t = time.perf_counter() - t0
        record(i, t, before, state.tokens.cpu(), lp, stats)
        lp = stats["lp"].double()
        i += 1
        if t >= seconds:
            return t


def fmt(x, spec=".3g"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def write_json(args, results):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


# ---------------------------------------------------------------------- the sweep
def sweep_part(args, results):
    """Each variant alone for ``--short-seconds`` (2 threads), same start, same seed."""
    torch.set_num_threads(2)
    C = args.chains
    mlm, dist, start, _ = cdrh3_task(args.device, C)
    Ks = parse_values(args.inner_steps or SWEEP_INNER_STEPS, parse_k, "--inner-steps")
    Rs = parse_values(args.contexts, parse_r, "--contexts")
    dtypes = parse_values(args.surrogate_dtype, parse_dtype, "--surrogate-dtype")
    frames = parse_values(args.frames, parse_frame, "--frames")
    variants = [None] + [options_of(K, R, d, f) for K, R, d, f in itertools.product(Ks, Rs, dtypes, frames)]
    sweep = results["sweep"] = dict(
        seconds_per_variant=args.short_seconds,
        chains=C,
        free=dist.num_free,
        device=str(mlm.device),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        variants=[],
    )
    print(
        f"# surrogate-MH sweep: AntiBERTy, CDR-H3 ({dist.num_free} free of {dist.template.numel()} tokens), "
        f"E_norm fp32, {C} chains, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"device {mlm.device}; each variant alone for {args.short_seconds:g} s from the same start, seed 1\n",
        flush=True,
    )
    print(
        "| variant | outer steps | s/step | outer acc | inner acc | moves/s | vs MH | mean jump | ESJD(lp)/s "
        "| target copies/s | target copies/step | target model s | surrogate copies/s | surrogate copies/step "
        "| surrogate model s |"
    )
    print("|---" * 15 + "|", flush=True)
    base = None
    for options in variants:
        r = sweep_variant(mlm, dist, start, options, args.short_seconds)
        sweep["variants"].append(r)
        base = r["moves_per_s"] if options is None else base
        vs = f"{r['moves_per_s'] / base:.2f}x" if base else "-"
        shared = r["surrogate_copies"] is None and options is not None
        sur = (
            ["(with target)"] * 3
            if shared
            else [
                fmt(r["surrogate_copies_per_s"], ".1f"),
                fmt(r["surrogate_copies_per_step"], ".1f"),
                fmt(r["surrogate_model_s"], ".1f"),
            ]
        )
        print(
            f"| {r['name']} | {r['steps']} | {r['s_per_step']:.2f} | {r['outer_acceptance']:.3f} "
            f"| {fmt(r['inner_acceptance'], '.3f')} | {r['moves_per_s']:.3f} | {vs} | {r['mean_jump']:.3f} "
            f"| {fmt(r['esjd_lp_per_s'])} | {r['target_copies_per_s']:.1f} | {r['target_copies_per_step']:.1f} "
            f"| {r['target_model_s']:.1f} | {' | '.join(sur)} |",
            flush=True,
        )
        write_json(args, results)  # after each variant: a killed sweep keeps the ones done
    print(
        "\nmoves/s: accepted single-site moves (n_moves) per second, all chains; mean jump: Hamming distance "
        "between the states before and after an outer step (0 if rejected), mean over steps and chains; "
        "ESJD(lp)/s: mean over steps and chains of (lp after - lp before)^2, per second of stepping; copies: "
        "masked copies through the model (the surrogate's cast model counted apart from the target's); "
        "model s: seconds inside the model's forward passes; acceptance counts a proposal that changes nothing "
        "as accepted (the kernels' convention)\n",
        flush=True,
    )


def sweep_variant(mlm, dist, start, options, seconds):
    target, surrogate = counters_for(mlm, options)
    kernel = make(dist, options)
    acc = dict(steps=0, n_moves=0, accepted=0.0, inner=0.0, jump=0.0, sq_lp=0.0)

    def record(i, t, before, after, lp_before, stats):
        acc["steps"] += 1
        acc["n_moves"] += int(stats["n_moves"].sum())
        acc["accepted"] += float(stats["is_accepted"].float().mean())
        if "inner_acceptance" in stats:
            acc["inner"] += float(stats["inner_acceptance"].float().mean())
        acc["jump"] += float((after != before).sum(-1).double().mean())
        acc["sq_lp"] += float(((stats["lp"].double() - lp_before) ** 2).mean())

    wall = run_steps(kernel, start, 1, seconds, [target, surrogate], record)
    n = acc["steps"]
    return dict(
        name=variant_name(options),
        options=options,
        seconds=wall,
        steps=n,
        s_per_step=wall / n,
        outer_acceptance=acc["accepted"] / n,
        inner_acceptance=None if options is None else acc["inner"] / n,
        n_moves=acc["n_moves"],
        moves_per_s=acc["n_moves"] / wall,
        mean_jump=acc["jump"] / n,
        esjd_lp_per_step=acc["sq_lp"] / n,
        esjd_lp_per_s=acc["sq_lp"] / wall,
        target_copies=target.rows,
        target_copies_per_s=target.rows / wall,
        target_copies_per_step=target.rows / n,
        target_model_s=target.seconds,
        surrogate_copies=None if surrogate is None else surrogate.rows,
        surrogate_copies_per_s=None if surrogate is None else surrogate.rows / wall,
        surrogate_copies_per_step=None if surrogate is None else surrogate.rows / n,
        surrogate_model_s=None if surrogate is None else surrogate.seconds,
    )


# ---------------------------------------------------------------------- side by side
def side_options(args):
    """The one surrogate variant of the side-by-side run."""
    values = [args.inner_steps or "default", args.contexts, args.surrogate_dtype, args.frames]
    if any("," in v for v in values):
        raise SystemExit(
            "--parts surrogate runs one surrogate variant: give single values of --inner-steps, "
            "--contexts, --surrogate-dtype and --frames"
        )
    return options_of(
        parse_k(values[0]),
        parse_r(values[1]),
        parse_values(values[2], parse_dtype, "dtype")[0],
        parse_values(values[3], parse_frame, "--frames")[0],
    )


def worker(args):
    """One side of the side-by-side run: one thread, ``--minutes``, one JSON line per outer step."""
    torch.set_num_threads(1)
    options = None if args.worker == "mh" else side_options(args)
    mlm, dist, start, reference = cdrh3_task(args.device, args.chains, args.starts)
    free = dist.free_positions.cpu()
    target, surrogate = counters_for(mlm, options)
    kernel = make(dist, options)
    with open(args.worker_out, "a") as f:

        def write(line):
            f.write(json.dumps(line) + "\n")
            f.flush()

        write(
            dict(
                header=dict(
                    side=args.worker,
                    name=variant_name(options),
                    options=options,
                    chains=args.chains,
                    free=dist.num_free,
                    minutes=args.minutes,
                    device=str(mlm.device),
                    threads=torch.get_num_threads(),
                    torch=torch.__version__,
                    seed=1,
                    start_free_tokens=start[:, free].tolist(),
                    reference_free_tokens=reference[free].tolist(),
                    pid=os.getpid(),
                    time=time.time(),
                )
            )
        )

        def record(i, t, before, after, lp_before, stats):
            line = dict(
                step=i,
                t=round(t, 4),
                lp=stats["lp"].double().tolist(),
                ham_start=(after[:, free] != start[:, free]).sum(-1).tolist(),
                ham_ref=(after[:, free] != reference[free]).sum(-1).tolist(),
                accepted=stats["is_accepted"].tolist(),
                n_moves=stats["n_moves"].tolist(),
                target_copies=target.rows,
                target_model_s=round(target.seconds, 4),
            )
            if "inner_acceptance" in stats:
                line["inner_acceptance"] = stats["inner_acceptance"].tolist()
            if surrogate is not None:
                line["surrogate_copies"] = surrogate.rows
                line["surrogate_model_s"] = round(surrogate.seconds, 4)
            write(line)

        try:
            run_steps(kernel, start, 1, 60 * args.minutes, [target, surrogate], record)
        except KeyboardInterrupt:
            sys.exit(130)


def ess(traces):
    """Bulk ESS of a (C, D) array of draws (ArviZ, rank-normalised); NaN for fewer than 8 draws
    per chain or constant draws (also used by bench_constraints.py)."""
    import arviz as az

    a = np.asarray(traces, dtype=float)
    if a.shape[1] < 8 or np.std(a) == 0:
        return float("nan")
    return float(az.ess(a, method="bulk"))


def read_log(path):
    """(header, step lines) of a worker's log; a torn last line (a killed worker) is dropped."""
    header, lines = None, []
    with open(path) as f:
        for raw in f:
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if "header" in line:
                header = line["header"]
            else:
                lines.append(line)
    return header, lines


def summarise(a):
    """Bulk ESS (all chains, and each half scaled to all), MCSE of the mean and R-hat of a (C, D)
    array; ``why`` says why they are missing."""
    import arviz as az

    out = dict(mean=float(a.mean()) if a.size else None, ess=None, ess_halves=None, mcse=None, rhat=None, why=None)
    C, D = a.shape
    if D < MIN_DRAWS:
        out["why"] = f"{D} draws per chain, fewer than {MIN_DRAWS}"
        return out
    if np.ptp(a) == 0:
        out["why"] = "constant"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["ess"] = float(az.ess(a, method="bulk"))
        if C >= 2:
            halves = (a[: C // 2], a[C // 2 :])
            out["ess_halves"] = [
                float(az.ess(h, method="bulk")) * C / h.shape[0] if np.ptp(h) > 0 else None for h in halves
            ]
        out["mcse"] = float(az.mcse(a))
        out["rhat"] = float(az.rhat(a))
    ceiling = a.size * math.log10(a.size)  # ArviZ clips the bulk ESS here: at it, the draws are too few to tell
    if out["ess"] >= ceiling - 1e-6:
        out["why"] = f"bulk ESS at ArviZ's ceiling N log10 N = {ceiling:.1f}: too few draws to estimate it"
    elif out["rhat"] > 1.1:
        out["why"] = f"R-hat {out['rhat']:.2f} > 1.1: the chains have not mixed, so the ESS describes a transient"
    return out


def side_part(args):
    """Plain MH and one surrogate variant side by side (or, with --from-logs, their logs)."""
    if args.from_logs:
        log_dir = args.from_logs
        print(f"# reporting the logs in {log_dir} (nothing run)\n", flush=True)
    else:
        side_options(args)  # refuse a bad variant before starting anything
        log_dir = args.log_dir or tempfile.mkdtemp(prefix="bench_side_")
        os.makedirs(log_dir, exist_ok=True)
        print(f"# side-by-side logs: {log_dir}\n", flush=True)
        run_side_by_side(args, log_dir)
    logs = {}
    for side in SIDES:
        path = os.path.join(log_dir, f"{side}.jsonl")
        if os.path.exists(path):
            logs[side] = read_log(path)
        else:
            print(f"no log {path}")
    return report_side_by_side(logs, args.burn, log_dir)


def run_side_by_side(args, log_dir):
    procs = {}
    for side in SIDES:
        out = os.path.join(log_dir, f"{side}.jsonl")
        if os.path.exists(out):
            raise SystemExit(f"{out} exists: give a new --log-dir (or report it with --from-logs {log_dir})")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            side,
            "--worker-out",
            out,
            "--minutes",
            str(args.minutes),
            "--chains",
            str(args.chains),
            "--inner-steps",
            args.inner_steps or "default",
            "--contexts",
            args.contexts,
            "--surrogate-dtype",
            args.surrogate_dtype,
            "--frames",
            args.frames,
        ]
        if args.device:
            cmd += ["--device", args.device]
        if args.starts:
            cmd += ["--starts", args.starts]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        err = open(os.path.join(log_dir, f"{side}.stderr"), "w")
        procs[side] = (subprocess.Popen(cmd, env=env, stderr=err), err)
    print(f"running mh and surrogate side by side for {args.minutes:g} minutes, one thread each\n", flush=True)
    try:
        for side, (proc, err) in procs.items():
            code = proc.wait()
            err.close()
            if code != 0:
                with open(err.name) as f:
                    tail = f.read()[-2000:]
                print(f"worker {side} exited with {code}; the end of its stderr:\n{tail}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: stopping the workers, reporting what they logged", flush=True)
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in procs.values():
            proc.wait()


def report_side_by_side(logs, burn, log_dir):
    result = dict(log_dir=os.path.abspath(log_dir), burn=burn, sides={})
    headers = {side: h for side, (h, _) in logs.items()}
    if len(headers) == 2 and None not in headers.values():
        same = headers["mh"]["start_free_tokens"] == headers["surrogate"]["start_free_tokens"]
        result["same_start"] = same
        if not same:
            print("WARNING: the two sides did not start from the same states\n")
    print(
        "| side | variant | steps | wall s | outer acceptance | accepted moves/s | target copies/s "
        "| surrogate copies/s |"
    )
    print("|---" * 8 + "|")
    for side, (header, lines) in logs.items():
        name = (header or {}).get("name", side)
        if not lines:
            print(f"| {side} | {name} | 0 | - | - | - | - | - |")
            result["sides"][side] = dict(header=header, steps=0)
            continue
        wall = lines[-1]["t"]
        acc = float(np.mean([ln["accepted"] for ln in lines]))
        moves = float(np.sum([ln["n_moves"] for ln in lines]))
        r = dict(
            header=header,
            name=name,
            steps=len(lines),
            wall_s=wall,
            outer_acceptance=acc,
            moves_per_s=moves / wall,
            target_copies_per_s=lines[-1]["target_copies"] / wall,
            target_model_s=lines[-1]["target_model_s"],
            surrogate_copies_per_s=lines[-1]["surrogate_copies"] / wall if "surrogate_copies" in lines[-1] else None,
            surrogate_model_s=lines[-1].get("surrogate_model_s"),
        )
        if "inner_acceptance" in lines[0]:
            r["inner_acceptance"] = float(np.mean([ln["inner_acceptance"] for ln in lines]))
        D = len(lines)
        b = int(burn * D)
        kept_s = wall - (lines[b - 1]["t"] if b else 0.0)
        r.update(burned_steps=b, kept_steps=D - b, kept_s=kept_s)
        for q in QUANTITIES:
            s = summarise(np.array([ln[q] for ln in lines[b:]], dtype=float).T)  # (C, D - b)
            s["ess_per_min"] = s["ess"] / (kept_s / 60) if s["ess"] is not None and kept_s > 0 else None
            r[q] = s
        result["sides"][side] = r
        print(
            f"| {side} | {name} | {D} | {wall:.0f} | {acc:.3f} | {r['moves_per_s']:.3f} "
            f"| {r['target_copies_per_s']:.1f} | {fmt(r['surrogate_copies_per_s'], '.1f')} |"
        )
    sides = {k: v for k, v in result["sides"].items() if v.get("steps")}
    if burn:
        print(
            f"\nburn-in: the first {100 * burn:g}% of each side's draws dropped ("
            + ", ".join(f"{k}: {v['burned_steps']} of {v['steps']}" for k, v in sides.items())
            + "); ESS per minute over the seconds the kept draws took"
        )
    else:
        print("\nno burn-in: every draw kept (--burn FRACTION drops the first fraction)")
    for q, label in QUANTITIES.items():
        print(f"\n### {label}\n")
        print("| side | draws/chain | bulk ESS | ESS/min | ESS halves (x2) | mean | MCSE(mean) | R-hat |")
        print("|---" * 8 + "|")
        for side, r in sides.items():
            s = r[q]
            halves = "-" if s["ess_halves"] is None else " / ".join(fmt(h, ".1f") for h in s["ess_halves"])
            print(
                f"| {side} | {r['kept_steps']} | {fmt(s['ess'], '.1f')} | {fmt(s['ess_per_min'], '.2f')} | {halves} "
                f"| {fmt(s['mean'], '.4g')} | {fmt(s['mcse'], '.3g')} | {fmt(s['rhat'], '.3f')} |"
            )
        for side, r in sides.items():
            if r[q]["why"]:
                shown = "no ESS" if r[q]["ess"] is None else "the ESS is not to be believed"
                print(f"\n{side}, {label}: {shown}: {r[q]['why']}")
    if len(sides) == 2:
        print()
        ratios = result["ratios_ess_per_min"] = {}
        for q, label in QUANTITIES.items():
            a, b = sides["surrogate"][q]["ess_per_min"], sides["mh"][q]["ess_per_min"]
            ratios[q] = a / b if a is not None and b else None
            doubt = any(sides[side][q]["why"] for side in sides)
            print(
                f"surrogate / MH, ESS per minute of {label}: {fmt(ratios[q], '.2f')}"
                + ("x" if ratios[q] else "")
                + (" (not to be believed: see above)" if doubt and ratios[q] else "")
            )
    print(
        "\nouter acceptance counts a move that changes nothing as accepted (the kernels' convention); "
        "Hamming distances over the free positions; ESS halves: chains 0..C/2-1 and C/2..C-1, each scaled to C chains"
    )
    print(f"\nlogs: {os.path.abspath(log_dir)}", flush=True)
    return result


if __name__ == "__main__":
    main()
