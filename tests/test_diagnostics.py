import warnings

import numpy as np
import pytest
import torch

import mlm_ppl
from mlm_ppl.diagnostics import CONVERGED, NOT_CONVERGED, STUCK, plot_diagnostics, summary, to_inference_data
from mlm_ppl.inference import Run

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

TEMPLATE = "A[MASK]C[MASK][MASK]"


@pytest.fixture(scope="module")
def mixing_run(tiny4):
    # hot target and proposals: the chains mix in a few steps
    return mlm_ppl.sample(
        tiny4,
        TEMPLATE,
        temperature=3.0,
        proposal_temperature=3.0,
        num_chains=4,
        num_samples=600,
        thin=3,
        warmup_steps=50,
        seed=0,
        init="uniform",
    )


def test_inference_data_layout(tiny4, mixing_run, tmp_path):
    idata = to_inference_data(
        mixing_run, mlm=tiny4, reference="ADCEE", indicators=[(2, "D")], functions={"n_alanine": lambda s: s.count("A")}
    )
    post = idata.posterior
    assert post["tokens"].dims == ("chain", "draw", "position") and post["tokens"].dtype.kind == "i"
    assert post["tokens"].shape == (4, 600, 7)
    for name in ("hamming_start", "hamming_reference", "indicator_2_D", "n_alanine"):
        assert post[name].shape == (4, 600)
    assert set(idata.sample_stats.data_vars) == {
        "lp",
        "is_accepted",
        "acceptance_rate",
        "n_changed",
        "n_moves",
        "evaluated",
    }
    assert idata.attrs["model"] == tiny4.name and idata.attrs["seed"] == 0 and idata.attrs["energy"] == "norm"
    # functionals are what they say
    toks = mixing_run.tokens
    d_idx = tiny4.vocab.index("D")
    assert np.array_equal(post["indicator_2_D"].values, (toks[:, :, 2] == d_idx).double().numpy())
    ref = tiny4.encode(["ADCEE"]).input_ids[0]
    assert np.array_equal(post["hamming_reference"].values, (toks != ref).sum(-1).double().numpy())
    assert post["hamming_reference"].values.max() <= 3  # only the free positions can differ
    decoded = tiny4.decode(toks[1, 5])[0]
    assert post["n_alanine"].values[1, 5] == decoded.count("A")
    # round trip through netCDF, and ArviZ's own diagnostics work on lp
    path = tmp_path / "run.nc"
    idata.to_netcdf(path)
    back = az.from_netcdf(path)
    assert np.isfinite(az.rhat(back.sample_stats, var_names=["lp"])["lp"].values)
    assert float(az.ess(back.sample_stats, var_names=["lp"])["lp"].values) > 100


def test_mixing_chains_are_converged(mixing_run):
    s = summary(to_inference_data(mixing_run))
    assert s.chains == [CONVERGED] * 4, str(s)
    assert s.converged
    assert "lp" in s.table.index and "hamming_start" in s.table.index
    assert s.table.loc["lp", "r_hat"] < 1.01
    assert 0 < s.novel_transition_rate <= s.acceptance_rate <= 1
    assert "chain 3: converged" in str(s)


def test_a_stuck_chain_is_reported_as_stuck(mixing_run):
    tokens = mixing_run.tokens.clone()
    stats = {k: v.clone() for k, v in mixing_run.stats.items()}
    tokens[2] = tokens[2, :1]  # chain 2 never moves
    stats["n_changed"][2] = 0
    stats["lp"][2] = stats["lp"][2, 0]
    stats["is_accepted"][2] = False
    stuck = Run(tokens, stats, mixing_run.attrs, mixing_run.initial.clone())
    stuck.initial[2] = tokens[2, 0]
    idata = to_inference_data(stuck)
    # ArviZ on the stuck chain alone: R-hat NaN, ESS = N; that is not convergence
    alone = idata.sample_stats["lp"].values[2:3]
    assert np.isnan(az.rhat(alone))
    s = summary(idata)
    assert s.chains[2] == STUCK
    assert "never changed" in s.reasons[2]


def test_chains_started_far_apart_with_few_draws_are_not_converged(tiny4):
    dist = mlm_ppl.MaskedLMDistribution(tiny4, TEMPLATE, temperature=2.0)
    states = mlm_ppl.inference.exact.enumerate_states(dist)
    logp = mlm_ppl.inference.exact.exact_log_probs(dist)
    far = torch.stack([states[logp.argmax()], states[logp.argmin()]])  # the mode and the least likely state
    run = mlm_ppl.sample(
        tiny4, TEMPLATE, temperature=2.0, proposal_temperature=2.0, num_chains=2, num_samples=12, seed=0, init=far
    )
    # the chain from the least likely state leaves it within 12 steps but with probability 7e-15
    # (its MH self-transition probability is 0.066); the one from the mode stays there for all
    # 12 steps with probability 0.40 (0.926 per step), and is then "stuck", else "not converged"
    moved = (run.stats["n_changed"].sum(1) > 0).tolist()
    assert moved[1]
    s = summary(to_inference_data(run))
    assert s.chains == [NOT_CONVERGED if moved[0] else STUCK, NOT_CONVERGED]
    assert "R-hat of lp across chains" in s.reasons[1]
    assert not s.converged


def test_plots_are_written(tiny4, mixing_run, tmp_path):
    idata = to_inference_data(mixing_run, mlm=tiny4)
    paths = plot_diagnostics(idata, str(tmp_path), mlm=tiny4)
    names = sorted(p.split("/")[-1] for p in paths)
    assert names == ["acceptance.png", "deep_states.png", "rank_lp.png", "token_frequency.png", "trace_lp.png"]
    for p in paths:
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_from_a_pyro_mcmc_run(tiny4):
    import pyro
    from pyro.infer import MCMC

    from mlm_ppl.inference import run_from_mcmc

    dist = mlm_ppl.MaskedLMDistribution(tiny4, TEMPLATE)

    def model():
        pyro.sample("x", dist)

    kernel = mlm_ppl.MLMKernel(model, num_chains=3, seed=1)
    mcmc = MCMC(kernel, num_samples=12, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    run = run_from_mcmc(mcmc, kernel)
    assert run.tokens.shape == (3, 12, 7) and run.stats["lp"].shape == (3, 12)
    idata = to_inference_data(run, mlm=tiny4)
    assert idata.posterior["tokens"].shape == (3, 12, 7)
    assert idata.attrs["warmup_steps"] == 2
    assert torch.allclose(
        torch.as_tensor(idata.sample_stats["lp"].values[1, -1]).float(), dist.log_prob(run.tokens[1, -1]), atol=1e-4
    )


def test_bad_functional_arguments(tiny4, mixing_run):
    with pytest.raises(ValueError, match="need mlm="):
        to_inference_data(mixing_run, functions={"f": len})
    with pytest.raises(ValueError, match="unknown token 'Z'"):
        to_inference_data(mixing_run, mlm=tiny4, indicators=[(2, "Z")])
    with pytest.raises(ValueError, match="outside"):
        to_inference_data(mixing_run, mlm=tiny4, indicators=[(99, "A")])
    with pytest.raises(ValueError, match="complete sequence"):
        to_inference_data(mixing_run, mlm=tiny4, reference="ADC")


def test_plotting_leaves_the_users_backend_and_figures_alone(mixing_run, tmp_path):
    """No matplotlib.use() behind a notebook user's back; their open figures stay open."""
    import matplotlib
    import matplotlib.pyplot as plt

    from mlm_ppl.evaluation import plot_pairs

    before = matplotlib.get_backend()
    plt.switch_backend("svg")  # a backend of the user's that is not Agg
    mine = plt.figure()
    try:
        plot_diagnostics(to_inference_data(mixing_run), str(tmp_path))
        plot_pairs([{"method": "ag", "metric": "pair_ppl", "mean": 2.0, "se": 0.1, "n": 3}], str(tmp_path / "p.png"))
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == [mine.number]
    finally:
        plt.close(mine)
        plt.switch_backend(before)


def test_constraints_are_on_the_record_per_draw(tiny4):
    """Each rule's satisfaction, feasibility and each expert's value per draw, in run.nc's posterior
    and in the summary's table: checked against hand-computed values on three chosen draws."""
    from mlm_ppl import ConstraintSpec, MaskedLMDistribution
    from mlm_ppl import constraints as c
    from mlm_ppl.diagnostics import constraint_functionals

    d = MaskedLMDistribution(tiny4, "A[MASK]C[MASK][MASK]")
    spec = ConstraintSpec(
        [c.Forbid("no-DE", "DE"), c.Require("has-C", "C[CDE]")],
        [c.residue_count("E", name="e-count", weight=-0.5)],
    )
    bound = spec.bind(d)
    seqs = ["ADCDE", "AACAA", "AECEE"]  # DE at the end: forbidden; C followed by A: no match; E count 3
    tokens = tiny4.encode(seqs).input_ids[None]  # (1, 3, L)
    got = constraint_functionals(bound, tokens)
    assert list(got) == ["rule_no_DE", "rule_has_C", "feasible", "expert_e_count"]
    np.testing.assert_array_equal(got["rule_no_DE"], [[0.0, 1.0, 1.0]])
    np.testing.assert_array_equal(got["rule_has_C"], [[1.0, 0.0, 1.0]])
    np.testing.assert_array_equal(got["feasible"], [[0.0, 0.0, 1.0]])
    np.testing.assert_array_equal(got["expert_e_count"], [[1.0, 0.0, 3.0]])
    run = mlm_ppl.sample(tiny4, "A[MASK]C[MASK][MASK]", num_chains=2, num_samples=30, seed=0)
    idata = to_inference_data(run, mlm=tiny4, constraints=bound)
    assert idata.posterior["expert_e_count"].shape == (2, 30)
    assert {"expert_e_count", "feasible", "rule_no_DE"} <= set(summary(idata).table.index)


def test_loop_distribution_against_a_hand_count(tiny4):
    """Two chains of four draws over the free positions 2, 4, 5 of A[MASK]C[MASK][MASK]: per-position
    frequencies, the loops ranked by count, and the MCSE of a loop's frequency as ArviZ gives it
    for its indicator (nan for a loop in every draw or with too few draws)."""
    from mlm_ppl.diagnostics import loop_distribution

    a, c, d, e = (tiny4.vocab.index(t) for t in "ACDE")
    base = mlm_ppl.sample(tiny4, TEMPLATE, num_chains=2, num_samples=4, seed=0)
    loops = [
        [(c, d, d), (c, d, d), (a, a, e), (c, d, d)],  # chain 0
        [(a, a, e), (c, d, d), (c, d, d), (e, e, e)],  # chain 1
    ]
    tokens = base.tokens.clone()
    for ch, chain in enumerate(loops):
        for dr, loop in enumerate(chain):
            tokens[ch, dr, [2, 4, 5]] = torch.tensor(loop)
    idata = to_inference_data(Run(tokens, base.stats, base.attrs, base.initial), mlm=tiny4)
    dist = loop_distribution(idata, top=2)
    assert dist.positions == [2, 4, 5] and dist.tokens == ["A", "C", "D", "E"] and dist.draws == 8
    # position 2: C in 5 of 8 draws, A in 2, E in 1; position 5: D 5, E 3
    np.testing.assert_allclose(dist.frequencies[0], [2 / 8, 5 / 8, 0, 1 / 8])
    np.testing.assert_allclose(dist.frequencies[2], [0, 0, 5 / 8, 3 / 8])
    assert [(m[0], m[1], m[2]) for m in dist.motifs] == [("CDD", 5, 5 / 8), ("AAE", 2, 2 / 8)]
    cdd = np.array([[1, 1, 0, 1], [0, 1, 1, 0]], dtype=float)
    assert dist.motifs[0][3] == pytest.approx(float(az.mcse(cdd)))
    text = str(dist)
    assert "| 2 | 25 | 62 | . | 12 |" in text and "| 1 | CDD | 5 | 0.6250 |" in text
    same = tokens.clone()
    same[:, :, [2, 4, 5]] = torch.tensor([c, d, d])
    one = loop_distribution(to_inference_data(Run(same, base.stats, base.attrs, base.initial), mlm=tiny4), top=3)
    assert len(one.motifs) == 1 and one.motifs[0][:3] == ("CDD", 8, 1.0) and np.isnan(one.motifs[0][3])
    with pytest.raises(ValueError, match="top must be an integer >= 1"):
        loop_distribution(idata, top=0)
