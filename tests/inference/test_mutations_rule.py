"""The trust region (issue 46): every designed loop within [min_mutations, max_mutations] positions of
a reference loop, a hard rule like the others. On the 64 states of A?C?? (ACDE, float64): violations
against a hand count, every exact kernel's matrix leaves the constrained target invariant and never
moves a feasible state to an infeasible one, zero violations in sampled chains, a feasible start found
from a random fill on a longer loop (the repair lowers the excess position by position), the spec
file and the record, and the refusals (the command line's flags: tests/cli/test_cli_constraints.py)."""

import pytest
import torch

from mlm_ppl import MaskedLMDistribution, run_chains
from mlm_ppl.inference import ChainStreams, MetropolisHastings, SurrogateMH, exact
from mlm_ppl.inference.base import fill_template
from mlm_ppl.inference.starts import repair_start
from mlm_ppl.models.constraints import ConstraintSpec, Mutations, Novel
from mlm_ppl.testing import tiny_residue_bert

REFERENCE = "DCA"


def distances(rules_states, rules_dist, reference):
    vocab = rules_dist.mlm.vocab
    loops = ["".join(vocab[row[p]] for p in rules_dist.free_positions.tolist()) for row in rules_states.tolist()]
    return torch.tensor([sum(a != b for a, b in zip(loop, reference)) for loop in loops])


@pytest.mark.parametrize("low, high", [(0, 1), (2, None), (1, 2)])
def test_the_rule_breaks_exactly_the_loops_outside_the_window(rules_dist, rules_states, low, high):
    spec = ConstraintSpec([Mutations("trust", high, low)], reference=REFERENCE)
    broke = spec.constrain(rules_dist).constraints.violations(rules_states)["trust"]
    d = distances(rules_states, rules_dist, REFERENCE)
    expected = (d < low) | (d > high if high is not None else torch.zeros_like(d, dtype=torch.bool))
    assert torch.equal(broke, expected)
    # 1 loop at distance 0, 9 at 1, 27 at 2, 27 at 3
    assert int((~broke).sum()) == {(0, 1): 10, (2, None): 54, (1, 2): 36}[(low, high)]
    degrees = spec.constrain(rules_dist).constraints.violations(rules_states, degrees=True)["trust"]
    assert torch.equal(degrees, (low - d).clamp(min=0) + ((d - high).clamp(min=0) if high is not None else 0))


@pytest.mark.parametrize(
    "kernel_cls, options",
    [(MetropolisHastings, {}), (MetropolisHastings, dict(block_size=2)), (SurrogateMH, dict(inner_steps=3))],
    ids=["mh", "mh-block2", "surrogate-mh"],
)
def test_kernels_sample_the_trust_region_exactly(rules_dist, rules_states, kernel_cls, options):
    """A window 1 <= d <= 2 with the rule's own reference, beside a novelty rule."""
    spec = ConstraintSpec([Mutations("trust", 2, 1, reference=REFERENCE), Novel("novel", ("ACA",), 1)])
    target = spec.constrain(rules_dist)
    pi = exact.exact_log_probs(target, rules_states).exp()
    feasible = pi > 0
    d = distances(rules_states, rules_dist, REFERENCE)
    assert int(feasible.sum()) == 36 - 1  # the window holds 36 loops; ACA is at distance 2 and known
    assert torch.equal(feasible, (d >= 1) & (d <= 2) & (distances(rules_states, rules_dist, "ACA") > 0))
    P = exact.transition_matrix(kernel_cls(target, **options), rules_states)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    assert float(P[feasible][:, ~feasible].abs().max()) == 0.0


def test_chains_start_inside_the_region_and_never_leave_it():
    """12 free positions, at most 2 changes from the reference: a random fill lies ~9 away, and the
    repair search walks it in; 4 chains of MH then keep every draw inside."""
    long = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A" + "[MASK]" * 12 + "C")
    reference = "ACDEACDEACDE"
    target = ConstraintSpec([Mutations("trust", 2)], reference=reference).constrain(long)
    streams = ChainStreams(0, 4)
    fill = fill_template(target, 4, streams, "uniform")
    assert bool((distances(fill, long, reference) > 2).all())
    start = repair_start(target, fill, streams)
    assert bool((distances(start, long, reference) <= 2).all())
    run = run_chains(MetropolisHastings(target), 4, 60, seed=1)
    flat = run.tokens.reshape(-1, run.tokens.shape[-1])
    d = distances(flat, long, reference)
    assert bool((d <= 2).all()) and len(torch.unique(flat, dim=0)) > 3


def test_the_rule_round_trips_through_a_spec_file_and_refuses_what_cannot_hold(rules_dist, tmp_path):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        'reference = "DCA"\n\n[[rules]]\nkind = "mutations"\nname = "trust"\nmax_mutations = 2\nmin_mutations = 1\n'
    )
    spec = ConstraintSpec.from_toml(spec_file)
    assert spec.rules[0] == Mutations("trust", 2, 1) and spec.reference == "DCA"
    record = spec.to_dict()
    assert record["reference"] == "DCA"
    assert record["rules"][0] == {"kind": "mutations", "name": "trust", "max_mutations": 2, "min_mutations": 1}
    assert ConstraintSpec.from_dict(record).to_dict() == record
    assert ConstraintSpec.from_toml(_write(tmp_path, spec.to_toml())).to_dict() == record
    for args, message in [
        (("trust",), "give max_mutations .* or min_mutations >= 1"),
        (("trust", 1, 2), "min_mutations 2 > max_mutations 1: no loop can meet both"),
        (("trust", -1), "max_mutations must be an integer >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            Mutations(*args)
    with pytest.raises(ValueError, match="no reference loop: give the rule a reference, or the spec one"):
        ConstraintSpec([Mutations("trust", 1)]).constrain(rules_dist)
    with pytest.raises(ValueError, match="'DCAA' has 4 tokens; the designed loop has 3"):
        ConstraintSpec([Mutations("trust", 1)], reference="DCAA").constrain(rules_dist)
    with pytest.raises(ValueError, match="token 'X' of 'DXA' is not in the vocabulary"):
        ConstraintSpec([Mutations("trust", 1, reference="DXA")]).constrain(rules_dist)
    spec_file.write_text('[[rules]]\nkind = "mutations"\nname = "t"\nmax = 2\n')
    with pytest.raises(ValueError, match="key 'max': unknown key; expected kind, name, max_mutations"):
        ConstraintSpec.from_toml(spec_file)


def _write(tmp_path, text):
    path = tmp_path / "again.toml"
    path.write_text(text)
    return path
