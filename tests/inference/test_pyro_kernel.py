"""The kernels inside pyro.infer.MCMC."""

import warnings

import pyro
import pytest
import torch
from pyro.infer import MCMC

from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel
from mlm_ppl.inference import exact, run_from_mcmc

TEMPLATE = "A[MASK]C[MASK][MASK]"


def _model(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    a = tiny4.vocab.index("A")

    def model():
        x = pyro.sample("x", dist)
        # a constraint: prefer A at position 4
        pyro.factor("motif", torch.where(x[..., 4] == a, 0.0, -3.0))
        return x

    return model, dist, a


def _mcmc(kernel, **kw):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "num_chains=2 is more than available_cpu")
        mcmc = MCMC(kernel, disable_progbar=True, **kw)
        mcmc.run()
    return mcmc


def test_mcmc_with_two_chains_and_a_constraint_is_seeded(tiny4):
    model, dist, a = _model(tiny4)
    runs = []
    for seed in (5, 5, 6):
        kernel = MLMKernel(model, seed=seed)
        mcmc = _mcmc(kernel, num_samples=30, warmup_steps=5, num_chains=2)
        runs.append((mcmc.get_samples(group_by_chain=True)["x"], kernel))
    (x1, k1), (x2, _), (x3, _) = runs
    assert x1.shape == (2, 30, 7)
    assert torch.equal(x1, x2) and not torch.equal(x1, x3)
    assert not torch.equal(x1[0], x1[1])  # sequential chains get different seeds
    assert len(k1.draw_stats) == 2 and k1.draw_stats[0]["lp"].shape == (30, 1)
    # the factor entered the target: lp of the draws is -E + factor
    lp = k1.draw_stats[1]["lp"][:, 0]
    factor = torch.where(x1[1, :, 4] == a, 0.0, -3.0)
    assert torch.allclose(lp, dist.log_prob(x1[1]) + factor, atol=1e-4)


@pytest.mark.parametrize(
    "name, options", [("mh", dict(block_size=2, top_k=3)), ("surrogate-mh", dict(inner_steps=2, top_k=3))]
)
def test_the_pyro_kernel_is_exact_for_the_constrained_model(tiny4, name, options):
    model, dist, a = _model(tiny4)
    kernel = MLMKernel(model, kernel=name, **options)
    kernel.setup(0)
    pi = exact.exact_log_probs(kernel.target).exp()
    plain = exact.exact_log_probs(dist).exp()
    assert exact.total_variation(pi, plain) > 0.05
    P = exact.transition_matrix(kernel.kernel)
    assert float((pi @ P - pi).abs().max()) < 1e-6


def test_batched_chains_inside_one_pyro_chain(tiny4):
    model, _, _ = _model(tiny4)
    kernel = MLMKernel(model, num_chains=4, seed=0)
    mcmc = _mcmc(kernel, num_samples=6, warmup_steps=2, num_chains=1)
    x = mcmc.get_samples(group_by_chain=True)["x"]
    assert x.shape == (1, 4 * 6, 7)  # the batched chains end to end
    assert kernel.draw_stats[0]["is_accepted"].shape == (6, 4)
    run = run_from_mcmc(mcmc, kernel)
    assert torch.equal(run.tokens, x.reshape(4, 6, 7)) and run.stats["is_accepted"].shape == (4, 6)
    assert torch.equal(run.tokens[:, -1], kernel._state.tokens)  # each chain's last draw is its state
    assert kernel.logging()["acc. rate"] >= 0


def test_pseudo_gibbs_through_pyro(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)

    def bare():
        pyro.sample("x", dist)

    kernel = MLMKernel(bare, kernel="pseudo-gibbs", scan="left_to_right")
    x = _mcmc(kernel, num_samples=5, num_chains=1).get_samples()["x"]
    assert x.shape == (5, 7)


def test_pseudo_gibbs_refuses_factors_through_every_entry_point(tiny4):
    """Its law ignores factors (95% of its draws broke a -inf constraint before): refused, not ignored."""
    from mlm_ppl import sample
    from mlm_ppl.inference import PseudoGibbs
    from mlm_ppl.models import ConstrainedTarget

    model, dist, _ = _model(tiny4)
    with pytest.raises(ValueError, match="pseudo-gibbs would ignore the log-factor"):
        _mcmc(MLMKernel(model, kernel="pseudo-gibbs"), num_samples=2, num_chains=1)
    with pytest.raises(ValueError, match="pseudo-gibbs would ignore the log-factor"):
        sample(tiny4, TEMPLATE, kernel="pseudo-gibbs", log_factor=lambda x: torch.zeros(x.shape[0]))
    with pytest.raises(ValueError, match="pseudo-gibbs would ignore the log-factor"):
        PseudoGibbs(ConstrainedTarget(dist, lambda x: torch.zeros(x.shape[0])))


def test_models_the_kernel_cannot_run(tiny4):
    def no_mlm():
        pyro.sample("z", pyro.distributions.Normal(0.0, 1.0))

    dist = MaskedLMDistribution(tiny4, TEMPLATE)

    def extra_latent():
        pyro.sample("x", dist)
        pyro.sample("z", pyro.distributions.Normal(0.0, 1.0))

    def plated():
        with pyro.plate("n", 2):
            pyro.sample("x", dist)

    with pytest.raises(ValueError, match="no latent MaskedLMDistribution site"):
        MLMKernel(no_mlm).setup(0)
    with pytest.raises(ValueError, match=r"other latent sites \['z'\]; sample it with MLMGibbs"):
        MLMKernel(extra_latent).setup(0)
    with pytest.raises(ValueError, match=r"one token site outside any pyro.plate.*MLMGibbs\(model, kernel='mh'\)"):
        MLMKernel(plated, num_chains=2).setup(0)
    with pytest.raises(ValueError, match="'mask-predict' is a decoder from the masked template, not an MCMC kernel"):
        MLMKernel(plated, kernel="mask-predict")
    with pytest.raises(
        ValueError, match=r"unknown kernel 'zigzag'; choose one of 'mh', 'surrogate-mh', 'replica-mh', 'pseudo-gibbs'$"
    ):
        MLMKernel(plated, kernel="zigzag")
    with pytest.raises(TypeError, match="seed must be an int"):
        MLMKernel(plated, seed="1")
    with pytest.raises(ValueError, match="unknown scan"):
        MLMKernel(lambda: pyro.sample("x", dist), scan="zigzag").setup(0)


def test_pyro_seed_governs_the_default_and_options_are_checked_up_front(tiny4):
    model, _, _ = _model(tiny4)
    mcmc = MCMC(MLMKernel(model), num_samples=6, warmup_steps=2, disable_progbar=True)
    draws = []
    for _ in range(2):  # the same MCMC object run twice after the same pyro.set_rng_seed
        pyro.set_rng_seed(11)
        mcmc.run()
        draws.append(mcmc.get_samples()["x"])
    pyro.set_rng_seed(12)
    mcmc.run()
    assert torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], mcmc.get_samples()["x"])
    with pytest.raises(TypeError, match="kernel 'mh'.*banana"):
        MLMKernel(model, banana=1)
    with pytest.raises(ValueError, match="unknown kernel 'gibbs'"):
        MLMKernel(model, kernel="gibbs")


def test_predictive_takes_batched_chains_as_they_are_and_indexes_a_table_with_them(tiny4):
    """Batched chains used to read as a plate in Predictive (shape mismatch) unless flattened by
    hand; get_samples() now holds one draw per row, each chain's after the other's."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    table = torch.linspace(-1.0, 1.0, tiny4.vocab_size)

    def model(y=None):
        x = pyro.sample("x", dist)
        score = pyro.deterministic("score", table[x[..., dist.free_positions]].sum(-1))
        pyro.sample("y", pyro.distributions.Normal(score, 0.5), obs=y)

    kernel = MLMKernel(model, num_chains=3, seed=0)
    mcmc = MCMC(kernel, num_samples=5, disable_progbar=True)
    mcmc.run(torch.tensor(1.0))
    samples = mcmc.get_samples()
    assert samples["x"].shape == (15, 7) and samples["x"].dtype == torch.long
    out = pyro.infer.Predictive(model, posterior_samples=samples, return_sites=["y", "score"])()
    assert out["y"].shape == (15,)
    assert torch.equal(out["score"], table[samples["x"][:, dist.free_positions]].sum(-1))
    chains = run_from_mcmc(mcmc, kernel).tokens  # (3, 5, 7): the same draws, chain by chain
    assert torch.equal(chains.reshape(15, 7), samples["x"])

    def plated(y=None):
        with pyro.plate("seqs", 2):
            x = pyro.sample("x", dist)
            pyro.sample("y", pyro.distributions.Normal(table[x[..., dist.free_positions]].sum(-1), 0.5), obs=y)

    mcmc = MCMC(MLMGibbs(plated, seed=0), num_samples=5, disable_progbar=True)
    mcmc.run(torch.tensor([1.0, 0.0]))
    assert pyro.infer.Predictive(plated, posterior_samples=mcmc.get_samples())()["y"].shape == (5, 2)
