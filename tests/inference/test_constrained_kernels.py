"""Kernels under a constraint spec: proposals never leave the alphabets, exactly (issue 23).

On the 64 states of A?C?? (ACDE, float64) with alphabets, a Forbid rule and a weighted expert:
every exact kernel's transition matrix leaves the constrained target invariant and never moves a
feasible state to an infeasible one; restricting proposals moves the chain at least as often as
proposing over every ordinary token and rejecting (measured exactly from the matrices); a
proposal killed by a pattern costs no forward pass; the kernels that do not sample log-factors
(pseudo-Gibbs, mask-predict) draw within the alphabets of a spec of alphabets alone.
"""

import pytest
import torch

from exactness import TEMPLATE
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import (
    ChainStreams,
    MaskPredict,
    MetropolisHastings,
    PseudoGibbs,
    SurrogateMH,
    exact,
    proposal_log_probs,
)
from mlm_ppl.models import ConstrainedTarget
from mlm_ppl.models.constraints import Allowed, ConstraintSpec, Forbid, hydropathy
from mlm_ppl.testing import tiny_residue_bert

# free positions 1, 3, 4 of A?C??: the first two in ACD, the last in AD; "D[CA]" forbids D at the
# first (a C follows it) and DA at the last two: 10 feasible states of 64
RULES = [Allowed("no-e", "ACD"), Allowed("last", "AD", positions=[-1])]
FORBID = Forbid("no-dc-da", "D[CA]")


@pytest.fixture(scope="module")
def dist():
    return MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64), TEMPLATE)


@pytest.fixture(scope="module")
def target(dist):
    return ConstraintSpec(RULES + [FORBID], [hydropathy(weight=-0.5)]).constrain(dist)


@pytest.fixture(scope="module")
def states(dist):
    return exact.enumerate_states(dist)


def in_alphabets(target, tokens):
    """``(N,)`` bool: every free position holds a token of its alphabet."""
    free = tokens[:, target.free_positions]  # (N, F)
    return target.allowed.gather(1, free.T).T.all(-1)


def feasible_start(target, states, num_chains):
    ok = target.constraints.feasible(states)
    return states[ok][:1].expand(num_chains, -1).clone()


def test_the_constrained_target_has_alphabets_and_a_forbidden_pattern(target, states):
    assert target.allowed.sum(-1).tolist() == [3, 3, 2]
    feasible = torch.isfinite(target.evaluate(states).log_factor)
    alphabet = in_alphabets(target, states)
    assert int(feasible.sum()) == 10 and int(alphabet.sum()) == 18  # the pattern kills 8 in the alphabets
    assert torch.equal(target.forbidden(states), ~feasible)  # the rules alone, no forward
    opaque = ConstrainedTarget(target.base, target.log_factor)  # the same factor as one callable
    assert not target.base.forbidden(states).any() and not opaque.forbidden(states).any()  # not consulted early


def test_proposal_log_probs_renormalises_over_each_sites_alphabet():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]])
    allowed = torch.tensor([[True, True, False, False], [True, True, True, True]])
    lq = proposal_log_probs(logits, allowed, top_k=3)
    assert torch.equal(torch.isfinite(lq), torch.tensor([[True, True, False, False], [False, True, True, True]]))
    torch.testing.assert_close(lq[0, :2].exp(), torch.softmax(logits[0, :2], -1))  # top_k past the alphabet: all
    torch.testing.assert_close(lq.exp().sum(-1), torch.ones(2))


MH_VARIANTS = [
    dict(scan="random"),
    dict(scan="random_sweep"),
    dict(scan="left_to_right"),
    dict(scan="random", block_size=2),
    dict(scan="left_to_right", block_size=2),
    dict(scan="random", top_k=2),
]
EXACT_KERNELS = [(MetropolisHastings, o) for o in MH_VARIANTS] + [
    (SurrogateMH, dict(inner_steps=3, surrogate_window=0, surrogate_dtype="float32")),
    (SurrogateMH, dict(inner_steps=2, surrogate_window=1)),
    (SurrogateMH, dict(inner_steps=2, surrogate_window=0, surrogate_context=1)),
]


def move_rate(P, pi):
    """Stationary probability that a step (a sweep, for the sweep scans) changes the state."""
    return float(pi @ (1 - P.diagonal()))


@pytest.mark.parametrize(
    "kernel_cls, options", EXACT_KERNELS, ids=[f"{k.name}-{'-'.join(map(str, o.values()))}" for k, o in EXACT_KERNELS]
)
def test_restricted_proposals_are_exact_stay_feasible_and_move_more(dist, target, states, kernel_cls, options):
    pi = exact.exact_log_probs(target, states).exp()
    feasible = pi > 0
    P = exact.transition_matrix(kernel_cls(target, **options), states)
    torch.testing.assert_close(P.sum(1), torch.ones(len(pi), dtype=P.dtype), atol=1e-12, rtol=0)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    assert float(P[feasible][:, ~feasible].abs().max()) == 0.0  # never to an infeasible state
    # the same density with proposals over every ordinary token (the log-factor rejects the rest)
    unrestricted = ConstrainedTarget(dist, target.log_factor)
    assert torch.equal(unrestricted.allowed, dist.allowed)
    Q = exact.transition_matrix(kernel_cls(unrestricted, **options), states)
    assert float((pi @ Q - pi).abs().max()) < 1e-10
    restricted_rate, unrestricted_rate = move_rate(P, pi), move_rate(Q, pi)
    print(f"{kernel_cls.name} {options}: moves {restricted_rate:.4f} restricted, {unrestricted_rate:.4f} unrestricted")
    assert restricted_rate >= unrestricted_rate - 1e-12
    if kernel_cls is MetropolisHastings and "top_k" not in options:
        assert restricted_rate > unrestricted_rate + 1e-3  # proposals outside the alphabets are no longer wasted


def test_a_proposal_killed_by_a_pattern_costs_no_forward(target, states, monkeypatch):
    dist = target.base
    kernel = MetropolisHastings(target, scan="random")
    gen = ChainStreams(5, 16)
    state = kernel.init(feasible_start(target, states, 16))
    rows: list[int] = []
    real = dist.evaluate
    monkeypatch.setattr(dist, "evaluate", lambda x, *a, **k: rows.append(x.shape[0]) or real(x, *a, **k))
    killed = evaluated = 0
    for _ in range(25):
        rows.clear()
        state, info = kernel.step(state, gen)
        assert sum(rows) == int(info.evaluated.sum())  # one forward per evaluated chain, none for the others
        killed += int((~info.evaluated & (info.acceptance_rate == 0)).sum())  # changed, forbidden, unrun
        evaluated += int(info.evaluated.sum())
        assert not bool((info.is_accepted & ~info.evaluated & (info.acceptance_rate == 0)).any())
        assert bool(target.constraints.feasible(state.tokens).all())
    assert killed > 0 and evaluated > 0


def test_surrogate_mh_counts_the_copies_it_runs(target, states, monkeypatch):
    dist = target.base
    kernel = SurrogateMH(target, inner_steps=4, surrogate_window=0)
    gen = ChainStreams(2, 8)
    state = kernel.init(feasible_start(target, states, 8))
    copies: list[int] = []
    real = dist.evaluate
    full = dist.scored_positions.numel()

    def counted(x, positions=None, **kw):
        copies.append(x.shape[0] * (full if positions is None else positions.numel()))
        return real(x, positions, **kw)

    monkeypatch.setattr(dist, "evaluate", counted)
    for _ in range(5):
        copies.clear()
        state, info = kernel.step(state, gen)
        assert sum(copies) == int(info.masked_copies.sum())
        assert bool(in_alphabets(target, state.inner.tokens).all())


ALPHABETS_ONLY = [Allowed("no-e", "ACD"), Allowed.fixed("mid", 1, "A"), Allowed("last", "CD", positions=[-1])]


@pytest.mark.parametrize("scan", ["random", "left_to_right", "parallel_masked", "parallel_unmasked"])
def test_pseudo_gibbs_draws_within_the_alphabets(dist, states, scan):
    target = ConstraintSpec(ALPHABETS_ONLY).constrain(dist)
    kernel = PseudoGibbs(target, scan=scan, top_k=3)
    inside = in_alphabets(target, states)
    P = exact.transition_matrix(kernel, states)
    assert float(P[inside][:, ~inside].abs().max()) == 0.0
    state = kernel.init(states[inside][:1].expand(6, -1))
    gen = ChainStreams(1, 6)
    for _ in range(6):
        state, _ = kernel.step(state, gen)
        assert bool(in_alphabets(target, state.tokens).all())


def test_mask_predict_decodes_within_the_alphabets(dist):
    target = ConstraintSpec(ALPHABETS_ONLY).constrain(dist)
    kernel = MaskPredict(target, iterations=3)
    state = kernel.init(target.template.expand(4, -1))
    for _ in range(3):
        state, _ = kernel.step(state)
    assert bool(in_alphabets(target, state.tokens).all())
    assert bool((state.tokens[:, target.free_positions[1]] == dist.mlm.vocab.index("A")).all())


@pytest.mark.parametrize("kernel_cls", [PseudoGibbs, MaskPredict])
def test_kernels_without_log_factors_refuse_rules_beyond_the_alphabets(dist, target, kernel_cls):
    with pytest.raises(ValueError, match="would ignore the log-factor"):
        kernel_cls(target)
    alphabets = ConstraintSpec(ALPHABETS_ONLY).constrain(dist)
    with pytest.raises(ValueError, match="would ignore the log-factor"):  # a factor under the alphabets
        kernel_cls(ConstraintSpec(ALPHABETS_ONLY).constrain(ConstrainedTarget(dist, target.log_factor)))
    kernel_cls(alphabets)
