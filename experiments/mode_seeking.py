"""Experiment 3: mode seeking (Goyal et al. 2021, section 7): the lowest E_norm reached per second.

For each heavy chain (CDR-H3 masked), compares
* greedy: the left-to-right argmax fill (one forward per masked position);
* greedy + coordinate ascent: then pseudo-Gibbs with top_k=1 (each step sets one random position
  to the argmax of its conditional), from the greedy fill;
* mask-predict with 4 iterations and with one iteration per masked position;
* annealed MH: MH on E_norm, target temperature lowered geometrically from 1 to 0.05 over the
  run (mlm_ppl.inference.geometric_annealing), C chains from sampled fills; the best state of
  any chain counts.
Only the sampler's own work is timed; the E_norm of states that a method does not compute
itself (greedy, coordinate ascent, mask-predict) is evaluated outside the clock. Whole chains;
default: two chains, 4 annealed MH chains x 30 steps, 30 ascent steps, bfloat16 (about 10
minutes on 2 CPU cores); --full: four chains, 8 x 400, float32.

    python experiments/mode_seeking.py [--smoke | --full] [--out docs/reproductions/mode_seeking]

Writes config.json, trace.csv (method, chain, seconds, best E_norm so far), summary.txt and
mode_seeking.png.
"""

from __future__ import annotations

from _common import Clock, cdr3_tasks, decoded, parser, pyplot, setup, size, write_csv
from mlm_ppl import MaskedLMDistribution, MaskPredict, MetropolisHastings, PseudoGibbs
from mlm_ppl.inference import ChainStreams, fill_template, geometric_annealing


def trace_mh(target, cfg, seed):
    """Annealed MH: (seconds, best E_norm) after every step, and the best sequence."""
    gen = ChainStreams(seed, cfg["chains"])
    kernel = MetropolisHastings(target, temperature_schedule=geometric_annealing(1.0, 0.05, cfg["mh_steps"]))
    clock = Clock()
    with clock:
        state = kernel.init(fill_template(target, cfg["chains"], gen, "sample"))
    best = state.energy.min()
    best_tokens = state.tokens[state.energy.argmin()]
    points = [(clock.seconds, float(best))]
    for _ in range(cfg["mh_steps"]):
        with clock:
            state, _ = kernel.step(state, gen)
        if state.energy.min() < best:
            best, best_tokens = state.energy.min(), state.tokens[state.energy.argmin()]
        points.append((clock.seconds, float(best)))
    return points, best_tokens


def trace_greedy(target, cfg, seed):
    """Greedy fill, then coordinate ascent (pseudo-Gibbs, top_k=1)."""
    gen = ChainStreams(seed, 1)
    clock = Clock()
    with clock:
        tokens = fill_template(target, 1, gen, "greedy")
    greedy = [(clock.seconds, float(target.evaluate(tokens).energy[0]))]
    kernel = PseudoGibbs(target, top_k=1)
    state = kernel.init(tokens)
    best, best_tokens = greedy[0][1], tokens[0]
    ascent = list(greedy)
    for _ in range(cfg["ascent_steps"]):
        with clock:
            state, info = kernel.step(state, gen)
        if int(info.n_changed[0]) > 0:  # only a changed state needs a new energy
            e = float(target.evaluate(state.tokens).energy[0])
            if e < best:
                best, best_tokens = e, state.tokens[0]
        ascent.append((clock.seconds, best))
    return greedy, tokens[0], ascent, best_tokens


def trace_mask_predict(target, iterations: int):
    kernel = MaskPredict(target, iterations=iterations)
    clock = Clock()
    with clock:
        state = kernel.init(target.template[None])
        for _ in range(iterations):
            state, _ = kernel.step(state)
    return [(clock.seconds, float(target.evaluate(state.tokens).energy[0]))], state.tokens[0]


def main() -> None:
    args = parser(__doc__, "docs/reproductions/mode_seeking").parse_args()
    cfg = size(
        args,
        smoke=dict(tasks=1, chains=2, mh_steps=3, ascent_steps=3),
        default=dict(tasks=2, chains=4, mh_steps=30, ascent_steps=30),
        full=dict(tasks=4, chains=8, mh_steps=400, ascent_steps=400),
    )
    mlm, out = setup(args, cfg)
    rows, lines = [], []
    traces = {}
    for task in cdr3_tasks(cfg["tasks"]):
        target = MaskedLMDistribution(mlm, task["template"], energy="norm")
        F = target.num_free
        original = float(mlm.score(task["sequence"])[0])
        results = {}
        greedy, greedy_tokens, ascent, best_tokens = trace_greedy(target, cfg, args.seed)
        results["greedy"] = (greedy, greedy_tokens)
        results["greedy+ascent"] = (ascent, best_tokens)
        for it in sorted({min(4, F), F}):
            results[f"mask-predict-{it}"] = trace_mask_predict(target, it)
        results["annealed-mh"] = trace_mh(target, cfg, args.seed)
        traces[task["name"]] = {k: v[0] for k, v in results.items()}
        lines.append(
            f"{task['name']}: CDR-H3 {task['cdr3']} ({F} masked), {len(task['sequence'])} residues; "
            f"E_norm of the original {original:.2f}"
        )
        for name, (points, tokens) in results.items():
            for s, e in points:
                rows.append({"chain": task["name"], "method": name, "seconds": s, "best_e_norm": e})
            cdr3 = decoded(mlm, tokens[None])[0][task["cdr3_slice"]]
            lines.append(f"  {name:<16} best E_norm {points[-1][1]:8.2f} after {points[-1][0]:7.1f} s  {cdr3}")
        lines.append("")
    write_csv(out / "trace.csv", rows)
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    print(text)

    plt = pyplot()
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 3.8), squeeze=False)
    for ax, (chain, methods) in zip(axes[0], traces.items()):
        for name, points in methods.items():
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            if len(points) == 1:
                ax.scatter(xs, ys, label=name, zorder=3)
            else:
                ax.step(xs, ys, where="post", label=name)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("seconds of sampler compute")
        ax.set_ylabel("lowest E_norm so far (nats)")
        ax.set_title(chain, fontsize=9)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "mode_seeking.png", dpi=110)
    print(f"wrote {out}/trace.csv, summary.txt, mode_seeking.png")


if __name__ == "__main__":
    main()
