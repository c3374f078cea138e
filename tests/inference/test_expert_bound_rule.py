"""Thresholds on an expert's value as hard rules (issue 46): numbers or relative to the reference's
value. On the 64 states of A?C?? (ACDE, float64): violations against a hand count, every exact
kernel's matrix leaves the constrained target invariant and never moves a feasible state to an
infeasible one, a feasible start found from a random fill on a longer loop (the repair lowers the
distance past the bound), the spec file and the record, and the refusals."""

import pytest
import torch

from mlm_ppl import MaskedLMDistribution, run_chains
from mlm_ppl.inference import ChainStreams, MetropolisHastings, SurrogateMH, exact
from mlm_ppl.inference.base import fill_template
from mlm_ppl.inference.starts import repair_start
from mlm_ppl.models.constraints import ConstraintSpec, ExpertBound, Mutations, hydropathy
from mlm_ppl.testing import tiny_residue_bert

KD = {"A": 1.8, "C": 2.5, "D": -3.5, "E": -3.5}
REFERENCE = "DCA"  # mean hydropathy (-3.5 + 2.5 + 1.8) / 3 = 0.2667


def mean_hydropathy(rules_states, rules_dist):
    vocab = rules_dist.mlm.vocab
    loops = ["".join(vocab[row[p]] for p in rules_dist.free_positions.tolist()) for row in rules_states.tolist()]
    return torch.tensor([sum(KD[c] for c in loop) / len(loop) for loop in loops], dtype=torch.float64)


def spec_of(*rules, weight=0.0):
    return ConstraintSpec(list(rules), [hydropathy(weight=weight)], reference=REFERENCE)


@pytest.mark.parametrize(
    "low, high, feasible",
    [(None, "reference", 50), (-3.0, "reference - 0.5", 24), ("reference + 1", None, 8)],
)
def test_the_rule_breaks_exactly_the_values_past_its_bounds(rules_dist, rules_states, low, high, feasible):
    target = spec_of(ExpertBound("kd", "hydropathy", low, high)).constrain(rules_dist)
    broke = target.constraints.violations(rules_states)["kd"]
    v, ref = mean_hydropathy(rules_states, rules_dist), (-3.5 + 2.5 + 1.8) / 3
    lo = -torch.inf if low is None else (low if isinstance(low, float) else ref + {"reference + 1": 1}[low])
    hi = torch.inf if high is None else ref + {"reference": 0.0, "reference - 0.5": -0.5}[high]
    assert torch.equal(broke, (v < lo - 1e-12) | (v > hi + 1e-12))
    assert int((~broke).sum()) == feasible
    degrees = target.constraints.violations(rules_states, degrees=True)["kd"]
    assert bool((degrees[broke] >= 1).all()) and bool((degrees[~broke] == 0).all())


@pytest.mark.parametrize(
    "kernel_cls, options",
    [(MetropolisHastings, {}), (MetropolisHastings, dict(block_size=2)), (SurrogateMH, dict(inner_steps=3))],
    ids=["mh", "mh-block2", "surrogate-mh"],
)
def test_kernels_sample_the_bounded_target_exactly(rules_dist, rules_states, kernel_cls, options):
    """hydropathy <= reference with a weight, and a trust region of 2 around the reference."""
    target = spec_of(ExpertBound("kd", "hydropathy", max="reference"), Mutations("trust", 2), weight=-0.7).constrain(
        rules_dist
    )
    pi = exact.exact_log_probs(target, rules_states).exp()
    feasible = pi > 0
    v = mean_hydropathy(rules_states, rules_dist)
    assert bool((v[feasible] <= (-3.5 + 2.5 + 1.8) / 3 + 1e-12).all()) and 10 < int(feasible.sum()) < 50
    P = exact.transition_matrix(kernel_cls(target, **options), rules_states)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    assert float(P[feasible][:, ~feasible].abs().max()) == 0.0


def test_a_start_is_repaired_past_a_bound_a_random_fill_misses():
    """12 free positions, mean hydropathy <= -2.5 (a uniform fill averages -0.675): the repair walks
    each chain in; MH keeps every draw there."""
    long = MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A" + "[MASK]" * 12 + "C")
    target = ConstraintSpec([ExpertBound("kd", "hydropathy", max=-2.5)], [hydropathy(weight=0.0)]).constrain(long)
    streams = ChainStreams(0, 4)
    fill = fill_template(target, 4, streams, "uniform")
    assert bool((mean_hydropathy(fill, long) > -2.5).all())
    start = repair_start(target, fill, streams)
    assert bool((mean_hydropathy(start, long) <= -2.5).all())
    run = run_chains(MetropolisHastings(target), 4, 40, seed=1)
    flat = run.tokens.reshape(-1, run.tokens.shape[-1])
    assert bool((mean_hydropathy(flat, long) <= -2.5).all()) and len(torch.unique(flat, dim=0)) > 3


def test_the_rule_round_trips_through_a_spec_file_and_refuses_what_cannot_hold(rules_dist, tmp_path):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        'reference = "DCA"\n\n[[rules]]\nkind = "expert"\nname = "kd"\nexpert = "hydropathy"\n'
        'max = "reference-0.2"\nmin = -3\n\n[[experts]]\nkind = "hydropathy"\nname = "hydropathy"\nweight = 0\n'
    )
    spec = ConstraintSpec.from_toml(spec_file)
    assert spec.rules[0] == ExpertBound("kd", "hydropathy", -3.0, "reference - 0.2")
    record = spec.to_dict()
    assert record["rules"][0] == {"kind": "expert", "name": "kd", "expert": "hydropathy", "min": -3.0,
                                  "max": "reference - 0.2"}  # fmt: skip
    assert ConstraintSpec.from_dict(record).to_dict() == record
    low, high = spec.constrain(rules_dist).constraints._bounds[0][1:]
    assert (low, high) == (-3.0, pytest.approx((-3.5 + 2.5 + 1.8) / 3 - 0.2))
    for args, message in [
        (("kd", "hydropathy"), "give min, max or both"),
        (("kd", "hydropathy", 1.0, 0.0), "min 1.0 > max 0.0"),
        (("kd", "hydropathy", None, "ref"), "must be a number or 'reference'"),
        (("kd", "hydropathy", None, float("nan")), "max must be finite"),
    ]:
        with pytest.raises(ValueError, match=message):
            ExpertBound(*args)
    with pytest.raises(ValueError, match="the spec has no expert named 'charge'.*with weight 0"):
        spec_of(ExpertBound("kd", "charge", max=1.0)).constrain(rules_dist)
    with pytest.raises(ValueError, match="needs the spec's reference loop"):
        ConstraintSpec([ExpertBound("kd", "hydropathy", max="reference")], [hydropathy()]).constrain(rules_dist)
    with pytest.raises(ValueError, match="min 0.2667 > max -0.2333 at the reference's value"):
        spec_of(ExpertBound("kd", "hydropathy", "reference", "reference - 0.5")).constrain(rules_dist)
