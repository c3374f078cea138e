"""Annealing the whole log density (issue 23): the MLM term and the constraints' experts together.

Before, a schedule annealed ``-E/T`` alone (and only in MH): chains sought the MLM's mode, not the
product's. The annealed chain is time-inhomogeneous; with a piecewise-constant schedule its exact
law after the run is ``p0 P(tau_1)^n ... P(tau_k)^n``, where ``P(tau)`` is the exact matrix of the
same kernel on a static target equal to the annealed density at ``tau`` (the proposals do not
depend on the temperature). The draws of independent chains are checked against that law.
"""

import pyro
import pytest
import torch

import mlm_ppl
from exactness import check_fit, empirical
from mlm_ppl import ConstraintSpec, MaskedLMDistribution, MLMGibbs, MLMKernel, from_pyro, summary, to_inference_data
from mlm_ppl import constraints as c
from mlm_ppl.diagnostics import ANNEALED
from mlm_ppl.inference import GeometricAnnealing, exact, geometric_annealing, make_kernel, run_chains
from mlm_ppl.inference.annealing import annealing_note
from mlm_ppl.models import ConstrainedTarget
from mlm_ppl.testing import tiny_residue_bert

TEMPLATE = "A[MASK]C[MASK][MASK]"
LEVELS = (1.0, 0.5, 0.25, 0.12, 0.06)
HOLD = 40  # steps at each level


def schedule(step: int) -> float:
    return LEVELS[min(step // HOLD, len(LEVELS) - 1)]


@pytest.fixture(scope="module")
def problem():
    mlm = tiny_residue_bert("ACDE", seed=1, std=0.5, dtype=torch.float64)
    dist = MaskedLMDistribution(mlm, TEMPLATE)
    target = ConstraintSpec([], [c.residue_count("E", name="e", weight=1.5)]).constrain(dist)
    return mlm, dist, target


def _static(mlm, target, tau, terms):
    """The annealed density at ``tau`` as a fixed target: (-E/T + f)/tau, -E/(T tau) + f, -E/T + f/tau."""
    T = {"all": tau, "mlm": tau, "constraints": 1.0}[terms]
    scale = {"all": tau, "mlm": 1.0, "constraints": tau}[terms]
    return ConstrainedTarget(
        MaskedLMDistribution(mlm, TEMPLATE, temperature=T), lambda x: target.constraints.log_factor(x) / scale
    )


def _exact_end(mlm, target, name, options, terms):
    p = torch.full((64,), 1 / 64, dtype=torch.float64)  # init="uniform"
    for tau in LEVELS:
        P = exact.transition_matrix(make_kernel(name, _static(mlm, target, tau, terms), **options))
        p = p @ torch.linalg.matrix_power(P, HOLD)
    return p


@pytest.mark.parametrize("name, options", [("mh", {}), ("surrogate-mh", {"inner_steps": 3})])
@pytest.mark.slow
def test_annealing_the_whole_density_seeks_the_products_mode(problem, name, options):
    mlm, dist, target = problem
    states = exact.enumerate_states(dist)
    mlm_mode = int(exact.exact_log_probs(dist).argmax())
    product_mode = int(exact.exact_log_probs(target).argmax())
    assert mlm_mode != product_mode  # the expert moves the mode: the check has power
    want = _exact_end(mlm, target, name, options, "all")
    only_mlm = _exact_end(mlm, target, name, options, "mlm")  # what a schedule did before
    # the whole density's annealing ends at the product's mode more often than at the MLM's, and more
    # often than annealing the MLM term alone (MH: 0.77 against 0.23 at the MLM's mode, and against 0.51;
    # surrogate-MH: 0.52 against 0.27)
    assert want[product_mode] > want[mlm_mode] + 0.2 and want[product_mode] > only_mlm[product_mode]
    whole = {"anneal_floor": 0.0} if name == "surrogate-mh" else {}  # the law above is the whole schedule's
    kernel = make_kernel(name, target, temperature_schedule=schedule, **options, **whole)
    run = run_chains(kernel, 1000, 1, warmup_steps=len(LEVELS) * HOLD - 1, seed=3, init="uniform")
    check_fit(want, empirical(dist, run.tokens[:, -1]))
    assert torch.isfinite(run.stats["lp"]).all()  # the recorded lp is the target's, not the annealed one
    assert states.shape[0] == 64


def test_the_annealed_terms_are_checked(problem):
    _, dist, _ = problem
    with pytest.raises(ValueError, match="anneal_terms"):
        make_kernel("mh", dist, temperature_schedule=schedule, anneal_terms="energy")
    with pytest.raises(TypeError, match="temperature_schedule must be a callable"):
        make_kernel("surrogate-mh", dist, temperature_schedule=0.5)


def test_a_schedule_that_leaves_the_positive_numbers_is_an_error(problem):
    _, dist, _ = problem
    kernel = make_kernel("mh", dist, temperature_schedule=lambda step: 0.0)
    with pytest.raises(ValueError, match=r"schedule gave tau=0.0; it must return a finite number >= 1e-06"):
        run_chains(kernel, 2, 2, seed=0)


def test_a_geometric_schedule_is_a_record():
    s = geometric_annealing(2.0, 0.5, 4)
    assert s == GeometricAnnealing(2.0, 0.5, 4) and s.to_dict() == {
        "schedule": "geometric", "start": 2.0, "end": 0.5, "num_steps": 4
    }  # fmt: skip
    assert [s(t) for t in (0, 2, 4, 9)] == pytest.approx([2.0, 1.0, 0.5, 0.5])
    assert GeometricAnnealing(1.0, 0.05, 0)(0) == 0.05  # no steps to go: TO at once
    with pytest.raises(ValueError, match="end must be > 0 and finite"):
        GeometricAnnealing(1.0, 0.0, 5)
    with pytest.raises(ValueError, match="num_steps must be an integer >= 0"):
        GeometricAnnealing(1.0, 0.5, -1)


@pytest.mark.parametrize(
    "schedule, terms, note",
    [
        (GeometricAnnealing(1.0, 0.1, 19), "all", "tau 1 -> 0.1, all terms"),
        (schedule, "constraints", "tau from a custom schedule, the constraints' term"),
    ],
)
def test_an_annealed_run_records_it_and_its_summary_says_so(problem, schedule, terms, note):
    _, dist, target = problem
    kernel = make_kernel("mh", target, temperature_schedule=schedule, anneal_terms=terms)
    run = run_chains(kernel, 2, 20, seed=1)
    assert run.attrs["annealing"]["terms"] == terms
    report = summary(to_inference_data(run))
    assert report.annealing == annealing_note(run.attrs["annealing"])
    assert note in report.annealing and "draws are not samples of the target" in report.annealing
    assert str(report).splitlines()[0] == report.annealing
    assert set(report.chains) <= {ANNEALED, "stuck"} and not report.converged
    plain = run_chains(make_kernel("mh", dist), 2, 20, seed=1)
    assert "annealing" not in plain.attrs and summary(to_inference_data(plain)).annealing is None


@pytest.mark.parametrize("wrapper", ["MLMGibbs", "MLMKernel"])
def test_an_annealed_pyro_run_gets_the_annealed_verdict(problem, wrapper):
    """MLMGibbs hands temperature_schedule to every site kernel: its run is annealed too (its
    run_from_gibbs recorded no annealing, so the summary gave a normal verdict)."""
    from pyro.infer import MCMC

    _, dist, _ = problem
    options = {"temperature_schedule": geometric_annealing(1.0, 0.1, 11), "anneal_terms": "mlm"}

    def model():
        pyro.sample("x", dist)

    kernel = MLMGibbs(model, seed=0, **options) if wrapper == "MLMGibbs" else MLMKernel(model, seed=0, **options)
    mcmc = MCMC(kernel, num_samples=8, warmup_steps=4, disable_progbar=True)
    mcmc.run()
    report = summary(from_pyro(mcmc))
    assert report.annealing is not None and report.annealing.startswith("annealed (tau 1 -> 0.1, the MLM term)")
    assert str(report).splitlines()[0] == report.annealing
    assert set(report.chains) <= {ANNEALED, "stuck"} and not report.converged
    plain = MCMC(MLMGibbs(model, seed=0), num_samples=8, disable_progbar=True)
    plain.run()
    assert summary(from_pyro(plain)).annealing is None


def test_mlm_ppl_sample_records_an_annealed_run_that_inference_data_can_hold(problem):
    mlm, _, _ = problem
    schedule = geometric_annealing(1.0, 0.1, 9)
    run = mlm_ppl.sample(mlm, TEMPLATE, num_chains=2, num_samples=10, temperature_schedule=schedule, block_size=1)
    assert run.attrs["kernel_options"] == {"block_size": 1}  # the schedule is attrs["annealing"], not an option
    assert run.attrs["annealing"] == {**schedule.to_dict(), "terms": "all"}
    assert summary(to_inference_data(run, mlm=mlm)).annealing.startswith("annealed (tau 1 -> 0.1, all terms)")
