"""What a Pyro user meets around the kernels: text values, autoguides, Predictive(parallel=True),
a chain that cannot move, one chain's summary."""

import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, SVI, Predictive, Trace_ELBO
from pyro.infer.autoguide import AutoDelta, AutoNormal

import mlm_ppl
from mlm_ppl import ConstraintSpec, MaskedLMDistribution, MLMKernel, testing
from mlm_ppl.diagnostics import NOT_CONVERGED, summary, to_inference_data
from mlm_ppl.inference import MetropolisHastings, run_chains
from mlm_ppl.models.constraints import Allowed

MLM = testing.tiny_residue_bert("ACDE", seed=1)
PRIOR = MaskedLMDistribution(MLM, "C[MASK][MASK][MASK]D")


def _mcmc(kernel, *args, num_samples=20):
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=2, disable_progbar=True)
    mcmc.run(*args)
    return mcmc


def test_text_is_refused_with_the_call_that_encodes_it():
    def model(seq):
        pyro.sample("x", PRIOR, obs=seq)

    with pytest.raises(TypeError, match=r"prior.encode\('CAADD'\)"):
        pyro.poutine.trace(model).get_trace("CAADD").log_prob_sum()
    with pytest.raises(TypeError, match="text"):
        pyro.poutine.trace(pyro.poutine.condition(model, data={"x": "CAADD"})).get_trace(None).log_prob_sum()
    ids = PRIOR.encode("CAADD")
    assert ids.tolist() == MLM.encode(["CAADD"]).input_ids[0].tolist()
    assert torch.allclose(pyro.poutine.trace(model).get_trace(ids).log_prob_sum(), PRIOR.log_prob(ids))
    assert PRIOR.encode(["CAADD", "CEEED"]).shape == (2, 7)
    with pytest.raises(ValueError, match="fixed position"):
        PRIOR.encode("AAADD")
    with pytest.raises(ValueError, match="template's length"):
        PRIOR.encode("CAD")


@pytest.mark.parametrize("guide", [AutoNormal, AutoDelta])
def test_an_autoguide_over_a_token_site_ends_at_the_library_message(guide):
    """Pyro's autoguides stop at the site's discrete support with their own message (hide the
    site); hidden, the site is drawn under SVI, which the library refuses naming MLMGibbs."""

    def model():
        s = pyro.sample("s", dist.Normal(0.0, 1.0))
        pyro.sample("x", PRIOR)
        pyro.sample("y", dist.Normal(s, 1.0), obs=torch.tensor(0.5))

    optim = pyro.optim.Adam({"lr": 0.01})
    with pytest.raises(ValueError, match="discrete sample site 'x'"):
        SVI(model, guide(model), optim, Trace_ELBO()).step()
    hidden = guide(pyro.poutine.block(model, hide=["x"]))
    with pytest.raises(NotImplementedError, match="MLMGibbs"):
        SVI(model, hidden, optim, Trace_ELBO()).step()


def test_predictive_in_parallel_takes_token_draws_with_a_plate_dimension():
    """Pyro's Predictive(parallel=True) reads every dimension of a posterior sample but the first
    as plate dimensions: a token site's draws (S, L) need x[:, None], (S, 1, L), under a plate."""
    c = MLM.vocab.index("C")

    def model(y=None):
        x = pyro.sample("x", PRIOR)
        with pyro.plate("assays", 3):
            pyro.sample("y", dist.Normal((x[..., 2] == c).double(), 0.5), obs=y)

    samples = _mcmc(MLMKernel(model, seed=0), torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)).get_samples()
    with pytest.raises(ValueError, match="Shape mismatch"):
        Predictive(model, posterior_samples=samples, parallel=True)()
    parallel = Predictive(model, posterior_samples={"x": samples["x"][:, None]}, parallel=True)()
    assert parallel["y"].shape == (20, 3)
    sequential = Predictive(model, posterior_samples=samples)()
    assert sequential["y"].shape == (20, 3)


def test_a_chain_that_cannot_move_says_so_in_pyros_progress_and_diagnostics():
    only_a = MaskedLMDistribution(MLM, "C[MASK]D", constraints=ConstraintSpec(rules=[Allowed("only-a", "A")]))

    def model():
        pyro.sample("x", only_a)

    kernel = MLMKernel(model, seed=0)
    mcmc = _mcmc(kernel)
    assert kernel.logging() == {"acc. rate": 1.0, "moved": 0.0}  # every proposal was the current state
    assert mcmc._diagnostics[0]["moved"] == 0.0
    assert summary(mlm_ppl.from_pyro(mcmc)).chains == ["stuck"]


def test_one_chain_is_not_converged_and_says_why():
    run = run_chains(MetropolisHastings(MaskedLMDistribution(MLM, "C[MASK][MASK][MASK]D", temperature=3.0)), 1, 400)
    report = summary(to_inference_data(run))
    assert report.chains == [NOT_CONVERGED]
    assert "one chain" in report.reasons[0] and "nan" not in report.reasons[0]


def test_arviz_summary_without_the_token_draws():
    import arviz as az

    run = run_chains(MetropolisHastings(PRIOR), 2, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.summary(to_inference_data(run), var_names=["~tokens"])
    assert not any(str(i).startswith("tokens") for i in table.index) and "hamming_start" in table.index
