"""Annealed surrogate-MH stops cooling each chain where its moves stall (issue 46, item 4).

At ``tau`` the exact correction sees the surrogate's error on a move magnified by ``1 / tau``: on
the tiny model here the exact mean outer acceptance at stationarity is 0.28 at tau 1, 0.14 at 0.8,
0.013 at 0.45 and 0 at 0.05 (computed below from the exact matrices). Each chain watches its own
acceptance and stops cooling where it falls below 0.2 (the thermostat of
:mod:`mlm_ppl.inference.anneal_floor`); checked by hand, against those exact numbers, for the
chains' independence and for resuming.
"""

import math

import pytest
import torch

from mlm_ppl import MaskedLMDistribution, summary, to_inference_data
from mlm_ppl.inference import GeometricAnnealing, exact, make_kernel, run_chains
from mlm_ppl.inference.anneal_floor import MIN_ACCEPTANCE, RESTART, WARMING, start_thermostat, thermostat
from mlm_ppl.testing import tiny_residue_bert

TEMPLATE = "A[MASK]C[MASK][MASK]"  # two fixed positions whose terms the window-0 surrogate leaves out
SCHEDULE = GeometricAnnealing(1.0, 0.05, 39)


@pytest.fixture(scope="module")
def dist():
    return MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1, std=0.5, dtype=torch.float64), TEMPLATE)


def _kernel(dist, schedule=SCHEDULE, **options):
    return make_kernel("surrogate-mh", dist, inner_steps=3, temperature_schedule=schedule, **options)


def _outer_acceptance(dist, tau):
    """The exact mean outer acceptance of surrogate-MH's moves (those of its inner chain that change
    the state) at stationarity of the target annealed to ``tau`` (the annealed kernel at a fixed
    tau): ``sum pi(x) P(x, y) / sum pi(x) Q(x, y)`` over ``y != x``."""
    cold = MaskedLMDistribution(dist.mlm, TEMPLATE, temperature=tau)
    kernel = make_kernel("surrogate-mh", cold, inner_steps=3)
    P = exact.transition_matrix(kernel)
    Q = torch.linalg.matrix_power(exact.transition_matrix(kernel.inner), 3)
    pi = torch.softmax(exact.exact_log_probs(cold), 0)
    off = ~torch.eye(P.shape[0], dtype=torch.bool)
    return float((pi[:, None] * P * off).sum() / (pi[:, None] * Q * off).sum())


def test_the_thermostat_by_hand():
    hold, recent = start_thermostat(4)
    assert hold.tolist() == [0, 0, 0, 0] and recent.tolist() == [1, 1, 1, 1]
    recent = torch.tensor([1.0, 0.25, 0.25, 0.1], dtype=torch.float64)
    taus = torch.tensor([0.5, 0.5, 0.5, 0.9], dtype=torch.float64)
    acceptance = torch.tensor([0.0, 0.0, 0.2, 0.5])
    moved = torch.tensor([True, True, True, False])
    hold, recent = thermostat(hold, recent, taus, acceptance, moved, first=1.0)
    # chain 0: 0.7 * 1 = 0.7, cools on; chain 1: 0.7 * 0.25 = 0.175 < 0.2, held at 1.25 x 0.5;
    # chain 2: 0.175 + 0.3 * 0.2 = 0.235, cools on; chain 3 did not move: its average stays 0.1 < 0.2,
    # held at 1.25 x 0.9 = 1.125, never above the first tau (1)
    assert recent.tolist() == pytest.approx([0.7, RESTART, 0.235, RESTART])
    assert hold.tolist() == pytest.approx([0.0, WARMING * 0.5, 0.0, 1.0])
    assert MIN_ACCEPTANCE == 0.2


def test_the_exact_acceptance_falls_as_the_chain_cools(dist):
    taus = (1.0, 0.8, 0.45, 0.05)
    exact_acceptance = [_outer_acceptance(dist, t) for t in taus]
    assert exact_acceptance == pytest.approx([0.2789, 0.1423, 0.0125, 0.0], abs=5e-4)


def _move_probability(dist, tau):
    """The exact probability that one surrogate-MH step changes the state, at stationarity of the
    target annealed to ``tau``."""
    cold = MaskedLMDistribution(dist.mlm, TEMPLATE, temperature=tau)
    P = exact.transition_matrix(make_kernel("surrogate-mh", cold, inner_steps=3))
    return float(torch.softmax(exact.exact_log_probs(cold), 0) @ (1 - P.diagonal()))


@pytest.mark.slow
def test_annealed_chains_stop_cooling_where_their_moves_stall_and_keep_moving(dist):
    kept = run_chains(_kernel(dist), 32, 40, seed=0)
    whole = run_chains(_kernel(dist, anneal_floor=0), 32, 40, seed=0)
    stopped = kept.attrs["annealing"]["stopped_at"]
    assert kept.attrs["annealing"]["floor"] == "chains" and len(stopped) == 32
    # a chain whose inner chain stops moving sees no correction and cools on (None); the others stop
    # between 0.24 and 1 (seed 0: 18 of 32)
    held = [t for t in stopped if t is not None]
    assert len(held) >= 8 and all(0.2 < t <= 1.0 for t in held), stopped
    # where they end, a step moves a chain with exact probability 0.016 on average; at 0.05, 2e-19
    final = [max(t or 0.0, SCHEDULE.end) for t in stopped]
    assert sum(_move_probability(dist, t) for t in final) / len(final) > 0.01 > 1e10 * _move_probability(dist, 0.05)
    last = slice(30, 40)  # and so they do: seed 0, 3.4% of the last ten steps change a chain's state, against 0
    assert float(kept.stats["n_changed"][:, last].gt(0).float().mean()) > 0.02
    assert float(whole.stats["n_changed"][:, last].gt(0).float().mean()) == 0.0
    assert "annealed (tau 1 -> 0.05, chains stopped cooling at tau " in str(summary(to_inference_data(kept)))


@pytest.mark.slow
def test_a_chain_anneals_the_same_beside_other_chains_and_resumed(dist):
    beside = run_chains(_kernel(dist), 6, 40, seed=4)
    assert len(set(beside.attrs["annealing"]["stopped_at"])) > 1  # the chains ran at different taus
    alone = run_chains(_kernel(dist), 1, 40, seed=4, chains=[3])
    assert torch.equal(alone.tokens[0], beside.tokens[3])
    assert alone.attrs["annealing"]["stopped_at"] == [beside.attrs["annealing"]["stopped_at"][3]]
    cut = []
    run_chains(_kernel(dist), 6, 40, seed=4, on_checkpoint=cut.append, checkpoint_seconds=0)
    half = next(cp for cp in cut if cp.step == 20)
    assert half.state.hold is not None and half.state.recent is not None  # the thermostat is in the state
    resumed = run_chains(_kernel(dist), 6, 40, seed=4, resume=half)
    assert torch.equal(resumed.tokens, beside.tokens)
    assert resumed.attrs["annealing"] == beside.attrs["annealing"]


def test_a_given_floor_holds_every_chain_and_zero_is_the_whole_schedule(dist):
    given = _kernel(dist, anneal_floor=0.3)
    state = given.init(given.target.template.expand(2, -1).clone().masked_fill(given.target.template == 4, 5))
    assert state.hold is None and given.annealing()["floor"] == 0.3
    assert given.taus(state._replace(step=39)).tolist() == [0.3, 0.3]
    assert given.taus(state).tolist() == [1.0, 1.0]
    whole = _kernel(dist, anneal_floor=0)
    assert [float(whole.taus(state._replace(step=s))[0]) for s in range(40)] == [SCHEDULE(s) for s in range(40)]
    above = _kernel(dist, GeometricAnnealing(0.2, 0.1, 9), anneal_floor=0.5)
    assert above.taus(state._replace(step=9)).tolist() == [0.2, 0.2]  # never hotter than the schedule's start
    constraints = _kernel(dist, anneal_terms="constraints")  # the MLM term is not annealed: nothing magnified
    assert not constraints.thermostat and constraints.annealing()["floor"] == 0.0
    assert "never below tau 0.3" in str(summary(to_inference_data(run_chains(given, 2, 5, seed=0))))


def test_energies_annealed_per_chain(dist):
    kernel = _kernel(dist)
    energy = torch.tensor([3.0, 3.0], dtype=torch.float64)
    log_factor = torch.tensor([-0.5, -0.5], dtype=torch.float64)
    taus = torch.tensor([0.5, 0.25], dtype=torch.float64)
    assert kernel.log_density(energy, log_factor, taus).tolist() == pytest.approx([-7.0, -14.0])
    assert kernel.log_density(energy, log_factor).tolist() == pytest.approx([-3.5, -3.5])


@pytest.mark.parametrize(
    "options, match",
    [
        ({"anneal_floor": 0.2}, "anneal_floor is where an annealing schedule stops cooling: give the schedule"),
        ({"anneal_floor": -1.0, "temperature_schedule": SCHEDULE}, "anneal_floor must be a finite number >= 0"),
        ({"anneal_floor": math.inf, "temperature_schedule": SCHEDULE}, "anneal_floor must be a finite number >= 0"),
    ],
)
def test_bad_floors_are_refused(dist, options, match):
    with pytest.raises(ValueError, match=match):
        make_kernel("surrogate-mh", dist, **options)


@pytest.mark.slow
def test_groups_of_chains_merge_to_the_whole_run_with_every_chains_hold(dist):
    """A run split into groups (Ray workers: ``merge_runs``) anneals as the whole run, and its record
    says where every chain stopped, not only the first group's."""
    from mlm_ppl.inference.distributed import merge_runs

    whole = run_chains(_kernel(dist), 6, 40, seed=4)
    parts = [run_chains(_kernel(dist), 3, 40, seed=4, chains=rows) for rows in ([0, 1, 2], [3, 4, 5])]
    merged = merge_runs(parts, 6)
    assert torch.equal(merged.tokens, whole.tokens)
    assert merged.attrs["annealing"]["stopped_at"] == whole.attrs["annealing"]["stopped_at"]


def test_a_warming_schedule_has_no_thermostat(dist):
    warming = _kernel(dist, GeometricAnnealing(0.5, 1.0, 9))
    assert not warming.thermostat and warming.annealing()["floor"] == 0.0
