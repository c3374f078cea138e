"""Experiment 2: does pseudo-Gibbs sample the energy? (Goyal et al. 2021, sections 3 and 6)

Part A, exact, on a tiny BERT over four residues in float64 (mlm_ppl.testing.tiny_residue_bert("ACDE"),
template A[MASK]C[MASK][MASK], 64 states): the distribution of every sampler after n single-site
steps, p0 P^n from one start (the least likely state under E_norm), computed from the kernels'
exact transition matrices, and its total-variation distance to exp(-E_norm) and exp(-E_raw).
Samplers: pseudo-Gibbs (random scan), MH on E_norm, MH on E_raw, block MH on E_norm (blocks of 2).

Part B, on the real model: C chains of pseudo-Gibbs and C chains of MH on E_norm from the same
starts (one left-to-right sampled fill of a whole heavy chain's CDR-H3), E_norm of every state
over the iterations, and ArviZ diagnostics (R-hat, ESS of lp = -E_norm; a verdict per chain).
Default: 4 chains x 20 steps each, bfloat16 (about 5 minutes on 2 CPU cores); --full: 8 x 400,
float32.

    python experiments/pseudo_gibbs.py [--smoke | --full] [--out docs/reproductions/pseudo_gibbs]

Writes config.json, exact_tv.csv, exact_tv.png, energies.csv, energies.png, diagnostics.txt.
"""

from __future__ import annotations

import warnings

import torch

from _common import Clock, cdr3_tasks, parser, pyplot, setup, size, write_csv
from mlm_ppl import MaskedLMDistribution, MetropolisHastings, PseudoGibbs, run_chains, summary, to_inference_data
from mlm_ppl.inference import ChainStreams, exact, fill_template
from mlm_ppl.testing import tiny_residue_bert

TINY_TEMPLATE = "A[MASK]C[MASK][MASK]"


def exact_part(steps: int, out) -> list[dict]:
    # float64: the exact laws and the stationary solve are then free of float32 rounding, which
    # differs between CPUs (MH's limit is its target to ~1e-13 instead of ~1e-5)
    mlm = tiny_residue_bert("ACDE", seed=1, dtype=torch.float64)
    norm = MaskedLMDistribution(mlm, TINY_TEMPLATE, energy="norm")
    raw = MaskedLMDistribution(mlm, TINY_TEMPLATE, energy="raw")
    states = exact.enumerate_states(norm)
    pi = {"norm": exact.exact_log_probs(norm, states).exp(), "raw": exact.exact_log_probs(raw, states).exp()}
    start = int(torch.argmin(pi["norm"]))
    samplers = {
        "pseudo-gibbs": PseudoGibbs(norm, scan="random"),
        "mh-norm": MetropolisHastings(norm, scan="random"),
        "mh-raw": MetropolisHastings(raw, scan="random"),
        "block-mh-norm": MetropolisHastings(norm, scan="random", block_size=2),
    }
    rows = []
    for name, kernel in samplers.items():
        P = exact.transition_matrix(kernel, states)
        p = torch.zeros(len(states), dtype=torch.float64)
        p[start] = 1.0
        for n in range(steps + 1):
            rows.append(
                {
                    "sampler": name,
                    "step": n,
                    "tv_norm": exact.total_variation(p, pi["norm"]),
                    "tv_raw": exact.total_variation(p, pi["raw"]),
                }
            )
            p = p @ P
        limit = exact.stationary_distribution(P)
        rows.append(
            {
                "sampler": name,
                "step": "stationary",
                "tv_norm": exact.total_variation(limit, pi["norm"]),
                "tv_raw": exact.total_variation(limit, pi["raw"]),
            }
        )
    write_csv(out / "exact_tv.csv", rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, target in zip(axes, ("norm", "raw")):
        for name in samplers:
            mine = [r for r in rows if r["sampler"] == name and r["step"] != "stationary"]
            ax.plot([r["step"] for r in mine], [max(r[f"tv_{target}"], 1e-12) for r in mine], label=name)
        ax.set_yscale("log")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("steps (a block step counts once)")
        ax.set_title(f"TV to exp(-E_{target}), 64 states", fontsize=9)
    axes[0].set_ylabel("total variation")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "exact_tv.png", dpi=110)
    return rows


def chains_part(mlm, cfg, seed: int, out) -> str:
    task = cdr3_tasks(1)[0]
    target = MaskedLMDistribution(mlm, task["template"], energy="norm")
    starts = fill_template(target, cfg["chains"], ChainStreams(seed, cfg["chains"]), "sample")
    runs, seconds = {}, {}
    for name, kernel in (
        ("pseudo-gibbs", PseudoGibbs(target, compute_lp=True)),
        ("mh-norm", MetropolisHastings(target)),
    ):
        with Clock() as clock:
            runs[name] = run_chains(kernel, cfg["chains"], cfg["steps"], seed=seed, init=starts.clone())
        seconds[name] = clock.seconds
    start_energy = target.evaluate(starts).energy
    rows = []
    for name, run in runs.items():
        for c in range(run.num_chains):
            rows.append({"sampler": name, "chain": c, "step": 0, "e_norm": float(start_energy[c])})
            for d in range(run.num_draws):
                rows.append({"sampler": name, "chain": c, "step": d + 1, "e_norm": float(-run.stats["lp"][c, d])})
    write_csv(out / "energies.csv", rows)
    lines = [
        f"{task['name']}, CDR-H3 {task['cdr3']} masked ({len(task['sequence'])} residues); "
        f"{cfg['chains']} chains x {cfg['steps']} steps per sampler from the same starts",
        "",
    ]
    for name, run in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ArviZ warns on short chains; the verdicts say it
            report = summary(to_inference_data(run, mlm=mlm))
        lines += [
            f"== {name}: {seconds[name]:.1f} s; final E_norm per chain "
            + ", ".join(f"{-float(v):.2f}" for v in run.stats["lp"][:, -1]),
            str(report),
            "",
        ]
    text = "\n".join(lines)
    (out / "diagnostics.txt").write_text(text + "\n")

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, colour in (("pseudo-gibbs", "tab:red"), ("mh-norm", "tab:blue")):
        mine = [r for r in rows if r["sampler"] == name]
        for c in range(cfg["chains"]):
            pts = [r for r in mine if r["chain"] == c]
            ax.plot([r["step"] for r in pts], [r["e_norm"] for r in pts], color=colour, alpha=0.35, lw=0.8)
        steps = sorted({r["step"] for r in mine})
        ax.plot(
            steps,
            [sum(r["e_norm"] for r in mine if r["step"] == s) / cfg["chains"] for s in steps],
            color=colour,
            lw=2,
            label=f"{name} (mean of {cfg['chains']})",
        )
    ax.set_xlabel("step")
    ax.set_ylabel("E_norm of the state (nats)")
    ax.set_title(f"{mlm.name}: {task['name']} CDR-H3, same starts", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "energies.png", dpi=110)
    return text


def main() -> None:
    args = parser(__doc__, "docs/reproductions/pseudo_gibbs").parse_args()
    cfg = size(
        args,
        smoke=dict(exact_steps=10, chains=2, steps=3),
        default=dict(exact_steps=1000, chains=4, steps=20),
        full=dict(exact_steps=2000, chains=8, steps=400),
    )
    mlm, out = setup(args, cfg)
    rows = exact_part(cfg["exact_steps"], out)
    print("exact TV after the last step and of the stationary distribution:")
    for name in dict.fromkeys(r["sampler"] for r in rows):
        last = [r for r in rows if r["sampler"] == name]
        print(
            f"  {name:<14} step {last[-2]['step']}: TV to E_norm {last[-2]['tv_norm']:.4f}, to E_raw "
            f"{last[-2]['tv_raw']:.4f}   stationary: {last[-1]['tv_norm']:.4f}, {last[-1]['tv_raw']:.4f}"
        )
    print()
    print(chains_part(mlm, cfg, args.seed, out))
    print(f"wrote {out}/exact_tv.csv, exact_tv.png, energies.csv, energies.png, diagnostics.txt")


if __name__ == "__main__":
    main()
