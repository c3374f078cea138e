"""Kernels against exact enumeration of tiny state spaces."""

import pytest
import torch
from pyro.distributions.testing.gof import multinomial_goodness_of_fit

from mlm_ppl import MaskedLMDistribution, sample
from mlm_ppl.inference import SCANS, MaskPredict, MetropolisHastings, PseudoGibbs, exact, run_chains
from mlm_ppl.inference.kernels import ConstrainedTarget, accept, geometric_annealing, proposal_log_probs
from mlm_ppl.testing import goyal_counterexample

TEMPLATE = "A[MASK]C[MASK][MASK]"  # 3 free positions over 4 tokens: 64 states


def _invariance_error(kernel, pi):
    P = exact.transition_matrix(kernel)
    assert torch.allclose(P.sum(1), torch.ones(len(pi), dtype=P.dtype), atol=1e-6)
    return float((pi @ P - pi).abs().max())


@pytest.mark.parametrize("energy", ["norm", "raw"])
@pytest.mark.parametrize("scan", SCANS)
@pytest.mark.parametrize("block_size", [1, 2])
@pytest.mark.parametrize(
    "options", [{}, dict(top_k=2), dict(top_p=0.6, proposal_temperature=1.5)], ids=["full", "top_k", "top_p"]
)
def test_mh_leaves_the_energy_distribution_invariant(tiny4, energy, scan, block_size, options):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, energy=energy, temperature=0.7)
    pi = exact.exact_log_probs(dist).exp()
    assert _invariance_error(MetropolisHastings(dist, scan=scan, block_size=block_size, **options), pi) < 1e-6


def test_mh_with_a_constraint_factor_is_invariant(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    a = tiny4.vocab.index("A")
    target = ConstrainedTarget(dist, lambda x: torch.where(x[:, 4] == a, 0.0, -3.0))
    pi = exact.exact_log_probs(target).exp()
    assert exact.total_variation(pi, exact.exact_log_probs(dist).exp()) > 0.05  # the factor matters
    assert _invariance_error(MetropolisHastings(target, scan="random", block_size=2, top_k=3), pi) < 1e-6


def test_the_invariance_check_has_power(tiny4):
    """Pseudo-Gibbs (no MH correction) fails the same check on the same target."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    pi = exact.exact_log_probs(dist).exp()
    assert _invariance_error(PseudoGibbs(dist, scan="random"), pi) > 1e-2


def _empirical(target, tokens):
    idx = exact.state_index(target)(tokens)
    return torch.bincount(idx, minlength=exact.enumerate_states(target).shape[0]).double()


def _check_fit(probs, counts, tv_bound):
    n = counts.sum()
    keep = probs * n > 10  # Pearson's test on the well-populated cells, truncated
    gof = multinomial_goodness_of_fit(probs[keep], counts[keep], total_count=int(n))
    tv = exact.total_variation(probs, counts / n)
    assert gof > 1e-3, f"chi-square p-value {gof:.2e}"
    assert tv < tv_bound, f"total variation {tv:.3f}"
    return gof, tv


def _after(kernel, steps):
    """Exact distribution of the state after ``steps`` steps from a uniform start."""
    P = exact.transition_matrix(kernel)
    p0 = torch.full((P.shape[0],), 1.0 / P.shape[0], dtype=P.dtype)
    return p0 @ torch.linalg.matrix_power(P, steps)


@pytest.mark.parametrize("block_size", [1, 2])
def test_long_batched_mh_runs_match_the_exact_target(tiny4, block_size):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=3.0)
    pi = exact.exact_log_probs(dist).exp()
    kernel = MetropolisHastings(dist, scan="random", block_size=block_size, proposal_temperature=3.0)
    steps = 40
    p_n = _after(kernel, steps)
    assert exact.total_variation(p_n, pi) < 0.01  # after 40 steps the chain is at its target
    # 3000 independent chains from uniform starts, the state of each after 40 steps
    run = run_chains(kernel, 3000, 1, warmup_steps=steps - 1, seed=11, init="uniform")
    _check_fit(p_n, _empirical(dist, run.tokens[:, 0]), tv_bound=0.05)
    _check_fit(pi, _empirical(dist, run.tokens[:, 0]), tv_bound=0.05)


def test_sampling_code_matches_the_exact_transition_matrix_before_mixing(tiny4):
    """With peaked proposals the chain mixes slowly; the draws still follow p0 P^n exactly."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = MetropolisHastings(dist, scan="random_sweep")
    p_n = _after(kernel, 4)  # transition_matrix of random_sweep is one sweep (3 steps)
    assert exact.total_variation(p_n, exact.exact_log_probs(dist).exp()) > 0.1  # not mixed yet
    run = run_chains(kernel, 3000, 1, warmup_steps=11, seed=3, init="uniform")
    _check_fit(p_n, _empirical(dist, run.tokens[:, 0]), tv_bound=0.05)


def test_pseudo_gibbs_matches_its_own_transition_matrix_not_the_energy(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = PseudoGibbs(dist, scan="random", temperature=2.0)
    own = exact.stationary_distribution(exact.transition_matrix(kernel))
    energy = exact.exact_log_probs(dist).exp()
    assert exact.total_variation(own, energy) > 0.2
    p_n = _after(kernel, 40)
    assert exact.total_variation(p_n, own) < 0.01
    run = run_chains(kernel, 3000, 1, warmup_steps=39, seed=5, init="uniform")
    _check_fit(p_n, _empirical(dist, run.tokens[:, 0]), tv_bound=0.05)


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


def test_single_site_mh_step_costs_one_pass_over_the_proposal(tiny4, monkeypatch):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = MetropolisHastings(dist, scan="random")
    gen = torch.Generator().manual_seed(0)
    state = kernel.init(run_chains(kernel, 6, 1, seed=0).tokens[:, 0])
    rows, evaluated = [], []
    real_logits, real_eval = tiny4._logits_at, dist.evaluate
    monkeypatch.setattr(tiny4, "_logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real_logits(ids, attn, q))
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
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        state, info = kernel.step(state, gen)
    fresh = dist.evaluate(state.tokens)
    assert torch.allclose(state.energy, fresh.energy, atol=1e-5)
    assert torch.allclose(state.cond_logits, fresh.cond_logits, atol=1e-5)
    assert torch.allclose(info.lp, dist.log_prob(state.tokens), atol=1e-5)


def test_draw_stats_have_arviz_names_and_shapes(tiny4):
    run = sample(tiny4, TEMPLATE, num_chains=2, num_samples=7, warmup_steps=3, thin=2, seed=0)
    assert run.tokens.shape == (2, 7, 7)
    assert set(run.stats) == {"lp", "is_accepted", "acceptance_rate", "n_changed"}
    assert all(v.shape == (2, 7) for v in run.stats.values())
    assert run.stats["is_accepted"].dtype == torch.bool
    assert ((run.stats["acceptance_rate"] >= 0) & (run.stats["acceptance_rate"] <= 1)).all()
    assert run.attrs["seed"] == 0 and run.attrs["warmup_steps"] == 3 and run.attrs["model"] == tiny4.name


def test_truncated_proposals_give_minus_inf_outside_the_set():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, -9.0]])
    ordinary = torch.tensor([True, True, True, True, False])
    lq = proposal_log_probs(logits, ordinary, top_k=2)
    assert torch.isinf(lq[0, :2]).all() and torch.isinf(lq[0, 4]) and torch.allclose(lq[0, 2:4].exp().sum(), torch.tensor(1.0))
    lq = proposal_log_probs(logits, ordinary, top_p=0.6)  # p = .03 .09 .24 .64: top token alone reaches .6
    assert torch.isfinite(lq[0]).tolist() == [False, False, False, True, False]
    assert not accept(torch.tensor([float("nan"), float("-inf")]), torch.Generator().manual_seed(0)).any()
    assert accept(torch.tensor([0.0, 5.0]), torch.Generator().manual_seed(0)).all()


def test_mask_predict_decodes_deterministically(tiny4):
    dist = MaskedLMDistribution(tiny4, "A[MASK][MASK][MASK][MASK]C")
    run = run_chains(MaskPredict(dist, iterations=3), 2, 5, seed=0)
    final = run.tokens[:, -1]
    assert (final != tiny4.mask_id).all() and torch.equal(final[0], final[1])
    assert torch.equal(run.tokens[:, 2], run.tokens[:, -1])  # done after 3 iterations
    assert (run.tokens[:, 0] == tiny4.mask_id).sum() > 0  # iteration 1 re-masks the least sure


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
    at_mode = lambda run: (run.tokens[:, 0] == mode).all(-1).float().mean()  # noqa: E731
    assert at_mode(annealed) >= 0.8 > at_mode(plain)
    # info.lp is reported at the target temperature, not the annealed one
    assert torch.allclose(annealed.stats["lp"][:, 0], dist.log_prob(annealed.tokens[:, 0]), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(kernel="gibbs"), ValueError, "unknown kernel 'gibbs'"),
        (dict(scan="sideways"), ValueError, "unknown scan 'sideways'"),
        (dict(block_size=4), ValueError, "block_size=4 is larger than the 3 free positions"),
        (dict(block_size=0), ValueError, "block_size must be an integer >= 1"),
        (dict(temperature=0.0), ValueError, "temperature must be > 0"),
        (dict(temperature=-1.0), ValueError, "temperature must be > 0"),
        (dict(proposal_temperature=0), ValueError, "proposal_temperature must be > 0"),
        (dict(top_k=0), ValueError, "top_k must be an integer >= 1"),
        (dict(top_p=0.0), ValueError, r"top_p must lie in \(0, 1\]"),
        (dict(top_p=1.5), ValueError, r"top_p must lie in \(0, 1\]"),
        (dict(seed=1.5), TypeError, "seed must be an int"),
        (dict(seed=None), TypeError, "seed must be an int"),
        (dict(num_chains=0), ValueError, "num_chains must be an integer >= 1"),
        (dict(num_samples=-1), ValueError, "num_samples must be an integer >= 1"),
        (dict(kernel="pseudo-gibbs", scan="nope"), ValueError, "unknown scan"),
        (dict(kernel="mh", banana=1), TypeError, "kernel 'mh'.*banana"),
    ],
)
def test_bad_sampler_arguments_fail_before_sampling(tiny4, monkeypatch, kwargs, error, match):
    calls = []
    monkeypatch.setattr(tiny4, "_logits_at", lambda *a: calls.append(1))
    with pytest.raises(error, match=match):
        sample(tiny4, TEMPLATE, **kwargs)
    assert not calls, "work started before the error"
