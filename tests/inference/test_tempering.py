"""Replica exchange (replica-mh, and surrogate-MH with replicas in its inner chain) against exact
enumeration of the joint states of the replicas: the replica at the target's temperature samples
the target, the others their tempered laws."""

import pytest
import torch

from exactness import check_fit
from mlm_ppl import MaskedLMDistribution, SurrogateMH, rundir, sample
from mlm_ppl.inference import ChainStreams, ReplicaMH, exact, make_kernel, run_chains
from mlm_ppl.inference.tempering import joint_index
from mlm_ppl.models import ConstrainedTarget, TemperedTarget
from mlm_ppl.models.gap_target import GapTarget
from mlm_ppl.models.gaps import LengthPrior

SHORT = "AC[MASK]D[MASK]EA"  # 2 free positions over 4 tokens: 16 states, 16**3 joint states of 3 replicas


def _factor(mlm, dist):
    a = mlm.vocab.index("A")
    return lambda x: torch.where(x[:, dist.free_positions[0]] == a, 0.0, -1.5).to(torch.float64)


def _rule(mlm, dist):
    """A hard rule: the second free position is never C (log-factor -inf there)."""
    c = mlm.vocab.index("C")
    return lambda x: torch.where(x[:, dist.free_positions[1]] == c, -torch.inf, 0.0).to(torch.float64)


def _checks(P, lp, S, pi, rounding=1e-10):
    """Rows sum to 1; the joint law is invariant and the step reversible for it; its marginal over
    replica 0 is the target."""
    joint = lp.exp()
    assert float((P.sum(1) - 1).abs().max()) < rounding
    assert float((joint @ P - joint).abs().max()) < rounding
    flow = joint[:, None] * P
    assert float((flow - flow.T).abs().max()) < rounding
    assert float((joint.reshape(S, -1).sum(1) - pi).abs().max()) < rounding


@pytest.mark.parametrize(
    "options",
    [
        dict(replicas=2),
        dict(replicas=3, replica_spacing=2.0, p_swap=0.3, p_unmask=0.5),
        dict(replicas=2, replica_spacing=4.0, p_swap=0.6, block_size=2, top_k=3),
    ],
    ids=["two", "three_unmask", "two_blocks_top_k"],
)
@pytest.mark.parametrize("factor", [None, "soft", "rule"])
def test_replica_mh_is_exact_for_the_joint_law_and_replica_0_for_the_target(tiny4_64, options, factor):
    dist = MaskedLMDistribution(tiny4_64, SHORT, temperature=0.8)
    target = {None: dist, "soft": None, "rule": None}[factor] or ConstrainedTarget(
        dist, (_factor if factor == "soft" else _rule)(tiny4_64, dist)
    )
    kernel = ReplicaMH(target, **options)
    pi = exact.exact_log_probs(target).exp()
    P, lp = kernel.replica_matrix()
    S, K = pi.numel(), options["replicas"]
    assert P.shape == (S**K, S**K)
    _checks(P, lp, S, pi)
    # each hot replica's marginal is the tempered target, not the target
    hot = lp.exp().reshape(S, S, -1).sum((0, 2))
    tempered = exact.exact_log_probs(TemperedTarget(target, options.get("replica_spacing", 1.5))).exp()
    assert float((hot - tempered).abs().max()) < 1e-10
    assert exact.total_variation(hot, pi) > 0.01


@pytest.mark.parametrize(
    "options",
    [dict(replicas=2), dict(replicas=3, replica_spacing=2.0, p_swap=0.3, p_unmask=0.5)],
    ids=["two", "three_unmask"],
)
@pytest.mark.parametrize("with_factor", [False, True], ids=["bare", "factor"])
def test_surrogate_mh_with_replicas_in_its_inner_chain_is_exact(tiny4_64, options, with_factor):
    """The inner chain of replicas is reversible for the tempered surrogates' joint law, so one
    exact correction (of replica 0) per outer step leaves the target's joint law invariant."""
    dist = MaskedLMDistribution(tiny4_64, SHORT, temperature=0.8)
    target = ConstrainedTarget(dist, _factor(tiny4_64, dist)) if with_factor else dist
    kernel = SurrogateMH(target, inner_steps=2, surrogate_context=0, **options)
    pi = exact.exact_log_probs(target).exp()
    assert exact.total_variation(exact.exact_log_probs(kernel.surrogate).exp(), pi) > 0.03  # the correction works
    P, lp = kernel.replica_matrix()
    _checks(P, lp, pi.numel(), pi)


def test_the_checks_have_power(tiny4_64, monkeypatch):
    """A wrong exchange ratio (always accepted) breaks the joint law's invariance; without the
    outer correction the replicas sample the surrogate."""
    dist = MaskedLMDistribution(tiny4_64, SHORT, temperature=0.8)
    kernel = ReplicaMH(dist, replicas=2, replica_spacing=3.0, p_swap=0.5)
    monkeypatch.setattr(kernel, "_swap_ratio", lambda *args: torch.zeros(args[0].shape, dtype=torch.float64))
    P, lp = kernel.replica_matrix()
    joint = lp.exp()
    assert float((joint @ P - joint).abs().max()) > 1e-3
    monkeypatch.undo()
    sur = SurrogateMH(dist, inner_steps=2, surrogate_context=0, replicas=2)
    Q = torch.linalg.matrix_power(sur.inner.replica_matrix()[0], 2)
    P, lp = sur.replica_matrix()
    joint = lp.exp()
    assert float((joint @ Q - joint).abs().max()) > 1e-3


@pytest.mark.slow
def test_the_sampling_code_follows_the_exact_matrix(tiny4):
    """4000 independent chains of joint states, from one start: their joint states after one step
    follow the row of the exact matrix (exchanges and local steps both drawn), and replica 0 is
    what a run records."""
    dist = MaskedLMDistribution(tiny4, SHORT, temperature=2.0)
    kernel = ReplicaMH(dist, replicas=2, replica_spacing=2.0, p_swap=0.5, proposal_temperature=2.0)
    S, K, C = exact.enumerate_states(dist).shape[0], 2, 4000
    P, _ = kernel.replica_matrix()
    states = exact.enumerate_states(dist)
    state = kernel.init(states[torch.zeros(C, dtype=torch.long)])
    hot = states[5].expand(C, -1)  # replica 1 elsewhere: an exchange moves both
    ev = dist.evaluate(hot[:1])
    state = state._replace(
        replica_tokens=torch.stack([state.tokens, hot], 1),
        replica_energy=torch.stack([state.energy, ev.energy.expand(C)], 1),
        replica_log_factor=torch.stack([state.log_factor, ev.log_factor.expand(C)], 1),
        cond_logits=torch.stack([state.cond_logits[:, 0], ev.cond_logits.expand(C, -1, -1)], 1),
    )
    new, info = kernel.step(state, ChainStreams(3, C))
    row = int(joint_index(state.replica_tokens[:1], dist, K))
    counts = torch.bincount(joint_index(new.replica_tokens, dist, K), minlength=S**K).double()
    check_fit(P[row], counts)
    assert torch.equal(new.tokens, new.replica_tokens[:, 0])
    assert 0.3 < float(info.is_swap.double().mean()) < 0.7
    assert bool((info.evaluated[info.is_swap] == 0).all())  # an exchange runs no forward pass
    fresh = dist.evaluate(new.replica_tokens.reshape(C * K, -1))
    assert torch.allclose(new.replica_energy.flatten(), fresh.energy, atol=1e-5)
    assert torch.allclose(new.cond_logits.flatten(0, 1), fresh.cond_logits, atol=1e-5)


@pytest.mark.parametrize("name", ["replica-mh", "surrogate-mh"])
def test_a_run_records_replica_0_and_resumes_from_a_checkpoint_on_disk(tiny4, tmp_path, name):
    """A run with replicas records replica 0 and its statistics like any run; resumed from a
    checkpoint on disk (the nested replica state and its class name), it equals the whole run."""
    options = dict(replicas=3, replica_spacing=1.5, p_swap=0.3)
    if name == "surrogate-mh":
        options["inner_steps"] = 3
    if name == "replica-mh":  # the high-level API (surrogate-mh's runs: test_surrogate_mh)
        run = sample(tiny4, SHORT, kernel=name, num_chains=3, num_samples=6, seed=2, **options)
        assert run.tokens.shape[:2] == (3, 6) and {"lp", "is_accepted", "n_changed", "is_swap"} <= set(run.stats)
    kernel = make_kernel(name, MaskedLMDistribution(tiny4, SHORT), **options)
    whole = run_chains(kernel, 3, 6, warmup_steps=2, seed=4)

    def keep(cp):
        if cp.step == 5:
            rundir.save_checkpoint(run_dir, cp, {"seed": 4})

    with rundir.RunDirectory.create(tmp_path / "run", "sample") as run_dir:
        run_chains(kernel, 3, 6, warmup_steps=2, seed=4, on_checkpoint=keep, checkpoint_seconds=0)
    saved = rundir.load_checkpoint(run_dir.path)
    replicas = saved.state if name == "replica-mh" else saved.state.inner
    assert replicas.replica_tokens.shape[:2] == (3, 3)
    resumed = run_chains(kernel, 3, 6, warmup_steps=2, seed=4, resume=saved)
    assert torch.equal(resumed.tokens, whole.tokens)
    for stat, values in whole.stats.items():
        assert torch.equal(resumed.stats[stat].double(), values.double()), stat


def test_bad_options_are_one_line_errors_before_any_work(tiny4):
    dist = MaskedLMDistribution(tiny4, SHORT)
    cases = [
        (dict(replicas=0), ValueError, "replicas must be an integer >= 1, got 0"),
        (dict(replicas=2, replica_spacing=1.0), ValueError, r"replica_spacing must lie in \(1, 100\]"),
        (dict(replicas=2, p_swap=0.0), ValueError, r"p_swap=0.0 with 2 replicas: it must lie in \(0, 1\)"),
        (dict(replicas=2, p_swap=1.0), ValueError, r"p_swap=1.0 with 2 replicas"),
        (dict(replica_spacing=2.0), ValueError, "replica_spacing do nothing without replicas > 1"),
        (dict(p_swap=0.3), ValueError, "p_swap do nothing without replicas > 1"),
        (dict(replicas=12, replica_spacing=2.0), ValueError, "hottest at 2.05e\\+03 times the temperature"),
        (dict(replicas=2, replica_spacing="2"), TypeError, "replica_spacing"),
    ]
    for options, error, message in cases:
        for name in ("replica-mh", "surrogate-mh"):
            with pytest.raises(error, match=message) as info:
                make_kernel(name, dist, **options)
            assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="annealing schedule seeks modes"):
        make_kernel("replica-mh", dist, replicas=2, temperature_schedule=lambda step: 1.0)
    with pytest.raises(ValueError, match="'replica-mh' samples its target and never anneals"):
        ReplicaMH(dist, temperature_schedule=lambda step: 0.5)  # one replica: used to run as MH, schedule dropped
    gap = GapTarget(tiny4, "AD[MASK]{1,3}CE", LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test"))
    with pytest.raises(ValueError, match="take no replicas"):
        SurrogateMH(gap, replicas=2)
    kernel = ReplicaMH(dist, replicas=2)
    with pytest.raises(TypeError, match="leave out replicas"):
        kernel.with_log_factor(kernel.init(run_chains(kernel, 2, 1, seed=0).tokens[:, 0]), torch.zeros(2))
    with pytest.raises(TypeError, match="use SurrogateMH.replica_matrix"):
        exact.transition_matrix(SurrogateMH(dist, replicas=2, inner_steps=1))
