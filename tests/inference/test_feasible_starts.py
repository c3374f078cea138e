"""Feasible starts and moves from states of density 0 (issue 23, items 3 and 4).

Starts: the template is filled within the alphabets, a fill that breaks a pattern rule is
repaired from the chain's own stream or the run stops before its first step, and a given start
that breaks a rule is refused. Moves: a kernel at a state of density 0 (planted with
``kernel.init``, past the start check) never computes a NaN ratio, and its statistics say what
happened: a stuck chain reports acceptance 0 and the summary calls it infeasible.
"""

import pytest
import torch

from exactness import TEMPLATE, invariance_error
from mlm_ppl import MaskedLMDistribution
from mlm_ppl.diagnostics import INFEASIBLE, summary, to_inference_data
from mlm_ppl.inference import (
    KERNELS,
    ChainStreams,
    Run,
    exact,
    fill_template,
    kernel_class,
    make_kernel,
    run_chains,
    step_stats,
)
from mlm_ppl.inference.base import acceptance_probability, mh_log_ratio
from mlm_ppl.inference.starts import repair_start, rule_violations
from mlm_ppl.models import ConstrainedTarget
from mlm_ppl.models.constraints import Allowed, ConstraintSpec, Forbid, Require
from mlm_ppl.testing import tiny_bert

TEXT = "the [MASK] [MASK] on the [MASK]"
OPTIONS = {"mh": {}, "surrogate-mh": {"inner_steps": 3}}  # kernels' options kept cheap here
CONSTRAINED_KERNELS = [name for name in KERNELS if kernel_class(name).capabilities.log_factor]


@pytest.fixture(scope="module")
def bert():
    return tiny_bert()


@pytest.fixture(scope="module")
def dist(bert):
    return MaskedLMDistribution(bert, TEXT)


def cat_not_dog(dist):
    """The issue's case: the sentence must contain `cat` and never `dog`."""
    return ConstraintSpec([Require("must-cat", "cat"), Forbid("never-dog", "dog")]).constrain(dist)


def states(dist, *rows):
    """States of ``dist`` with the free positions holding the words of each row."""
    vocab = dist.mlm.vocab
    out = dist.template.expand(len(rows), -1).clone()
    for i, words in enumerate(rows):
        out[i, dist.free_positions] = torch.tensor([vocab.index(w) for w in words.split()])
    return out


def broken(target, tokens):
    """``(N,)`` bool: the state breaks some rule of the constraint target."""
    return ~target.constraints.feasible(tokens.reshape(-1, tokens.shape[-1]))


# ---------------------------------------------------------------------- starts
@pytest.mark.parametrize("name", ["mh", "surrogate-mh"])
def test_the_issue_case_starts_feasible_and_no_draw_breaks_a_rule(dist, name):
    target = cat_not_dog(dist)
    fill = fill_template(target, 3, ChainStreams(0, 3))
    assert broken(target, fill).all()  # the MLM's fill has no cat: every chain must be repaired
    kernel = make_kernel(name, target, **OPTIONS[name])
    run = run_chains(kernel, 3, 12, seed=0)
    assert not broken(target, run.initial).any()
    assert int(broken(target, run.tokens).sum()) == 0  # 0 violating draws after the start
    assert torch.isfinite(run.stats["lp"]).all()
    # the repair draws from the chain's own stream: chain 2 alone starts where it did beside the others
    alone = run_chains(kernel, 1, 1, seed=0, chains=[2])
    assert torch.equal(alone.initial[0], run.initial[2])


@pytest.mark.parametrize("method", ["sample", "greedy", "uniform"])
def test_the_fill_stays_within_the_alphabets(dist, method):
    spec = ConstraintSpec([Allowed("pets", "cat dog", positions=[0]), Allowed("verbs", "sat ran", positions=[1])])
    target = spec.constrain(dist)
    assert torch.equal(dist.allowed, dist.ordinary_mask.expand(dist.num_free, -1))
    fill = fill_template(target, 6, ChainStreams(3, 6), method)
    for rule, broke in target.constraints.violations(fill).items():
        assert not broke.any(), rule
    assert repair_start(target, fill, ChainStreams(3, 6)).equal(fill)  # nothing to repair: unchanged


def test_a_start_that_cannot_be_found_stops_the_run_before_any_step(dist, monkeypatch):
    target = ConstraintSpec([Require("must-cat", "cat"), Forbid("no-cat", "cat")]).constrain(dist)
    with pytest.raises(ValueError, match=r"^no sequence satisfying '(must-cat|no-cat)' found after 30 tries"):
        repair_start(target, fill_template(target, 2, ChainStreams(0, 2)), ChainStreams(0, 2), tries=30)
    kernel = make_kernel("mh", target)

    def no_step(state, streams):
        raise AssertionError("a step ran from an infeasible start")

    monkeypatch.setattr(kernel, "step", no_step)
    with pytest.raises(ValueError, match=r"no sequence satisfying .* found after 2000 tries .* chain 0"):
        run_chains(kernel, 1, 5, seed=0)


def test_a_given_start_that_breaks_a_rule_is_refused_naming_chain_and_rule(dist):
    target = cat_not_dog(dist)
    kernel = make_kernel("mh", target)
    good = states(dist, "cat sat mat", "big cat ran")
    with pytest.raises(ValueError, match="the start of chain 1 breaks rule 'never-dog'"):
        run_chains(kernel, 2, 1, init=torch.cat([good[:1], states(dist, "dog sat cat")]))
    with pytest.raises(ValueError, match="the start of chain 0 breaks rule 'must-cat', 'never-dog'"):
        run_chains(kernel, 1, 1, init=states(dist, "dog sat mat"))
    assert torch.equal(run_chains(kernel, 2, 1, init=good).initial, good)  # a feasible start is used as given


def test_a_plain_constrained_target_is_repaired_through_its_log_factor(dist):
    cat, free = dist.mlm.vocab.index("cat"), dist.free_positions
    target = ConstrainedTarget(dist, lambda x: torch.where(x[:, free[1]] == cat, 0.0, float("-inf")))
    fill = states(dist, "big dog mat", "a red run")
    assert list(rule_violations(target, fill)) == ["finite log_factor"]
    repaired = repair_start(target, fill, ChainStreams(1, 2))
    assert (repaired[:, free[1]] == cat).all()
    assert rule_violations(dist, fill) is None  # a bare target has no rule to break
    nowhere = ConstrainedTarget(dist, lambda x: torch.full((x.shape[0],), float("-inf")))
    with pytest.raises(ValueError, match="no sequence satisfying 'finite log_factor' found after 30 tries"):
        repair_start(nowhere, fill, ChainStreams(1, 2), tries=30)


# ---------------------------------------------------------------------- moves from density 0
def test_the_log_ratio_is_defined_where_a_state_has_density_0():
    inf = float("inf")
    lp_old = torch.tensor([-1.0, -1.0, -inf, -inf, -1.0, -inf, -1.0])
    lp_new = torch.tensor([-2.0, -inf, -3.0, -inf, -1.0, -inf, -0.5])
    correction = torch.tensor([0.5, 0.0, -inf, 0.0, 0.0, 0.0, -inf])
    changed = torch.tensor([True, True, True, True, False, False, True])
    ratio = mh_log_ratio(lp_new, lp_old, correction, changed)
    assert ratio.tolist() == [-0.5, -inf, inf, -inf, 0.0, -inf, -inf]
    assert acceptance_probability(ratio).tolist() == pytest.approx([0.6065, 0, 1, 0, 1, 0, 0], abs=1e-4)


@pytest.mark.parametrize("name", CONSTRAINED_KERNELS)
def test_a_planted_infeasible_state_gives_no_nan_and_statistics_that_say_what_happened(dist, name):
    """Chain 0 (`dog dog`) is stuck: no single change removes both dogs; chain 1 (`dog sat`) is one
    change from the feasible set; chain 2 starts on it."""
    target = ConstraintSpec([Forbid("never-dog", "dog")]).constrain(dist)
    kernel = make_kernel(name, target, **OPTIONS.get(name, {}))
    planted = states(dist, "dog dog mat", "dog sat mat", "cat sat mat")
    state = kernel.init(planted)  # past the start check, as a Gibbs update of another site could leave it
    streams = ChainStreams(0, 3)
    draws, records = [], []
    for _ in range(12):
        before = ~broken(target, state.tokens)
        state, info = kernel.step(state, streams)
        after = ~broken(target, state.tokens)
        record = step_stats(info)
        for stat, values in record.items():
            assert not values.double().isnan().any(), stat
        assert (after | ~before).all()  # never leaves the feasible set
        off = ~before  # steps from a state of density 0: accepted exactly when they reached density > 0
        assert torch.equal(record["is_accepted"][off], after[off])
        assert torch.equal(record["acceptance_rate"][off].double(), after[off].double())
        assert torch.equal(record["n_changed"][off] > 0, after[off])
        assert torch.equal(torch.isneginf(record["lp"]), ~after)
        if "inner_acceptance" in record:  # the inner chain accepted nothing where the step stayed at density 0
            assert (record["inner_acceptance"][~after] == 0).all() and (record["n_moves"][~after] == 0).all()
        draws.append(state.tokens)
        records.append(record)
    stats = {k: torch.stack([r[k] for r in records], 1) for k in records[0]}
    assert not stats["is_accepted"][0].any() and (stats["acceptance_rate"][0] == 0).all()  # stuck: acceptance 0
    assert (stats["n_changed"][0] == 0).all()
    assert not broken(target, state.tokens[1:]).any()  # chain 1 reached the feasible set
    run = Run(torch.stack(draws, 1), stats, {}, planted)
    verdicts = summary(to_inference_data(run, mlm=dist.mlm))
    assert verdicts.chains[0] == INFEASIBLE and verdicts.reasons[0].startswith("12 of 12 draws have log density -inf")
    assert verdicts.chains[2] != INFEASIBLE


@pytest.mark.parametrize("name", ["mh", "surrogate-mh"])
def test_exact_matrices_move_off_density_0_and_keep_the_target_invariant(tiny4_64, name):
    """A hard constraint (-inf off the states with A at the first free position): the exact matrix
    has no NaN, leaves the target invariant, never leaves the feasible set and moves every
    infeasible state onto it with positive probability."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE)
    a, first = tiny4_64.vocab.index("A"), int(dist.free_positions[0])
    target = ConstrainedTarget(dist, lambda x: torch.where(x[:, first] == a, 0.0, float("-inf")))
    kernel = make_kernel(name, target, **({"inner_steps": 2} if name == "surrogate-mh" else {}))
    pi = exact.exact_log_probs(target).exp()
    P = exact.transition_matrix(kernel)
    feasible = pi > 0
    assert 0 < int(feasible.sum()) < len(pi)
    assert not P.isnan().any()
    assert invariance_error(kernel, pi) < 1e-10
    assert (P[feasible][:, ~feasible] == 0).all()
    assert (P[~feasible][:, feasible].sum(1) > 0).all()
