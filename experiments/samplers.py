"""Experiment 1: samplers compared on CDR-H3 infilling (Goyal et al. Tables 2 and 4, Wang & Cho Table 1 in spirit).

For each heavy chain (real human germline V + D-derived body + J, mlm_ppl.data.HEAVY_CHAINS)
the CDR-H3 is masked and refilled by pseudo-Gibbs (Wang & Cho), MH on E_raw, MH on E_norm,
block MH (E_norm, blocks of 2) and mask-predict, at target temperatures 1.0 and 0.8 (pseudo-Gibbs:
its conditionals tempered by T; MH: the target exp(-E/T), proposals from the MLM at proposal
temperature 1; mask-predict: greedy, no temperature). All chains of a chain/temperature start
from the same left-to-right sampled fill. Per sampler it reports: mean E_norm and E_raw of the
samples (whole chain), BLEU of the sampled CDR-H3s against the references (the CDR-H3s of all
four chains), self-BLEU, unique n-grams (n = 2, 3, 4) relative to the references and within
the samples, acceptance and novel-transition rates, identity to the nearest human V germline
(the sample up to the end of its CDR-H3), pairwise identity of the sampled CDR-H3s, and the
wall time.

Whole chains (120-122 residues): AntiBERTy is far out of distribution on fragments (a
44-residue FR3-CDR3-FR4 fragment scores 3.5 nats per residue against 0.08 for the whole chain).
The default size fits in about 20 minutes on 2 CPU cores: two chains, 4 chains per sampler,
12 steps, the model in bfloat16 (MH is then exact for the bfloat16 model's energy); --full runs
four chains, 8 chains per sampler, 200 steps, float32 (for a GPU).

    python experiments/samplers.py [--smoke | --full] [--out docs/reproductions/samplers]

Writes config.json, runs.csv (one row per chain, temperature and sampler), samples.csv (every
sampled CDR-H3), summary.csv (means over chains), summary.txt and samplers.png.
"""

from __future__ import annotations

import statistics

from _common import Clock, cdr3_tasks, decoded, parser, pyplot, reference_cdr3s, setup, size, write_csv
from mlm_ppl import MaskedLMDistribution, run_chains
from mlm_ppl.data import germline_sequences
from mlm_ppl.evaluation import (
    corpus_bleu,
    mean_pairwise_identity,
    nearest_germline,
    sample_energies,
    self_bleu,
    transition_rates,
    unique_ngrams,
)
from mlm_ppl.inference import make_kernel

SAMPLERS = {
    "pseudo-gibbs": ("pseudo-gibbs", {}),
    "mh-raw": ("mh", {"energy": "raw"}),
    "mh-norm": ("mh", {"energy": "norm"}),
    "block-mh": ("mh", {"energy": "norm", "block_size": 2}),
    "mask-predict": ("mask-predict", {}),
}
METRICS = (
    "e_norm",
    "e_raw",
    "bleu",
    "self_bleu",
    "unique2_ref",
    "unique3_ref",
    "unique4_ref",
    "unique2_self",
    "unique3_self",
    "unique4_self",
    "acceptance_rate",
    "novel_transition_rate",
    "germline_identity",
    "pairwise_identity",
    "seconds",
)


def main() -> None:
    args = parser(__doc__, "docs/reproductions/samplers").parse_args()
    cfg = size(
        args,
        smoke=dict(tasks=1, temperatures=[1.0], chains=2, draws=2, warmup=1, thin=1),
        default=dict(tasks=2, temperatures=[1.0, 0.8], chains=4, draws=2, warmup=8, thin=2),
        full=dict(tasks=4, temperatures=[1.0, 0.8], chains=8, draws=20, warmup=100, thin=5),
    )
    mlm, out = setup(args, cfg)
    refs = reference_cdr3s()
    germlines = germline_sequences("human", "H", "V")
    rows, samples = [], []
    total = Clock()
    for task in cdr3_tasks(cfg["tasks"]):
        sl = task["cdr3_slice"]
        for T in cfg["temperatures"]:
            for name, (kernel, opts) in SAMPLERS.items():
                opts = dict(opts)
                energy = opts.pop("energy", "norm")
                if kernel == "pseudo-gibbs":
                    opts["proposal_temperature"] = T
                if kernel == "mask-predict":
                    opts["iterations"] = sl.stop - sl.start
                    draws, warmup, thin = 1, sl.stop - sl.start - 1, 1
                else:
                    draws, warmup, thin = cfg["draws"], cfg["warmup"], cfg["thin"]
                with Clock() as clock, total:
                    target = MaskedLMDistribution(
                        mlm, task["template"], energy=energy, temperature=T if kernel == "mh" else 1.0
                    )
                    run = run_chains(
                        make_kernel(kernel, target, **opts),
                        cfg["chains"],
                        draws,
                        warmup_steps=warmup,
                        thin=thin,
                        seed=args.seed,
                    )
                seqs = decoded(mlm, run.tokens.reshape(-1, run.tokens.shape[-1]))
                cdr3s = [s[sl] for s in seqs]
                samples += [
                    {
                        "chain": task["name"],
                        "temperature": T,
                        "sampler": name,
                        "mcmc_chain": i // draws,
                        "draw": i % draws,
                        "cdr3": c,
                    }
                    for i, c in enumerate(cdr3s)
                ]
                row = {
                    "chain": task["name"],
                    "temperature": T,
                    "sampler": name,
                    "samples": len(seqs),
                    "steps": warmup + draws * thin,
                    **sample_energies(mlm, seqs),
                    "bleu": 100 * corpus_bleu(cdr3s, refs),
                    "self_bleu": 100 * self_bleu(cdr3s),
                }
                for n in (2, 3, 4):
                    row[f"unique{n}_ref"] = unique_ngrams(cdr3s, refs, n=n)
                    row[f"unique{n}_self"] = unique_ngrams(cdr3s, n=n)
                rates = (
                    transition_rates(run)
                    if kernel != "mask-predict"
                    else {"acceptance_rate": float("nan"), "novel_transition_rate": float("nan")}
                )
                row.update(rates)
                row["germline_identity"] = statistics.mean(nearest_germline(s[: sl.stop], germlines)[1] for s in seqs)
                row["pairwise_identity"] = mean_pairwise_identity(cdr3s)
                row["seconds"] = clock.seconds
                row["example"] = cdr3s[0]
                rows.append(row)
                print(
                    f"{task['name']:<18} T={T:<4} {name:<13} E_norm {row['e_norm']:8.2f}  E_raw {row['e_raw']:9.2f}  "
                    f"BLEU {row['bleu']:5.1f}  self-BLEU {row['self_bleu']:5.1f}  "
                    f"novel {row['novel_transition_rate']:.2f}  {clock.seconds:6.1f} s  {cdr3s[0]}",
                    flush=True,
                )
    write_csv(out / "runs.csv", rows)
    write_csv(out / "samples.csv", samples)

    summary = []
    for T in cfg["temperatures"]:
        for name in SAMPLERS:
            mine = [r for r in rows if r["temperature"] == T and r["sampler"] == name]
            summary.append(
                {"temperature": T, "sampler": name, **{m: statistics.mean(r[m] for r in mine) for m in METRICS}}
            )
    write_csv(out / "summary.csv", summary)
    header = (
        f"{'T':<4} {'sampler':<13} {'E_norm':>8} {'E_raw':>9} {'BLEU':>6} {'sBLEU':>6} {'u2ref':>6} {'u4ref':>6} "
        f"{'u4self':>6} {'acc':>5} {'novel':>5} {'germ.id':>7} {'pair.id':>7} {'sec':>7}"
    )
    lines = [f"means over {cfg['tasks']} heavy chain(s); {cfg['chains']} chains each; see runs.csv", "", header]
    for s in summary:
        lines.append(
            f"{s['temperature']:<4} {s['sampler']:<13} {s['e_norm']:8.2f} {s['e_raw']:9.2f} {s['bleu']:6.1f} "
            f"{s['self_bleu']:6.1f} {s['unique2_ref']:6.1f} {s['unique4_ref']:6.1f} {s['unique4_self']:6.1f} "
            f"{s['acceptance_rate']:5.2f} {s['novel_transition_rate']:5.2f} {s['germline_identity']:7.3f} "
            f"{s['pairwise_identity']:7.3f} {s['seconds']:7.1f}"
        )
    lines.append(f"\ntotal sampling wall time {total.seconds:.0f} s")
    text = "\n".join(lines)
    (out / "summary.txt").write_text(text + "\n")
    print("\n" + text)

    plt = pyplot()
    panels = [
        ("e_norm", "mean E_norm (nats)"),
        ("bleu", "BLEU vs references"),
        ("self_bleu", "self-BLEU"),
        ("novel_transition_rate", "novel-transition rate"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    names = list(SAMPLERS)
    width = 0.8 / len(cfg["temperatures"])
    for ax, (metric, title) in zip(axes, panels):
        for k, T in enumerate(cfg["temperatures"]):
            vals = [next(s[metric] for s in summary if s["sampler"] == n and s["temperature"] == T) for n in names]
            ax.bar([i + k * width for i in range(len(names))], vals, width, label=f"T={T}")
        ax.set_xticks(
            [i + width * (len(cfg["temperatures"]) - 1) / 2 for i in range(len(names))],
            names,
            rotation=30,
            ha="right",
            fontsize=8,
        )
        ax.set_title(title, fontsize=9)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"CDR-H3 infilling, {mlm.name}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "samplers.png", dpi=110)
    print(f"wrote {out}/runs.csv, summary.csv, summary.txt, samplers.png")


if __name__ == "__main__":
    main()
