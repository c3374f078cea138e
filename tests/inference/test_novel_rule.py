"""The novelty rule (issue 45): every designed loop at Hamming distance at least d from each known
loop, a hard rule like the others. On the 64 states of A?C?? (ACDE, float64): the rule's
violations against a hand count, every exact kernel's matrix leaves the constrained target
invariant and never moves a feasible state to an infeasible one, zero violations in sampled
chains from a feasible start, the spec file, the record and the command line's flags, and the
refusals (no loop of the designed length, a token outside the vocabulary, an empty feasible set)."""

import itertools

import pytest
import torch

from mlm_ppl import run_chains
from mlm_ppl.inference import MetropolisHastings, SurrogateMH, exact
from mlm_ppl.models.constraints import ConstraintSpec, Novel

KNOWN = ("ACA", "DDE", "CCCC", "EEEEEE")  # the last two: other lengths, never a match


def by_hand(rules_states, rules_dist, known, d):
    """(N,) bool: the designed loop (free positions 1, 3, 4 of A?C??) within d - 1 of a known loop."""
    vocab = rules_dist.mlm.vocab
    out = []
    for row in rules_states.tolist():
        loop = "".join(vocab[row[p]] for p in rules_dist.free_positions.tolist())
        out.append(any(len(k) == len(loop) and sum(a != b for a, b in zip(loop, k)) < d for k in known))
    return torch.tensor(out)


@pytest.mark.parametrize("d", [1, 2])
def test_the_rule_breaks_exactly_the_loops_near_a_known_one(rules_dist, rules_states, d):
    target = ConstraintSpec([Novel("novel", KNOWN, d)]).constrain(rules_dist)
    broke = target.constraints.violations(rules_states)["novel"]
    assert torch.equal(broke, by_hand(rules_states, rules_dist, KNOWN, d))
    assert int(broke.sum()) == {1: 2, 2: 20}[d]  # ACA and DDE; at d 2 also their 9 neighbours each (3 apart)


@pytest.mark.parametrize(
    "kernel_cls, options",
    [(MetropolisHastings, {}), (MetropolisHastings, dict(block_size=2)), (SurrogateMH, dict(inner_steps=3))],
    ids=["mh", "mh-block2", "surrogate-mh"],
)
def test_kernels_sample_the_novel_target_exactly(rules_dist, rules_states, kernel_cls, options):
    target = ConstraintSpec([Novel("novel", KNOWN, 2)]).constrain(rules_dist)
    pi = exact.exact_log_probs(target, rules_states).exp()
    feasible = pi > 0
    assert torch.equal(~feasible, by_hand(rules_states, rules_dist, KNOWN, 2))
    P = exact.transition_matrix(kernel_cls(target, **options), rules_states)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    assert float(P[feasible][:, ~feasible].abs().max()) == 0.0  # never to a loop near a known one


def test_sampled_chains_never_break_the_rule(rules_dist, rules_states):
    target = ConstraintSpec([Novel("novel", KNOWN, 2)]).constrain(rules_dist)
    start = rules_states[target.constraints.feasible(rules_states)][:1].expand(4, -1).clone()
    run = run_chains(MetropolisHastings(target), 4, 200, seed=3, init=start)
    flat = run.tokens.reshape(-1, run.tokens.shape[-1])
    assert not bool(target.constraints.violations(flat)["novel"].any())
    assert len(torch.unique(flat, dim=0)) > 5  # the chains moved


def test_the_rule_round_trips_through_a_spec_file_and_refuses_what_cannot_hold(rules_dist, rules_states, tmp_path):
    (tmp_path / "known.txt").write_text("# known loops\nACA\n\nDDE\nCCCC\n")
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text('[[rules]]\nkind = "novel"\nname = "not-known"\nfile = "known.txt"\nmin_distance = 2\n')
    spec = ConstraintSpec.from_toml(spec_file)
    assert spec.rules[0] == Novel("not-known", ("ACA", "DDE", "CCCC"), 2)
    record = spec.to_dict()
    assert record["rules"][0] == {
        "kind": "novel",
        "name": "not-known",
        "loops": ["ACA", "DDE", "CCCC"],
        "min_distance": 2,
    }
    assert ConstraintSpec.from_dict(record).rules == spec.rules  # the loops are the record, not the file
    with pytest.raises(ValueError, match="none of its 1 loops has the designed loop's 3 tokens"):
        ConstraintSpec([Novel("novel", ("ACDE",))]).constrain(rules_dist)
    with pytest.raises(ValueError, match="token 'X' of loop 'AXA' is not in the vocabulary"):
        ConstraintSpec([Novel("novel", ("AXA",))]).constrain(rules_dist)
    with pytest.raises(ValueError, match="min_distance must be an integer >= 1"):
        Novel("novel", ("ACA",), 0)
    spec_file.write_text('[[rules]]\nkind = "novel"\nname = "n"\nloops = ["ACA"]\nfile = "known.txt"\n')
    with pytest.raises(ValueError, match="one of the two"):
        ConstraintSpec.from_toml(spec_file)
    # every loop of the alphabet known, at distance 1: no state can hold the rule
    every = ["".join(t) for t in itertools.product("ACDE", repeat=3)]
    target = ConstraintSpec([Novel("novel", every)]).constrain(rules_dist)
    assert not bool(target.constraints.feasible(rules_states).any())
