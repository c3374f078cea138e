"""Derived pair joints (Torroba Hennigen & Kim 2023): exact values on table fakes, the MLM
reads against a naive reference, and clear errors."""

import math

import pytest
import torch

from mlm_ppl import derive_pair_joint, pair_conditionals
from mlm_ppl.evaluation import compatibility_score
from mlm_ppl.models.pairs import PAIR_METHODS, PairConditionals, PairJoint, arnold_gokhale, pair_joint, summed_kl
from mlm_ppl.testing import goyal_counterexample, table_from_joint, table_pair_conditionals
from reference import naive_both_masked, naive_pair_logits

SENTENCE = "the cat sat on the mat"
GOYAL_TOL = 1e-7  # the table of goyal_counterexample() is float32


def flat(joint):
    return joint.log_joint.exp().flatten().tolist()


def random_conditionals(ka, kb, seed, scale=2.0):
    """Incompatible conditionals: independent random logits for the two families."""
    g = torch.Generator().manual_seed(seed)
    la = torch.randn(ka, kb, generator=g, dtype=torch.float64) * scale
    lb = torch.randn(ka, kb, generator=g, dtype=torch.float64) * scale
    zeros_a, zeros_b = torch.zeros(ka, dtype=torch.float64), torch.zeros(kb, dtype=torch.float64)
    return PairConditionals(
        (1, 2), torch.arange(ka), torch.arange(kb), la, lb, zeros_a, zeros_b, la[:, 0], lb[0], (0, 0)
    )


# ---------------------------------------------------------------------- Goyal's example
def test_goyal_example_through_the_table_fake():
    cond = table_pair_conditionals(goyal_counterexample())
    ag = pair_joint(cond, "ag")
    assert ag.converged and ag.iterations < 10
    assert flat(ag) == pytest.approx([0.3725, 0.1275, 0.1275, 0.3725], abs=GOYAL_TOL)
    # MRF: q ∝ P(x1|x2) P(x2|x1) = .99 * .5 on the diagonal
    assert flat(pair_joint(cond, "mrf")) == pytest.approx([0.495, 0.005, 0.005, 0.495], abs=GOYAL_TOL)
    # logits of the fake are its log-probabilities, so MRF-logit is MRF here
    assert flat(pair_joint(cond, "mrf_logit")) == pytest.approx([0.495, 0.005, 0.005, 0.495], abs=GOYAL_TOL)


@pytest.mark.parametrize(
    "pivot, side, expected",
    [
        # q(x2) ∝ P(x2|x1=0) / P(x1=0|x2) = .5/.99, .5/.01 -> (.01, .99); q = q(x2) P(x1|x2)
        (0, "a", [0.01 * 0.99, 0.99 * 0.01, 0.01 * 0.01, 0.99 * 0.99]),
        # pivot x1=1: q(x2) ∝ .5/.01, .5/.99 -> (.99, .01)
        (1, "a", [0.99 * 0.99, 0.01 * 0.01, 0.99 * 0.01, 0.01 * 0.99]),
        # pivot on x2: P(x2|x1)/P(x2*|x1) = 1, q(x1, x2) ∝ P(x1 | x2*)
        (0, "b", [0.495, 0.495, 0.005, 0.005]),
        (1, "b", [0.005, 0.005, 0.495, 0.495]),
    ],
)
def test_goyal_example_hcb_each_pivot(pivot, side, expected):
    cond = table_pair_conditionals(goyal_counterexample())
    joint = pair_joint(cond, "hcb", pivot=pivot, pivot_side=side)
    assert joint.pivot == pivot
    assert flat(joint) == pytest.approx(expected, abs=GOYAL_TOL)


def test_compatibility_score_hand_value_and_zero_when_compatible():
    cond = table_pair_conditionals(goyal_counterexample())
    # C = A / B = [[1.98, .02], [.02, 1.98]]; row, column and total sums cancel to log C_ij
    expected = (math.log(1.98) ** 2 + math.log(0.02) ** 2) / 2
    assert float(compatibility_score(cond.log_cond_a, cond.log_cond_b)) == pytest.approx(expected, rel=1e-6)
    p = torch.tensor([[0.3, 0.1, 0.05], [0.05, 0.2, 0.1], [0.02, 0.08, 0.1]], dtype=torch.float64)
    comp = table_pair_conditionals(table_from_joint(p))
    assert float(compatibility_score(comp.log_cond_a, comp.log_cond_b)) < 1e-20


# ---------------------------------------------------------------------- compatible conditionals
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compatible_conditionals_are_recovered_by_hcb_and_ag(seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(4, 4, generator=g, dtype=torch.float64) ** 2 + 0.01
    p = p / p.sum()
    cond = table_pair_conditionals(table_from_joint(p), marginals=(p.sum(1), p.sum(0)))
    for options in ({"pivot": "both"}, {"pivot": "one"}, {"pivot": 2}, {"pivot": 3, "pivot_side": "b"}):
        assert torch.allclose(pair_joint(cond, "hcb", **options).log_joint.exp(), p, atol=1e-12)
    assert torch.allclose(pair_joint(cond, "ag").log_joint.exp(), p, atol=1e-9)
    # the MRF squares the dependence: q ∝ p^2 / (p_a p_b), not p ...
    mrf = pair_joint(cond, "mrf").log_joint.exp()
    squared = p**2 / (p.sum(1, keepdim=True) * p.sum(0, keepdim=True))
    assert torch.allclose(mrf, squared / squared.sum(), atol=1e-12)
    assert (mrf - p).abs().sum() / 2 > 0.02
    # ... and the naive product of the marginals forgets it
    assert (pair_joint(cond, "naive").log_joint.exp() - p).abs().sum() / 2 > 0.02


def test_mrf_recovers_an_independent_joint():
    p = torch.outer(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.1, 0.6, 0.3])).double()
    cond = table_pair_conditionals(table_from_joint(p), marginals=(p.sum(1), p.sum(0)))
    for method in PAIR_METHODS:
        assert torch.allclose(pair_joint(cond, method).log_joint.exp(), p, atol=1e-9), method


# ---------------------------------------------------------------------- Arnold-Gokhale
@pytest.mark.parametrize("shape, seed", [((5, 4), 0), ((3, 6), 1), ((8, 8), 2)])
def test_ag_fixed_point_is_a_stationary_point_of_the_summed_kl(shape, seed):
    cond = random_conditionals(*shape, seed)
    joint = pair_joint(cond, "ag", tol=1e-11)
    assert joint.converged
    q = joint.log_joint.exp()
    la, lb = cond.log_cond_a, cond.log_cond_b

    def J(probs):
        return float(summed_kl(probs.log(), la, lb))

    g = torch.Generator().manual_seed(100 + seed)
    base = J(q)
    eps = 1e-5
    for _ in range(20):
        d = torch.randn(shape, generator=g, dtype=torch.float64) * q  # stays positive for small eps
        d = d - q * d.sum()  # tangent to the simplex
        up, down = J(q + eps * d), J(q - eps * d)
        assert up >= base - 1e-12 and down >= base - 1e-12  # a local minimum
        assert abs(up - down) / (2 * eps) < 1e-6  # zero directional derivative
    # the uniform joint is not stationary: the same check there finds a slope
    u = torch.full(shape, 1.0 / q.numel(), dtype=torch.float64)
    d = torch.randn(shape, generator=g, dtype=torch.float64) * u
    d = d - u * d.sum()
    assert abs(J(u + eps * d) - J(u - eps * d)) / (2 * eps) > 1e-3


def test_ag_minimises_the_forward_kl_among_the_methods():
    for seed in range(5):
        cond = random_conditionals(6, 5, seed)
        objective = {
            m: float(summed_kl(pair_joint(cond, m).log_joint, cond.log_cond_a, cond.log_cond_b)) for m in PAIR_METHODS
        }
        assert objective["ag"] == min(objective.values())


def test_ag_reports_when_it_does_not_converge():
    cond = random_conditionals(6, 6, 3, scale=4.0)
    joint = pair_joint(cond, "ag", max_iter=2)
    assert not joint.converged and joint.iterations == 2
    assert pair_joint(cond, "ag").converged
    logq, converged, iterations = arnold_gokhale(cond.log_cond_a, cond.log_cond_b, tol=1e-3)
    assert converged and iterations < pair_joint(cond, "ag").iterations
    # the plain iteration reaches the same fixed point, in more steps
    plain = pair_joint(cond, "ag", accelerate=False, max_iter=200000)
    assert plain.converged and plain.iterations > pair_joint(cond, "ag").iterations
    assert torch.allclose(plain.log_joint.exp(), pair_joint(cond, "ag").log_joint.exp(), atol=1e-6)


# ---------------------------------------------------------------------- the joint object
def test_pair_joint_is_a_normalised_pyro_categorical():
    import pyro.distributions as dist

    cond = random_conditionals(3, 4, 0)
    joint = pair_joint(cond, "mrf")
    assert isinstance(joint, dist.Categorical) and isinstance(joint, PairJoint)
    assert float(joint.probs.sum()) == pytest.approx(1.0, abs=1e-12)
    draws = joint.sample(torch.Size([2000]))
    tokens = joint.tokens(draws)
    assert tokens.shape == (2000, 2)
    assert float(joint.log_prob_tokens(2, 3)) == pytest.approx(float(joint.log_joint[2, 3]))
    assert float(joint.log_prob(torch.tensor(2 * 4 + 3))) == pytest.approx(float(joint.log_joint[2, 3]))
    assert joint.log_prob_tokens(7, 0) == float("-inf")
    freq = torch.bincount(draws, minlength=12).double() / 2000
    assert (freq - joint.probs).abs().sum() / 2 < 0.05
    assert joint.expand((3,)).batch_shape == (3,)


# ---------------------------------------------------------------------- reading a real MLM
@pytest.fixture(scope="module")
def bert():
    from mlm_ppl.testing import tiny_bert

    return tiny_bert()


def test_full_support_reads_match_one_forward_per_copy(bert):
    ids = bert.encode(SENTENCE).input_ids[0]
    cond = pair_conditionals(bert, SENTENCE, 2, 4)
    ordinary = bert.ordinary_mask.nonzero().flatten()
    assert cond.candidates_a.tolist() == ordinary.tolist() == cond.candidates_b.tolist()
    V = ordinary.numel()
    assert cond.copies == 2 * V + 1  # the observed contexts are read once
    la, lb = naive_pair_logits(bert, ids, 2, 4, ordinary.tolist(), ordinary.tolist())
    assert torch.allclose(cond.logits_a, la, atol=1e-5)
    assert torch.allclose(cond.logits_b, lb, atol=1e-5)
    ma, mb = naive_both_masked(bert, ids, 2, 4)
    assert torch.allclose(cond.marginal_a, ma[ordinary], atol=1e-5)
    assert torch.allclose(cond.marginal_b, mb[ordinary], atol=1e-5)
    i, j = cond.observed_index
    assert cond.observed == (int(ids[2]), int(ids[4]))
    assert torch.allclose(cond.single_a, cond.logits_a[:, j]) and torch.allclose(cond.single_b, cond.logits_b[i])
    # each column of log_cond_a is a distribution over the ordinary tokens
    assert torch.allclose(cond.log_cond_a.exp().sum(0), torch.ones(V, dtype=torch.float64))


def test_top_k_support_follows_the_paper(bert):
    ids = bert.encode(SENTENCE).input_ids[0]
    K = 7
    cond = pair_conditionals(bert, SENTENCE, 3, 4, support=K)
    ordinary = bert.ordinary_mask
    ma, mb = naive_both_masked(bert, ids, 3, 4)
    for cands, obs, pos, marg in (
        (cond.candidates_a, int(ids[3]), 3, ma),
        (cond.candidates_b, int(ids[4]), 4, mb),
    ):
        assert len(cands) == K and len(set(cands.tolist())) == K and bool(ordinary[cands].all())
        assert int(cands[0]) == obs  # gold first
        x = ids.clone()
        x[pos] = bert.tokenizer.mask_token_id
        with torch.no_grad():
            single = bert.model(input_ids=x[None]).logits[0, pos].double()
        single = single.masked_fill(~ordinary, -math.inf)
        single[obs] = -math.inf
        half = (K - 1) // 2
        assert set(cands[1 : 1 + half].tolist()) == set(single.topk(half).indices.tolist())
        rest = marg.masked_fill(~ordinary, -math.inf)
        rest[cands[: 1 + half]] = -math.inf
        assert set(cands[1 + half :].tolist()) == set(rest.topk(K - 1 - half).indices.tolist())
    la, lb = naive_pair_logits(bert, ids, 3, 4, cond.candidates_a.tolist(), cond.candidates_b.tolist())
    assert torch.allclose(cond.logits_a, la, atol=1e-5) and torch.allclose(cond.logits_b, lb, atol=1e-5)
    assert cond.copies == 2 * K + 1


def test_explicit_support_and_token_id_input(bert):
    ids = bert.encode(SENTENCE).input_ids[0]
    observed = {int(ids[2]), int(ids[5])}
    ordinary = [t for t in bert.ordinary_mask.nonzero().flatten().tolist() if t not in observed]
    cand_a, cand_b = ordinary[:3], ordinary[2:6]  # the observed tokens are not candidates
    cond = pair_conditionals(bert, ids, 2, 5, support=(cand_a, cand_b))
    assert cond.observed_index is None
    assert cond.copies == 3 + 3 + 4
    la, lb = naive_pair_logits(bert, ids, 2, 5, cand_a, cand_b)
    assert torch.allclose(cond.logits_a, la, atol=1e-5) and torch.allclose(cond.logits_b, lb, atol=1e-5)


def test_derive_pair_joint_end_to_end(bert):
    for method in PAIR_METHODS:
        joint = derive_pair_joint(bert, SENTENCE, 2, 3, method=method, support=5)
        assert joint.method == method and joint.positions == (2, 3)
        assert float(joint.probs.sum()) == pytest.approx(1.0, abs=1e-9)
    hcb = derive_pair_joint(bert, SENTENCE, 2, 3, method="hcb", pivot="one", support=5)
    cond = pair_conditionals(bert, SENTENCE, 2, 3, support=5)
    assert hcb.pivot == int(cond.candidates_a[torch.argmax(cond.single_a)])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"a": 2, "b": 2}, ValueError, "must differ"),
        ({"a": 0, "b": 2}, ValueError, "not an ordinary token"),
        ({"a": 2, "b": 99}, ValueError, "not an ordinary token"),
        ({"a": 2.0, "b": 3}, TypeError, "must be an int"),
        ({"method": "gibbs"}, ValueError, "method must be one of"),
        ({"method": "mrf", "pivot": "one"}, ValueError, "hcb' only"),
        ({"method": "hcb", "tol": 1e-3}, ValueError, "'ag' only"),
        ({"method": "hcb", "pivot": "middle"}, ValueError, "pivot must be"),
        ({"method": "hcb", "pivot_side": "c"}, ValueError, "pivot_side"),
        ({"method": "ag", "max_iter": 0}, ValueError, "max_iter"),
        ({"method": "ag", "tol": -1.0}, ValueError, "tol"),
        ({"method": "ag", "accelerate": 1}, TypeError, "accelerate must be true or false, got int 1"),
        ({"method": "mrf", "accelerate": False}, ValueError, "'ag' only"),
        ({"support": 0}, ValueError, "support K"),
        ({"support": 1000}, ValueError, "support K"),
        ({"support": ([0, 1], [5])}, ValueError, "ordinary token ids"),
        ({"support": ([5, 5], [6])}, ValueError, "repeats"),
        ({"support": "every"}, TypeError, "support must be None, an int K, .all."),
        ({"method": "hcb", "pivot": 0, "support": 3}, ValueError, "not a candidate"),
    ],
)
def test_bad_input_is_a_clear_error(bert, kwargs, error, match):
    args = {"a": 2, "b": 3, "method": "ag", **kwargs}
    with pytest.raises(error, match=match):
        derive_pair_joint(bert, SENTENCE, **args)
