"""Pyro's own multi-chain mode: chains in worker processes (fork and spawn) equal the same chains
run one after another, come back as token draws, and from_pyro reads them.

MCMC runs chains in worker processes only when ``num_chains <= cpu_count - 1``; on 2 cores it
runs them one after another, so the worker path is forced by making ``cpu_count`` report 4. The
models live at module level: a spawned worker unpickles the kernel, and with it the model, by
name.
"""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

import mlm_ppl
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel, testing
from mlm_ppl.inference.pyro_sites import TokenDraws

MLM = testing.tiny_residue_bert("ACDE", seed=1)
PRIOR = MaskedLMDistribution(MLM, "C[MASK][MASK][MASK]D", temperature=2.0)
A = MLM.vocab.index("A")


def token_model():
    x = pyro.sample("x", PRIOR)
    pyro.factor("motif", torch.where(x[..., 2] == A, 0.0, -1.0))


def token_and_discrete_model():
    z = pyro.sample("z", dist.Categorical(torch.tensor([0.2, 0.3, 0.5])))
    x = pyro.sample("x", PRIOR)
    pyro.factor("agree", torch.where((x[..., 2] - A) % 3 == z, 0.0, -1.5))


def continuous_model():
    s = pyro.sample("s", dist.HalfNormal(1.0))
    x = pyro.sample("x", PRIOR)
    pyro.sample("y", dist.Normal(s * (x[..., 3] == A).double(), 0.5), obs=torch.tensor(0.7, dtype=torch.float64))


def _run(kernel, mode, monkeypatch, *, num_chains=2, num_samples=25, warmup_steps=5):
    """``mode``: "sequential" (Pyro's _UnarySampler), "fork" or "spawn" (its _MultiSampler)."""
    if mode != "sequential":
        monkeypatch.setattr(pyro.infer.mcmc.api.mp, "cpu_count", lambda: 4)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "num_chains=2 is more than available_cpu")
        mcmc = MCMC(
            kernel,
            num_samples=num_samples,
            warmup_steps=warmup_steps,
            num_chains=num_chains,
            mp_context=None if mode == "sequential" else mode,
            disable_progbar=True,
        )
        mcmc.run()
    expected = "_UnarySampler" if mode == "sequential" else "_MultiSampler"
    assert type(mcmc.sampler).__name__ == expected  # the path the test means to take
    return mcmc


def _check_token_draws(mcmc, site="x"):
    x = mcmc.get_samples(group_by_chain=True)[site]
    assert isinstance(x, TokenDraws) and x.dtype == torch.long
    with pytest.raises(TypeError, match="mlm_ppl.from_pyro"):
        mcmc.summary()
    return x.as_subclass(torch.Tensor)


@pytest.mark.parametrize("mode", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_mlm_kernel_chains_in_workers_equal_the_sequential_chains(mode, monkeypatch):
    sequential = _run(MLMKernel(token_model, seed=3, num_chains=2), "sequential", monkeypatch)
    workers = _run(MLMKernel(token_model, seed=3, num_chains=2), mode, monkeypatch)
    xs, xw = _check_token_draws(sequential), _check_token_draws(workers)
    assert xw.shape == (2, 50, 7)  # 2 Pyro chains of 2 batched chains, laid end to end
    assert torch.equal(xs, xw)
    assert not torch.equal(xw[0], xw[1])  # independent chains, not one chain twice
    a, b = mlm_ppl.from_pyro(sequential), mlm_ppl.from_pyro(workers)
    assert a.posterior.sizes["chain"] == b.posterior.sizes["chain"] == 4
    for name in ("lp", "is_accepted", "n_changed"):
        assert (a.sample_stats[name].values == b.sample_stats[name].values).all()
    assert (a.posterior["x_hamming_start"].values == b.posterior["x_hamming_start"].values).all()
    assert mlm_ppl.summary(b).table.loc["lp", "ess_bulk"] > 0


def test_mlm_gibbs_chains_in_workers_equal_the_sequential_chains(monkeypatch):
    sequential = _run(MLMGibbs(token_and_discrete_model, seed=1), "sequential", monkeypatch)
    workers = _run(MLMGibbs(token_and_discrete_model, seed=1), "fork", monkeypatch)
    xs, xw = _check_token_draws(sequential), _check_token_draws(workers)
    assert torch.equal(xs, xw) and not torch.equal(xw[0], xw[1])
    zs, zw = (m.get_samples(group_by_chain=True)["z"] for m in (sequential, workers))
    assert zw.dtype == torch.long and torch.equal(zs, zw)  # a Categorical's values, as Pyro draws them
    a, b = mlm_ppl.from_pyro(sequential), mlm_ppl.from_pyro(workers)
    assert (a.sample_stats["lp"].values == b.sample_stats["lp"].values).all()
    assert (a.posterior["z"].values == b.posterior["z"].values).all()


def test_mlm_gibbs_with_nuts_in_workers_gives_constrained_values_and_token_draws(monkeypatch):
    pyro.set_rng_seed(0)
    mcmc = _run(MLMGibbs(NUTS(continuous_model), seed=0), "fork", monkeypatch, num_samples=15)
    _check_token_draws(mcmc)
    s = mcmc.get_samples(group_by_chain=True)["s"]
    assert bool((s > 0).all())  # the HalfNormal's draws mapped back from the unconstrained space
    idata = mlm_ppl.from_pyro(mcmc)
    assert set(idata.posterior.data_vars) >= {"x", "s", "x_hamming_start"}
    assert idata.sample_stats["lp"].shape == (2, 15)


def test_a_rerun_with_an_explicit_seed_repeats_its_draws(monkeypatch):
    kernel = MLMKernel(token_model, seed=3)
    mcmc = _run(kernel, "sequential", monkeypatch, num_samples=20)
    first = mcmc.get_samples(group_by_chain=True)["x"].clone()
    mcmc.run()
    assert torch.equal(first, mcmc.get_samples(group_by_chain=True)["x"])
    gibbs = MLMGibbs(token_and_discrete_model, seed=3)
    mcmc = _run(gibbs, "sequential", monkeypatch, num_samples=20)
    first = mcmc.get_samples(group_by_chain=True)["x"].clone()
    mcmc.run()
    assert torch.equal(first, mcmc.get_samples(group_by_chain=True)["x"])


def test_initial_params_with_worker_chains_are_refused(monkeypatch):
    start = torch.stack([PRIOR.template.clone(), PRIOR.template.clone()])
    start[:, 1:4] = A
    monkeypatch.setattr(pyro.infer.mcmc.api.mp, "cpu_count", lambda: 4)
    mcmc = MCMC(
        MLMKernel(token_model, seed=0),
        num_samples=3,
        warmup_steps=0,
        num_chains=2,
        initial_params={"x": start},
        mp_context="fork",
        disable_progbar=True,
    )
    with pytest.raises(ValueError, match="last chain's params"):
        mcmc.run()


def test_from_pyro_before_a_run_says_to_run_it():
    mcmc = MCMC(MLMKernel(token_model, seed=0), num_samples=3, disable_progbar=True)
    with pytest.raises(Exception, match="mcmc.run"):
        mlm_ppl.from_pyro(mcmc)


def test_model_posterior_enumerates_a_pyro_model_as_pyro_scores_it():
    from mlm_ppl.inference import exact

    values, probs = exact.model_posterior(token_and_discrete_model)
    assert set(values) == {"z", "x"} and probs.shape == (3 * 64,) and values["x"].shape == (192, 7)
    # by hand: the prior of z, -E/T of x, and the factor that couples them
    z, x = values["z"], values["x"]
    hand = (
        torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64).log()[z]
        + PRIOR.log_prob(x).double()
        + torch.where((x[:, 2] - A) % 3 == z, 0.0, -1.5).double()
    )
    assert torch.allclose(probs, torch.softmax(hand, 0), atol=1e-6)
    with pytest.raises(ValueError, match="site 's' is continuous"):
        exact.model_posterior(continuous_model)


def test_records_of_another_run_are_not_paired_with_the_draws(monkeypatch):
    from mlm_ppl.inference.pyro_chains import RECORD

    mcmc = _run(MLMKernel(token_model, seed=3), "sequential", monkeypatch, num_samples=10)
    mlm_ppl.from_pyro(mcmc)
    mcmc._diagnostics[1][RECORD].num_samples = 7  # as a re-run that stopped partway leaves them
    with pytest.raises(ValueError, match="to its end first"):
        mlm_ppl.from_pyro(mcmc)


def test_initial_params_start_only_the_run_they_were_given_to(monkeypatch):
    start = PRIOR.template.clone()
    start[2:5] = A
    kernel = MLMKernel(token_model, seed=0)
    mcmc = MCMC(kernel, num_samples=2, warmup_steps=0, initial_params={"x": start}, disable_progbar=True)
    mcmc.run()
    assert torch.equal(kernel.initial_states[-1][0], start)
    MCMC(kernel, num_samples=2, warmup_steps=0, disable_progbar=True).run()
    assert not torch.equal(kernel.initial_states[-1][0], start)  # a fill of its own
