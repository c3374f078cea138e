"""Metropolis-Hastings against exact enumeration of tiny state spaces."""

import pytest
import torch

from exactness import TEMPLATE, after, check_draws_and_own_streams, check_fit, empirical, invariance_error
from mlm_ppl import MaskedLMDistribution, sample
from mlm_ppl.inference import (
    SCANS,
    ChainStreams,
    MetropolisHastings,
    PseudoGibbs,
    ReplicaMH,
    exact,
    geometric_annealing,
    run_chains,
)
from mlm_ppl.models import ConstrainedTarget


@pytest.mark.parametrize("energy", ["norm", "raw"])
@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("block_size", [1, 2])
@pytest.mark.parametrize(
    "options", [{}, dict(top_k=2), dict(top_p=0.6, proposal_temperature=1.5)], ids=["full", "top_k", "top_p"]
)
def test_mh_leaves_the_energy_distribution_invariant(tiny4_64, energy, scan, block_size, options):
    # float64 model: the check is exact to rounding (~1e-15) on any CPU; in float32 the same
    # conditional read in two batches differs by ~1e-7, which alone breaks detailed balance by ~1e-6
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, energy=energy, temperature=0.7)
    pi = exact.exact_log_probs(dist).exp()
    assert invariance_error(MetropolisHastings(dist, scan=scan, block_size=block_size, **options), pi) < 1e-10


def test_mh_with_a_constraint_factor_is_invariant(tiny4_64):
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    a = tiny4_64.vocab.index("A")
    target = ConstrainedTarget(dist, lambda x: torch.where(x[:, 4] == a, 0.0, -3.0))
    pi = exact.exact_log_probs(target).exp()
    assert exact.total_variation(pi, exact.exact_log_probs(dist).exp()) > 0.05  # the factor matters
    assert invariance_error(MetropolisHastings(target, scan="random", block_size=2, top_k=3), pi) < 1e-10


def test_the_invariance_check_has_power(tiny4_64):
    """Pseudo-Gibbs (no MH correction) fails the same check on the same target."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    pi = exact.exact_log_probs(dist).exp()
    assert invariance_error(PseudoGibbs(dist, scan="random"), pi) > 1e-2


@pytest.mark.parametrize("block_size", [1, 2])
@pytest.mark.slow
def test_long_batched_mh_runs_match_the_exact_target(tiny4, block_size):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=3.0)
    pi = exact.exact_log_probs(dist).exp()
    kernel = MetropolisHastings(dist, scan="random", block_size=block_size, proposal_temperature=3.0)
    steps = 40
    p_n = after(kernel, steps)
    assert exact.total_variation(p_n, pi) < 0.01  # after 40 steps the chain is at its target
    # 3000 independent chains from uniform starts, the state of each after 40 steps
    run = run_chains(kernel, 3000, 1, warmup_steps=steps - 1, seed=11, init="uniform")
    check_fit(p_n, empirical(dist, run.tokens[:, 0]))
    check_fit(pi, empirical(dist, run.tokens[:, 0]), offset=exact.total_variation(p_n, pi))


@pytest.mark.slow
def test_sampling_code_matches_the_exact_transition_matrix_before_mixing(tiny4):
    """With peaked proposals the chain mixes slowly; the draws still follow p0 P^n exactly."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = MetropolisHastings(dist, scan="random_sweep")
    p_n = after(kernel, 4)  # transition_matrix of random_sweep is one sweep (3 steps)
    assert exact.total_variation(p_n, exact.exact_log_probs(dist).exp()) > 0.1  # not mixed yet
    run = run_chains(kernel, 3000, 1, warmup_steps=11, seed=3, init="uniform")
    check_fit(p_n, empirical(dist, run.tokens[:, 0]))


def test_single_site_mh_step_costs_one_pass_over_the_proposal(tiny4, monkeypatch):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = MetropolisHastings(dist, scan="random")
    gen = ChainStreams(0, 6)
    state = kernel.init(run_chains(kernel, 6, 1, seed=0).tokens[:, 0])
    rows, evaluated = [], []
    real_logits, real_eval = tiny4.logits_at, dist.evaluate
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real_logits(ids, attn, q))
    monkeypatch.setattr(dist, "evaluate", lambda x: evaluated.append(x.shape[0]) or real_eval(x))
    for _ in range(8):
        rows.clear(), evaluated.clear()
        state, info = kernel.step(state, gen)
        n_proposed_changes = sum(evaluated)
        assert n_proposed_changes <= 6
        assert sum(rows) == 5 * n_proposed_changes  # 5 scored positions: A, 3 free, C; nothing for the current state
    # at a fixed point of the argmax, top-1 proposals equal the state: no forward pass at all
    greedy = PseudoGibbs(dist, scan="left_to_right", top_k=1)
    pg = greedy.init(state.tokens)
    for _ in range(30):
        pg, _ = greedy.step(pg, gen)
    before = pg.tokens.clone()
    for _ in range(3):
        pg, info = greedy.step(pg, gen)
    assert torch.equal(pg.tokens, before)
    peaked = MetropolisHastings(dist, scan="random", top_k=1)
    st = peaked.init(pg.tokens)
    rows.clear()
    for _ in range(3):
        st, info = peaked.step(st, gen)
        assert (info.n_changed == 0).all() and info.is_accepted.all()
    assert sum(rows) == 0


def test_mh_step_is_reproducible_and_caches_conditionals(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    a = sample(tiny4, TEMPLATE, num_chains=3, num_samples=10, seed=7)
    b = sample(tiny4, TEMPLATE, num_chains=3, num_samples=10, seed=7)
    c = sample(tiny4, TEMPLATE, num_chains=3, num_samples=10, seed=8)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    # the cached lp and conditionals are those of the final tokens
    kernel = MetropolisHastings(dist)
    state = kernel.init(a.tokens[:, 0])
    gen = ChainStreams(1, a.tokens.shape[0])
    for _ in range(10):
        state, info = kernel.step(state, gen)
    fresh = dist.evaluate(state.tokens)
    assert torch.allclose(state.energy, fresh.energy, atol=1e-5)
    assert torch.allclose(state.cond_logits, fresh.cond_logits, atol=1e-5)
    assert torch.allclose(info.lp, dist.log_prob(state.tokens), atol=1e-5)


def test_annealing_schedule_finds_the_mode_more_often(tiny4):
    sched = geometric_annealing(3.0, 0.05, 80)
    assert sched(0) == 3.0 and abs(sched(80) - 0.05) < 1e-12 and sched(500) == sched(80)
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    logp = exact.exact_log_probs(dist)
    mode = exact.enumerate_states(dist)[logp.argmax()]
    assert logp.exp().max() < 0.6  # the mode is not the only likely state
    kw = dict(warmup_steps=99, seed=0, init="uniform")
    annealed = run_chains(MetropolisHastings(dist, proposal_temperature=3.0, temperature_schedule=sched), 16, 1, **kw)
    plain = run_chains(MetropolisHastings(dist, proposal_temperature=3.0), 16, 1, **kw)
    at_mode = lambda run: (run.tokens[:, 0] == mode).all(-1).float().mean()
    assert at_mode(annealed) >= 0.8 > at_mode(plain)
    # info.lp is reported at the target temperature, not the annealed one
    assert torch.allclose(annealed.stats["lp"][:, 0], dist.log_prob(annealed.tokens[:, 0]), atol=1e-5)


def test_truncated_proposals_warn_that_the_chain_may_be_reducible():
    """top_k/top_p keep the target invariant (the matrix tests) but can cut the chain into pieces:
    measured here from the exact matrix, the very number the warning quotes."""
    from mlm_ppl.inference import make_kernel
    from mlm_ppl.inference.mh import TruncatedProposalWarning
    from mlm_ppl.testing import tiny_residue_bert

    d = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64), TEMPLATE)
    pi = exact.exact_log_probs(d).exp()
    for options, tv_uniform in (({"top_k": 3}, 0.29), ({"top_p": 0.9}, 0.20)):
        with pytest.warns(TruncatedProposalWarning, match="may be reducible"):
            kernel = MetropolisHastings(d, **options)
        P5000 = torch.linalg.matrix_power(exact.transition_matrix(kernel), 5000)
        p0 = torch.full((len(pi),), 1.0 / len(pi), dtype=P5000.dtype)
        assert round(exact.total_variation(p0 @ P5000, pi), 2) == tv_uniform
        assert float((pi @ P5000 - pi).abs().max()) < 1e-10  # invariant all the same
    with pytest.warns(TruncatedProposalWarning):
        make_kernel("surrogate-mh", d, top_k=3)  # its inner chain's proposal


@pytest.mark.parametrize(
    "options",
    [
        dict(p_unmask=1.0),
        dict(p_unmask=0.4, unmask_size=2),
        dict(p_unmask=0.5, unmask_size=1, block_size=2, top_k=2),
        dict(p_unmask=0.3, proposal_temperature=1.5, top_p=0.8),
    ],
    ids=["whole", "runs_of_2", "with_blocks", "tempered"],
)
@pytest.mark.parametrize("with_factor", [False, True], ids=["bare", "factor"])
def test_unmask_proposals_leave_the_target_invariant(tiny4_64, options, with_factor):
    """A run of free positions drawn one by one in a random order (every run and order enumerated),
    mixed with block proposals, leaves the target invariant to rounding; also with a log-factor."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=0.7)
    a = tiny4_64.vocab.index("A")
    target = ConstrainedTarget(dist, lambda x: torch.where(x[:, 4] == a, 0.0, -3.0)) if with_factor else dist
    pi = exact.exact_log_probs(target).exp()
    assert invariance_error(MetropolisHastings(target, **options), pi) < 1e-10


def test_the_unmask_check_has_power(tiny4_64, monkeypatch):
    """Without its Hastings correction the unmask proposal samples something else, and the same check sees it."""
    import mlm_ppl.inference.mh as mh_module

    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=0.7)
    pi = exact.exact_log_probs(dist).exp()
    real = mh_module.mh_log_ratio
    monkeypatch.setattr(mh_module, "mh_log_ratio", lambda new, old, corr, changed: real(new, old, 0 * corr, changed))
    assert invariance_error(MetropolisHastings(dist, p_unmask=1.0), pi) > 1e-3


def test_unmask_draws_follow_the_exact_matrix_and_each_chain_its_own_stream(tiny4):
    """3000 independent chains, 2 steps from uniform starts, follow p0 P^2 (P by enumeration, from the
    kernel's own code); a chain run alone draws what it draws beside others."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    check_draws_and_own_streams(MetropolisHastings(dist, p_unmask=0.5, unmask_size=2), dist)


def test_an_unmask_proposal_reads_two_copies_per_position_but_the_first(tiny4, monkeypatch):
    """b passes, each of the proposal's copy and the current state's (its reverse; at the first pass
    they are one copy), then the usual evaluation of the proposal; proposal_copies says so."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = MetropolisHastings(dist, p_unmask=1.0, unmask_size=2)
    state = kernel.init(run_chains(kernel, 3, 1, seed=0).tokens[:, 0])
    rows = []
    real = tiny4.logits_at
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real(ids, attn, q))
    state, info = kernel.step(state, ChainStreams(1, 3))
    assert kernel.proposal_copies.tolist() == [3, 3, 3] and kernel.proposal_cost() == 3
    per_state = dist.scored_positions.numel()  # 5: one copy per scored position
    assert sum(rows) == 9 + per_state * int(info.evaluated.sum())  # (1 + 2) x 3 reads, then each evaluated state


def test_bad_unmask_options_fail_before_any_work(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    for value, kind, message in [
        (-0.1, ValueError, r"p_unmask must lie in \[0, 1\], got -0.1"),
        (1.5, ValueError, r"p_unmask must lie in \[0, 1\], got 1.5"),
        ("x", TypeError, "p_unmask must be a number"),
    ]:
        with pytest.raises(kind, match=message):
            MetropolisHastings(dist, p_unmask=value)
    with pytest.raises(ValueError, match="unmask_size must be an integer >= 1, got 0"):
        MetropolisHastings(dist, p_unmask=0.5, unmask_size=0)
    with pytest.raises(ValueError, match="unmask_size=4 is larger than the 3 free positions"):
        MetropolisHastings(dist, p_unmask=0.5, unmask_size=4)
    with pytest.raises(ValueError, match="unmask_size=2 does nothing without p_unmask > 0"):
        MetropolisHastings(dist, unmask_size=2)
    with pytest.raises(ValueError, match="p_unmask=0.5 needs scan='random'.*got scan='random_sweep'"):
        MetropolisHastings(dist, p_unmask=0.5, scan="random_sweep")


def test_the_default_proposal_temperature_follows_the_target_above_1_and_stays_exact(tiny4_64):
    """max(T, 1): the exact matrix relaxes faster at T > 1 than with proposals at 1, and the target
    stays invariant (benchmarks/proposal_temperature.py has the table)."""
    for T, expected in ((0.5, 1.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0)):
        assert (
            MetropolisHastings(MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=T)).proposal_temperature == expected
        )
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=3.0)
    pi = exact.exact_log_probs(dist).exp()
    default, at_one = MetropolisHastings(dist), MetropolisHastings(dist, proposal_temperature=1.0)
    assert invariance_error(default, pi) < 1e-12 and invariance_error(at_one, pi) < 1e-12

    def relaxation(kernel):
        moduli = torch.linalg.eigvals(exact.transition_matrix(kernel)).abs().sort(descending=True).values
        return float(1 / (1 - moduli[1]))

    assert relaxation(default) * 10 < relaxation(at_one)  # 9.1 against 535 steps on this model
    # the replicas of replica exchange propose at their own temperatures' defaults
    replicas = ReplicaMH(dist, replicas=2, replica_spacing=2.0)
    assert [k.proposal_temperature for k in replicas.kernels] == [3.0, 6.0]
