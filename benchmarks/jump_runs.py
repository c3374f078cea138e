"""Gap-jump's run moves against a wall in the length marginal: a light length between two heavy ones.

A tiny BERT (``testing.tiny_residue_bert("abcd", seed=8)``: hidden 32, 2 layers, residues a-d) on
``a[MASK]{1,3}c`` with a uniform length prior at T = 1 puts most of its mass on lengths 1 and 3 and
almost none on 2, which one-residue insert and delete moves must stop on to cross. This samples it
with surrogate-MH around gap-jump's moves (its defaults: 12 inner steps, update 0.5, insert 0.25,
delete 0.25) and with plain gap-jump, each without and with the run moves (update 0.5, insert
0.15, delete 0.15, insert run 0.1, delete run 0.1, runs of 2), and reports

  length marginal   from C chains x N draws (no warm-up; the chains start spread over the
                    lengths, longest first), against the exact one (enumeration), and their
                    total variation
  stuck at 1        of C' chains x N' draws, the chains whose every draw has length 1

and, from the exact one-step matrix over the 84 states (float64 model; no sampling noise),

  relaxation        1 / (1 - |lambda_2|) steps (outer steps for surrogate-MH)
  P(stay at 1)      the probability that a chain started at length 1 (its state drawn from the
                    target's law given length 1) is still at length 1 after every one of N' steps

    python benchmarks/jump_runs.py [--chains 12 --draws 500 --stuck-chains 6 --stuck-draws 300]
    python benchmarks/jump_runs.py --draws 0        # the exact part alone (minutes, not an hour)
"""

from __future__ import annotations

import argparse
import os
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)

from mlm_ppl import testing  # noqa: E402
from mlm_ppl.inference import SurrogateMH, exact, run_chains  # noqa: E402
from mlm_ppl.inference.jump import GapJump  # noqa: E402
from mlm_ppl.models.gap_target import GapTarget  # noqa: E402

TEMPLATE = "a[MASK]{1,3}c"
LENGTHS = (1, 2, 3)
RUNS = dict(p_update=0.5, p_insert=0.15, p_delete=0.15, p_insert_run=0.1, p_delete_run=0.1, max_run=2)
KERNELS = {
    "surrogate-mh": lambda target, moves: SurrogateMH(target, **moves),
    "gap-jump": lambda target, moves: GapJump(target, **moves),
}


def marginal(lengths: torch.Tensor) -> torch.Tensor:
    return torch.stack([(lengths == L).double().mean() for L in LENGTHS])


def exact_row(kernel, stay_steps: int) -> tuple[float, float]:
    """Relaxation time and the probability of never leaving length 1 in ``stay_steps`` steps."""
    if isinstance(kernel, SurrogateMH):
        P, log_pi = kernel.gap_matrix()
        states = kernel.inner.states()
    else:
        P, log_pi, states = kernel.exact_matrix(), kernel.exact_log_probs(), kernel.states()
    moduli = torch.linalg.eigvals(P).abs().sort(descending=True).values
    one = torch.tensor([L == 1 for L, _ in states])
    start = log_pi.exp()[one] / log_pi.exp()[one].sum()
    stay = start @ torch.linalg.matrix_power(P[one][:, one], stay_steps)
    return float(1 / (1 - moduli[1])), float(stay.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=12)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--stuck-chains", type=int, default=6)
    parser.add_argument("--stuck-draws", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    args = parser.parse_args()
    target = GapTarget(testing.tiny_residue_bert("abcd", seed=8), TEMPLATE)
    exact_jump = GapJump(GapTarget(testing.tiny_residue_bert("abcd", seed=8, dtype=torch.float64), TEMPLATE))
    pi = exact_jump.exact_log_probs().exp()
    states = torch.tensor([L for L, _ in exact_jump.states()])
    truth = torch.stack([pi[states == L].sum() for L in LENGTHS])
    print(f"{TEMPLATE}, tiny_residue_bert('abcd', seed=8), uniform prior, T = 1")
    print(f"exact length marginal {' / '.join(f'{p:.3f}' for p in truth.tolist())}")
    print(f"exact: relaxation time, and P(a chain started at length 1 stays there for {args.stuck_draws} steps)")
    print(f"{'kernel':<14}{'moves':<7}{'relaxation':>11}{'P(stay at 1)':>14}")
    for name in args.kernels:
        for label, moves in (("single", {}), ("runs", RUNS)):
            relaxation, stay = exact_row(KERNELS[name](exact_jump.target, moves), args.stuck_draws)
            print(f"{name:<14}{label:<7}{relaxation:>11.1f}{stay:>14.3f}")
    if args.draws == 0:
        return
    head = f"{'kernel':<14}{'moves':<7}{'P(1)':>7}{'P(2)':>7}{'P(3)':>7}{'TV':>7}  {'stuck at 1':>10}{'seconds':>9}"
    print(f"sampled: {args.chains} chains x {args.draws} draws; stuck: {args.stuck_chains} chains x {args.stuck_draws}")
    print(head)
    for name in args.kernels:
        for label, moves in (("single", {}), ("runs", RUNS)):
            kernel = KERNELS[name](target, moves)
            t0 = time.perf_counter()
            run = run_chains(kernel, args.chains, args.draws, seed=args.seed)
            got = marginal(target.length_of(run.tokens.flatten(0, 1)))
            few = run_chains(kernel, args.stuck_chains, args.stuck_draws, seed=args.seed + 1)
            lengths = target.length_of(few.tokens.flatten(0, 1)).reshape(args.stuck_chains, args.stuck_draws)
            stuck = int((lengths == 1).all(1).sum())
            seconds = time.perf_counter() - t0
            tv = exact.total_variation(got, truth)
            cells = "".join(f"{p:>7.3f}" for p in got.tolist())
            print(f"{name:<14}{label:<7}{cells}{tv:>7.3f}  {f'{stuck} of {args.stuck_chains}':>10}{seconds:>9.0f}")


if __name__ == "__main__":
    main()
