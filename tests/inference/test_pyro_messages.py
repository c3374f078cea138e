"""What a Pyro user meets outside the ordinary path: token draws are torch.long wherever MCMC
returns them, and every road that cannot work (plain NUTS, enumeration, moments, unbounded
discrete latents) ends in a message that names the tool to use instead."""

import math
import time
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS, Predictive

from mlm_ppl import MaskedLMDistribution, MLMGibbs
from mlm_ppl.testing import tiny_residue_bert


@pytest.fixture(scope="module")
def d():
    return MaskedLMDistribution(tiny_residue_bert("ACDE", seed=1), "A[MASK]C[MASK]")


def test_token_draws_are_long_beside_continuous_sites_and_predictive_indexes_a_table_with_them(d):
    table = torch.linspace(-1.0, 1.0, d.vocab_size)

    def model(y=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        x = pyro.sample("x", d)
        pyro.sample("y", dist.Normal(w + table[x[..., d.free_positions]].sum(-1), 1.0), obs=y)

    pyro.set_rng_seed(0)
    mcmc = MCMC(MLMGibbs(NUTS(model), seed=0), num_samples=4, warmup_steps=2, num_chains=1, disable_progbar=True)
    mcmc.run(torch.tensor(0.5))
    for samples in (mcmc.get_samples(), mcmc.get_samples(group_by_chain=True)):
        assert samples["x"].dtype == torch.long and samples["w"].dtype == torch.float32
        assert (samples["x"][..., d.free_positions] < d.vocab_size).all()
    y = Predictive(model, posterior_samples=mcmc.get_samples())()["y"]
    assert y.shape == (4,)


def test_plain_nuts_on_a_token_site_names_mlmgibbs(d):
    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("x", d)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"reached continuous inference .* mlm_ppl.MLMGibbs\(NUTS\(model\)\)"):
            MCMC(NUTS(model), num_samples=2, warmup_steps=1, disable_progbar=True).run()


def test_what_an_energy_based_sequence_model_cannot_give_says_what_to_use(d):
    with pytest.raises(NotImplementedError, match="cannot be enumerated.*mlm_ppl.MLMGibbs"):
        d.enumerate_support()
    for moment in ("mean", "variance"):
        with pytest.raises(NotImplementedError, match=f"token ids are labels, so .* no {moment}.*from_pyro"):
            getattr(d, moment)
    with pytest.raises(NotImplementedError, match="intractable normaliser"):
        d.entropy()
    assert bool(d.support.check(torch.tensor([2, 5, 3, 6]))) and not bool(d.support.check(torch.tensor([2, 99, 3, 6])))


def test_a_discrete_latent_without_finite_support_is_refused_by_name(d):
    def model():
        n = pyro.sample("n", dist.Poisson(3.0))
        x = pyro.sample("x", d)
        pyro.factor("f", n * (x == 5).sum().double())

    with pytest.raises(ValueError, match=r"discrete latent sites \['n'\] have no finite support .*Poisson"):
        MLMGibbs(model, seed=0).setup(0)
    with pytest.raises(ValueError, match=r"unknown kernel 'nuts'; choose one of 'mh', 'surrogate-mh'$"):
        MLMGibbs(model, kernel="nuts")


def test_a_token_site_in_an_svi_guide_is_refused_with_the_reason(d):
    def model():
        pyro.sample("x", d)

    def guide():
        pyro.sample("x", d)

    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 0.01}), pyro.infer.Trace_ELBO())
    with pytest.raises(NotImplementedError, match=r"sampled under SVI \(latent in the model, or in the guide\)"):
        svi.step()


def test_a_seeded_distribution_draws_anew_at_each_call_and_repeats_from_a_fresh_one():
    """A fixed sampler seed used to make every sample() return the same draw."""
    mlm = tiny_residue_bert("ACDE", seed=1, std=0.2)
    make = lambda: MaskedLMDistribution(mlm, "A[MASK][MASK][MASK]", sampler_options=dict(seed=5, num_steps=6))
    d = make()
    first, second = d.sample((16,)), d.sample((16,))
    assert not torch.equal(first, second)
    again = make()
    assert torch.equal(again.sample((16,)), first) and torch.equal(again.sample((16,)), second)


def test_pyro_summaries_of_token_draws_name_mlm_ppl_from_pyro(d):
    """MCMC.summary() averages every site; token ids are labels, so it stops with a message that
    says what to use (it used to fail inside torch: 'mean(): could not infer output dtype')."""
    from mlm_ppl import MLMKernel, from_pyro

    mcmc = MCMC(MLMKernel(lambda: pyro.sample("x", d), num_chains=2, seed=0), num_samples=4, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples()["x"]
    assert x.dtype == torch.long and x.shape == (2 * 4, d.template.numel())  # the two chains end to end
    with pytest.raises(TypeError, match=r"token ids are labels.*mlm_ppl.from_pyro\(mcmc\).*mlm_ppl.summary"):
        mcmc.summary()
    with pytest.raises(TypeError, match="token ids are labels"):
        x.float().mean() + x.mean()
    assert x.float().mean() > 0 and (x == 5).sum() >= 0  # explicit conversions and counts still work
    assert type(x[0] + 1) is torch.Tensor  # arithmetic gives plain tensors
    idata = from_pyro(mcmc)
    assert idata.posterior["x"].shape == (2, 4, d.template.numel())
    assert torch.equal(torch.as_tensor(idata.posterior["x"].values).reshape(8, -1), x)


def test_pyro_diagnostics_and_arviz_stop_with_the_same_one_message_beside_continuous_sites(d):
    """MCMC.diagnostics() (and az.from_pyro, which calls it) used to print a traceback warning,
    then die in torch.full ('value cannot be converted to type int64_t'): Pyro's ESS turns any
    error into NaN of the draws' dtype. Now the ESS of a token site is NaN and Pyro's R-hat
    stops with the message that names mlm_ppl.from_pyro, with no warning on the way."""
    import arviz as az

    from mlm_ppl import from_pyro

    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("x", d)

    pyro.set_rng_seed(0)
    mcmc = MCMC(MLMGibbs(NUTS(model), seed=0), num_samples=6, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    for call in (mcmc.diagnostics, lambda: az.from_pyro(mcmc)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Pyro's traceback warning would fail here
            with pytest.raises(TypeError, match=r"token ids are labels.*mlm_ppl.from_pyro\(mcmc\).*mlm_ppl.summary"):
                call()
    with pytest.raises(TypeError, match="token ids are labels"):
        pyro.ops.stats.effective_sample_size(mcmc.get_samples(group_by_chain=True)["x"])  # outside MCMC's wrapper
    idata = from_pyro(mcmc)
    assert set(idata.posterior.data_vars) >= {"w", "x"}
    w = mcmc.get_samples(group_by_chain=True)["w"]
    assert torch.allclose(torch.as_tensor(idata.posterior["w"].values), w)


def test_handlers_a_kernel_cannot_honour_are_refused_by_name(d):
    """block hid the site (MLMKernel said 'no latent site' after running MH chains to draw it),
    reparam failed inside the reparametrizer ('no attribute loc', 'ImproperUniform does not
    support sampling'), a condition on a sequence with masks left read as 'no latent site'."""
    from pyro import poutine
    from pyro.infer.reparam import LocScaleReparam, SplitReparam

    from mlm_ppl import MLMKernel

    def model():
        pyro.sample("x", d)

    handled = {
        r"poutine.block.* hid the token site": poutine.block(model, hide=["x"]),
        r"poutine.reparam was applied to token site 'x'": poutine.reparam(model, {"x": LocScaleReparam()}),
        r"reparam was applied to token site 'x'": poutine.reparam(model, {"x": SplitReparam([3, 3], -1)}),
        r"token site 'x' holds the mask token at 2 free position\(s\).*put the known tokens into the template": (
            poutine.condition(model, {"x": d.template.clone()})
        ),
    }
    for message, handled_model in handled.items():
        for kernel in (MLMKernel(handled_model, seed=0), MLMGibbs(handled_model, seed=0)):
            with pytest.raises(ValueError, match=message):
                kernel.setup(0)
    with pytest.raises(ValueError, match="holds the mask token"):
        d.log_prob(d.template)
    # outside the kernels a blocked site is drawn as Pyro draws it, hidden from the trace
    assert "x" not in poutine.trace(poutine.block(model, hide=["x"])).get_trace().nodes


def test_nuts_with_jit_compile_inside_mlmgibbs_is_refused_by_name(d):
    """Issue 37 item 1: a compiled potential keeps the token values it was traced with, so
    MLMGibbs(NUTS(model, jit_compile=True)) sampled w given the first tokens (E[w] 0.021 against
    an exact 0.794). Refused, naming what to use."""

    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("x", d)

    with pytest.raises(ValueError, match=r"jit_compile=True.*keeps the token sites' values.*NUTS\(model\)"):
        MLMGibbs(NUTS(model, jit_compile=True))
    MLMGibbs(NUTS(model))  # the default builds


def test_svi_with_a_latent_token_site_is_refused_and_with_an_observed_one_runs(d):
    """Issue 37 item 3: SVI with the token site left latent drew it by MH chains each step (about
    1.35 s) and scored it unnormalised: not an ELBO. Refused with what works; a site conditioned
    on a fixed sequence is an ordinary observed site and SVI fits the other sites."""
    from pyro.infer import SVI, Trace_ELBO
    from pyro.optim import Adam

    y = torch.tensor([0.3, -0.2])
    fixed = d.template.clone()
    fixed[d.free_positions] = d.allowed.long().argmax(-1)

    def model(y, x_obs=None):
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        x = pyro.sample("x", d, obs=x_obs)
        score = (x[..., d.free_positions] == int(fixed[d.free_positions[0]])).double().mean()
        with pyro.plate("assays", len(y)):
            pyro.sample("y", dist.Normal(w * score, 0.7), obs=y)

    def guide(y, x_obs=None):
        loc = pyro.param("loc", torch.tensor(0.0))
        pyro.sample("w", dist.Normal(loc, 1.0))

    pyro.clear_param_store()
    svi = SVI(model, guide, Adam({"lr": 0.01}), Trace_ELBO())
    start = time.monotonic()
    with pytest.raises(NotImplementedError, match=r"sampled under SVI.*MLMGibbs\(NUTS\(model\)\).*obs="):
        svi.step(y)
    assert time.monotonic() - start < 1.0  # refused before any chain runs
    loss = svi.step(y, fixed)
    assert math.isfinite(loss)
    with pytest.raises(ValueError, match=r"SVI cannot infer a token site.*obs="):
        torch.distributions.biject_to(d.support)
