"""Where memorized loops lie: the designed positions' mean conditional probability on AntiBERTy.

A loop whose residues the model predicts from the rest at ~99% each is most likely one it was
trained on. This measures ``site_prob`` (the mean over a window of ``p(x_t | x_\\t)``, each residue
read with only itself masked: :func:`mlm_ppl.diagnostics.site_scores`) for

  germline        13-residue windows of real human heavy-chain V genes (anarci's IMGT table; each
                  gene completed into a chain by the example CDR-H3 body and IGHJ4), three windows
                  a gene: residues 26-38 (CDR-H1 and around), 49-61 (CDR-H2), 84-96 (framework 3).
                  Every antibody repertoire holds these: the model has seen them by the thousand.
  shuffled        the same windows with their 13 residues shuffled (seeded): the same composition,
                  an order nobody trained on.
  example CDR-H3  the CDR-H3 of the library's four example chains (V + D-derived body + J).
  memorized loop  ARESEDLTSNFDY in the example chain's frame: the converge run's deepest state.
  run draws       the converge run's distinct states (docs/converge/run/run.nc, when it holds the
                  column), each state once.

and prints, per group, quantiles and the share at or above candidate thresholds. No timing.

    python benchmarks/memorization.py [--genes 0] [--run docs/converge/run]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch

from mlm_ppl import load_mlm
from mlm_ppl.data import HEAVY_CHAINS, example_heavy_chain, germline_sequences, heavy_chain, shuffled
from mlm_ppl.models.energy import site_log_probs

WINDOWS = (25, 48, 83)  # 0-based first residue of each 13-residue window of a V gene
WIDTH = 13
THRESHOLDS = (0.8, 0.85, 0.9, 0.95)


def window_prob(mlm, sequences: list[str], starts: list[int], width: int = WIDTH) -> np.ndarray:
    """site_prob of the window [start, start + width) of each sequence (residue indices)."""
    out = []
    for seq, start in zip(sequences, starts):
        enc = mlm.encode([seq])
        residues = enc.scorable[0].nonzero().flatten()  # token position of each residue
        positions = residues[start : start + width].tolist()
        logp = site_log_probs(mlm, enc.input_ids, positions)
        out.append(float(logp.exp().mean()))
    return np.array(out)


def row(name: str, values: np.ndarray) -> str:
    q = np.quantile(values, [0.0, 0.05, 0.5, 0.95, 1.0])
    cells = [f"{v:.3f}" for v in q] + [f"{(values >= t).mean():.1%}" for t in THRESHOLDS]
    return f"| {name} | {len(values)} | " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--genes", type=int, default=0, help="V genes to read (0: all)")
    parser.add_argument("--run", default="docs/converge/run", help="a run directory whose run.nc holds site_prob")
    args = parser.parse_args()
    torch.manual_seed(0)
    mlm = load_mlm("antiberty")
    genes = germline_sequences("human", "H", "V")
    names = [n for n in genes if len(genes[n]) >= 96][: args.genes or None]
    chains, starts = [], []
    for name in names:
        seq, _ = heavy_chain(name, "DRGYSSGW", "IGHJ4")
        for w in WINDOWS:
            chains.append(seq)
            starts.append(w)
    real = window_prob(mlm, chains, starts)
    mixed = [
        s[:w] + shuffled(s[w : w + WIDTH], seed=i) + s[w + WIDTH :] for i, (s, w) in enumerate(zip(chains, starts))
    ]
    shuffled_prob = window_prob(mlm, mixed, starts)
    cdr3 = []
    for v, body, j in HEAVY_CHAINS:
        seq, cut = heavy_chain(v, body, j)
        cdr3.append(window_prob(mlm, [seq], [cut.start], cut.stop - cut.start)[0])
    example, cut = example_heavy_chain()
    deep = example[: cut.start] + "ARESEDLTSNFDY" + example[cut.stop :]
    memorized = window_prob(mlm, [deep], [cut.start])
    header = " | ".join(f">= {t}" for t in THRESHOLDS)
    print(f"site_prob on AntiBERTy ({len(names)} human heavy V genes, {len(WINDOWS)} windows of {WIDTH} residues each)")
    print()
    print(f"| group | n | min | 5% | median | 95% | max | {header} |")
    print("|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(THRESHOLDS))
    print(row("germline V windows", real))
    print(row("the same windows shuffled", shuffled_prob))
    print(row("example CDR-H3s", np.array(cdr3)))
    print(row("ARESEDLTSNFDY (example frame)", memorized))
    nc = os.path.join(args.run, "run.nc")
    if os.path.isfile(nc):
        from mlm_ppl.diagnostics import read_run

        idata = read_run(nc)
        if "site_prob" in idata.posterior:
            tokens = idata.posterior["tokens"].values
            flat = tokens.reshape(-1, tokens.shape[-1])
            _, first = np.unique(flat, axis=0, return_index=True)
            prob = idata.posterior["site_prob"].values.reshape(-1)[first]
            print(row(f"{args.run} distinct states", prob))


if __name__ == "__main__":
    main()
