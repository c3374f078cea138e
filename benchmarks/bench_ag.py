"""Arnold-Gokhale on real AntiBERTy pairs: the reference code's 40 steps, the plain iteration, SQUAREM.

Reads the conditionals of N pairs of human heavy-chain germline V genes (half contiguous,
half random positions, full 20-residue support) once, then for every pair runs

* ``plain-40``: 40 plain fixed-point steps from the uniform joint (Torroba Hennigen & Kim's
  code's setting, --iter-steps 40);
* ``plain``: the plain iteration until the KKT residual is below ``--tol`` (cap ``--cap``);
* ``squarem``: the library's default, accelerated, same stopping rule;

and prints, per variant, the median map evaluations and seconds, how many pairs reached the
tolerance, and the objective ``J`` (summed forward KL) above the best value found for the
pair, with ``kl_fwd_all`` (``J / (K_a + K_b)``, the metric of ``mlm-ppl pairs``).

    python benchmarks/bench_ag.py [--n 16] [--tol 1e-6] [--cap 100000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from mlm_ppl import load_mlm, pair_conditionals
from mlm_ppl.data import germline_sequences
from mlm_ppl.evaluation import draw_pairs
from mlm_ppl.models.pairs import pair_joint, summed_kl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="pairs (half contiguous, half random)")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("--cap", type=int, default=100000, help="cap on map evaluations of the plain iteration")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    mlm = load_mlm("antiberty")
    seqs = list(germline_sequences("human", "H", "V").values())
    pairs = draw_pairs(mlm, seqs, "contiguous", args.n // 2, args.seed) + draw_pairs(
        mlm, seqs, "random", args.n - args.n // 2, args.seed
    )
    t0 = time.perf_counter()
    conds = [pair_conditionals(mlm, seqs[s], a, b) for s, a, b in pairs]
    print(f"read {len(conds)} pairs in {time.perf_counter() - t0:.1f} s")

    variants = {
        "plain-40": dict(accelerate=False, max_iter=40, tol=args.tol),
        "plain": dict(accelerate=False, max_iter=args.cap, tol=args.tol),
        "squarem": dict(accelerate=True, max_iter=args.cap, tol=args.tol),
    }
    results: dict[str, list[tuple[int, float, bool, float]]] = {v: [] for v in variants}
    for cond in conds:
        for name, opts in variants.items():
            t = time.perf_counter()
            joint = pair_joint(cond, "ag", **opts)
            seconds = time.perf_counter() - t
            J = float(summed_kl(joint.log_joint, cond.log_cond_a, cond.log_cond_b))
            results[name].append((joint.iterations, seconds, joint.converged, J))
    best = [min(results[v][k][3] for v in variants) for k in range(len(conds))]
    width = len(conds[0].candidates_a) + len(conds[0].candidates_b)
    print(f"\n{len(conds)} pairs, tol {args.tol:g} (KKT residual), plain cap {args.cap}\n")
    print(
        f"{'variant':<10} {'evals (median)':>15} {'seconds (median)':>17} {'converged':>10} "
        f"{'J - J_best (median)':>20} {'(max)':>10} {'kl_fwd_all (median)':>20}"
    )
    for name in variants:
        rows = results[name]
        gaps = [r[3] - b for r, b in zip(rows, best)]
        print(
            f"{name:<10} {statistics.median(r[0] for r in rows):>15.0f} {statistics.median(r[1] for r in rows):>17.4f} "
            f"{sum(r[2] for r in rows):>6}/{len(rows):<3} {statistics.median(gaps):>20.3g} {max(gaps):>10.3g} "
            f"{statistics.median(r[3] for r in rows) / width:>20.3g}"
        )


if __name__ == "__main__":
    main()
