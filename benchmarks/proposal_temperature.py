"""Proposal temperature against the target's temperature, by the exact transition matrix.

MH with MLM proposals is exact at any proposal temperature; what the temperature changes is how
fast the chain forgets its start. This builds the exact transition matrix of single-site MH
(random scan) on tiny models whose every state can be enumerated (4 residues, 3 free positions:
64 states) at target temperatures T = 0.5, 1, 2, 3, with proposals at temperature 1 (the default
before 0.5), at T, and at the default since, max(T, 1), and reports

  relaxation time   1 / (1 - |lambda_2|), lambda_2 the eigenvalue of second-largest modulus:
                    the steps after which the distance to the target shrinks by a factor e
  TV after 100      total variation from exp(-E/T) after 100 steps from the worst single start

No sampling, no timing: every number is exact, so one run is the measurement.

    python benchmarks/proposal_temperature.py [--seeds 1 2 3] [--steps 100]
"""

from __future__ import annotations

import argparse

import torch

from mlm_ppl import MaskedLMDistribution, testing
from mlm_ppl.inference import MetropolisHastings, exact
from mlm_ppl.inference.mh import default_proposal_temperature

TEMPLATE = "A[MASK]C[MASK][MASK]"
TEMPERATURES = (0.5, 1.0, 2.0, 3.0)


def relaxation_time(P: torch.Tensor) -> float:
    moduli = torch.linalg.eigvals(P).abs().sort(descending=True).values
    return float(1.0 / (1.0 - moduli[1]))


def worst_tv(P: torch.Tensor, pi: torch.Tensor, steps: int) -> float:
    Pn = torch.linalg.matrix_power(P, steps)
    return max(exact.total_variation(row, pi) for row in Pn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="tiny models' seeds")
    parser.add_argument("--steps", type=int, default=100, help="steps for the worst-start distance")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        mlm = testing.tiny_residue_bert("ACDE", seed=seed, dtype=torch.float64)
        for T in TEMPERATURES:
            dist = MaskedLMDistribution(mlm, TEMPLATE, temperature=T)
            pi = exact.exact_log_probs(dist).exp()
            row = [seed, T]
            for q in (1.0, T):
                P = exact.transition_matrix(MetropolisHastings(dist, proposal_temperature=q))
                row += [relaxation_time(P), worst_tv(P, pi, args.steps)]
            P = exact.transition_matrix(MetropolisHastings(dist))  # the default
            assert MetropolisHastings(dist).proposal_temperature == default_proposal_temperature(T)
            row += [relaxation_time(P), worst_tv(P, pi, args.steps)]
            rows.append(row)
    print(
        "| model seed | T | relaxation time: proposals at 1 | at T | default max(T, 1) | default's speed-up over 1 "
        f"| TV after {args.steps} steps from the worst start: at 1 | at T | default |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seed, T, r1, tv1, rT, tvT, rd, tvd in rows:
        print(
            f"| {seed} | {T:g} | {r1:.1f} | {rT:.1f} | {rd:.1f} | {r1 / rd:.2f}x | {tv1:.3f} | {tvT:.3f} | {tvd:.3f} |"
        )


if __name__ == "__main__":
    main()
