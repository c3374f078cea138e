"""Which part of the reference convention moves Arnold-Gokhale's faithfulness: the 40 plain
steps, or the whole-vocabulary support?

For N contiguous pairs of human heavy-chain germline V genes (seed 0, the pairs of
``docs/pairs/contiguous``), reads the conditionals over the ordinary tokens and over every
token id (``support="all"``), and reports ``kl_fwd_all`` of AG converged and after 40 plain
steps (``REFERENCE_AG``) beside naive, HCB and MRF-logit, and on how many pairs AG is below all
three. Quoted in docs/pairs.md.

    python benchmarks/ag_steps_or_support.py [--n 40]
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from mlm_ppl import load_mlm, pair_conditionals
from mlm_ppl.data import germline_sequences
from mlm_ppl.evaluation import draw_pairs, pair_metrics
from mlm_ppl.evaluation.pairs import REFERENCE_AG

OTHERS = ("naive", "hcb", "mrf_logit")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40, help="contiguous pairs")
    args = parser.parse_args()
    mlm = load_mlm("antiberty")
    seqs = list(germline_sequences("human", "H", "V").values())
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s, a, b in draw_pairs(mlm, seqs, "contiguous", args.n, 0):
        for support in ("ordinary", "all"):
            cond = pair_conditionals(mlm, seqs[s], a, b, support=None if support == "ordinary" else "all")
            joints = {"ag converged": cond.joint("ag"), "ag 40 plain steps": cond.joint("ag", **REFERENCE_AG)}
            joints.update({m: cond.joint(m) for m in OTHERS})
            for name, joint in joints.items():
                values[support, name].append(pair_metrics(joint, cond)["kl_fwd_all"])
    print(f"kl_fwd_all over {args.n} contiguous pairs (mean, median)")
    for support in ("ordinary", "all"):
        for name in ("ag converged", "ag 40 plain steps", *OTHERS):
            v = values[support, name]
            print(f"  support {support:<8} {name:<18} {statistics.mean(v):.3g}  {statistics.median(v):.3g}")
        for name in ("ag converged", "ag 40 plain steps"):
            ag = values[support, name]
            below = sum(ag[i] < min(values[support, m][i] for m in OTHERS) for i in range(args.n))
            print(f"  support {support:<8} {name} below naive, hcb and mrf_logit on {below}/{args.n} pairs")


if __name__ == "__main__":
    main()
