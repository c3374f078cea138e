"""Why exp(-E_norm) over lengths weighs long loops: the loop's mean term per residue at each length.

Reads a run over a variable gap (default ``docs/lengths/run``, from its checkpoint when its
``run.nc`` is older) and, at each length of its prior, draws ``--per-length`` of its draws of that
length (seeded, uniformly among them) and reads their loops' own ``E_norm`` terms with the model
(:func:`mlm_ppl.diagnostics.site_scores`; the run's own ``site_energy`` column where it has one).
Prints, per length: the run's draws there, the mean term per residue ``site_energy / L`` over the
sampled draws with its standard error, and ``log 20`` beside it.

While the mean term per residue stays below ``log 20`` (about 3.0 nats: the term of a residue the
model has no opinion about), one residue more multiplies the number of loops by 20 and their
weight ``exp(-E)`` by less than 20 only: the total weight ``Z_L`` of length-``L`` loops grows with
``L``, and ``exp(-E_norm)`` over lengths puts its mass on the long ones, whatever the model knows
of lengths.

    python experiments/length_terms.py [--run docs/lengths/run] [--per-length 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from mlm_ppl.campaign.current import read_current
from mlm_ppl.diagnostics import site_scores
from mlm_ppl.diagnostics.data import attr_list
from mlm_ppl.diagnostics.lengths import gap_lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default="docs/lengths/run")
    parser.add_argument("--per-length", type=int, default=20, help="draws read at each length (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    current = read_current(args.run)
    idata = current.idata
    lengths = gap_lengths(idata)
    if lengths is None:
        raise SystemExit(f"{args.run} is a run of one length; give a run over a variable gap")
    mlm = current.mlm
    if mlm is None and "site_energy" not in idata.posterior:
        from mlm_ppl import load_mlm

        mlm = load_mlm(str(idata.attrs["model"]))
    tokens = np.asarray(idata.posterior["tokens"].values)
    C, D, T = tokens.shape
    flat = tokens.reshape(C * D, T)
    length = np.asarray(idata.posterior["length"].values).reshape(-1)
    free = [int(p) for p in attr_list(idata.attrs, "free_positions")]
    pad = int(idata.attrs["pad_id"])
    rng = np.random.default_rng(args.seed)
    print(current.source)
    print()
    print(f"| length | draws | read | mean term per residue (nats) | SE | log 20 = {math.log(20):.3f} minus it |")
    print("|---:|---:|---:|---:|---:|---:|")
    for L in lengths:
        rows = np.flatnonzero(length == L)
        if rows.size == 0:
            print(f"| {L} | 0 | 0 | - | - | - |")
            continue
        pick = rng.choice(rows, size=min(args.per_length, rows.size), replace=False)
        if "site_energy" in idata.posterior:
            energy = np.asarray(idata.posterior["site_energy"].values).reshape(-1)[pick]
        else:
            scores = site_scores(flat[pick][:, None, :], free, mlm, pad_id=pad)
            assert scores is not None
            energy = scores["site_energy"][:, 0]
        per = energy / L
        se = per.std(ddof=1) / math.sqrt(per.size) if per.size > 1 else float("nan")
        print(f"| {L} | {rows.size} | {per.size} | {per.mean():.3f} | {se:.3f} | {math.log(20) - per.mean():.3f} |")


if __name__ == "__main__":
    main()
