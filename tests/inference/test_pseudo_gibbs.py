"""Pseudo-Gibbs against its own exact transition matrix (and not the energy's)."""

import torch

from exactness import TEMPLATE, after, check_fit, empirical
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import (
    SCANS,
    MetropolisHastings,
    PseudoGibbs,
    exact,
    run_chains,
)
from mlm_ppl.testing import goyal_counterexample


def test_pseudo_gibbs_matches_its_own_transition_matrix_not_the_energy(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = PseudoGibbs(dist, scan="random", proposal_temperature=2.0)
    own = exact.stationary_distribution(exact.transition_matrix(kernel))
    energy = exact.exact_log_probs(dist).exp()
    assert exact.total_variation(own, energy) > 0.2
    p_n = after(kernel, 40)
    assert exact.total_variation(p_n, own) < 0.01
    run = run_chains(kernel, 3000, 1, warmup_steps=39, seed=5, init="uniform")
    check_fit(p_n, empirical(dist, run.tokens[:, 0]))


def test_goyal_counterexample_stationary_distributions():
    target = goyal_counterexample()
    states = exact.enumerate_states(target)
    index, ev = exact.state_index(target), target.evaluate(states)
    kernel = PseudoGibbs(target, scan="left_to_right")
    first, second = kernel.block_matrix(states, ev, (0,), index), kernel.block_matrix(states, ev, (1,), index)
    expect = {
        "left_to_right": [0.25, 0.25, 0.25, 0.25],
        "right_to_left": [0.495, 0.005, 0.005, 0.495],
        "random": [0.3725, 0.1275, 0.1275, 0.3725],
    }
    got = {
        "left_to_right": exact.stationary_distribution(exact.transition_matrix(kernel)),
        "right_to_left": exact.stationary_distribution(second @ first),
        "random": exact.stationary_distribution(exact.transition_matrix(PseudoGibbs(target, scan="random"))),
    }
    assert torch.allclose(first @ second, exact.transition_matrix(kernel))
    for name, values in expect.items():
        assert torch.allclose(got[name], torch.tensor(values, dtype=torch.float64), atol=1e-6), name
    # MH on E_norm of the same conditionals samples exp(-E_norm), whatever the scan
    energy = exact.exact_log_probs(target).exp()
    for scan in SCANS:
        P = exact.transition_matrix(MetropolisHastings(target, scan=scan))
        assert torch.allclose(exact.stationary_distribution(P), energy, atol=1e-6)
