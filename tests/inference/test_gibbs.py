"""MLMGibbs: MLM sequence sites beside continuous and discrete latents, against exact posteriors."""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC, NUTS

from exactness import plate_sweep_matrix
from gibbs_exact import gibbs_iteration_matrix
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel
from mlm_ppl.inference import MetropolisHastings, exact
from mlm_ppl.testing import tiny_residue_bert

TEMPLATE = "[MASK][MASK][MASK]"  # 3 free positions over A, C, D, E: 64 states


@pytest.fixture(scope="module")
def smooth64():
    """A float64 tiny BERT with a small weight spread: its MH chains mix fast (|lambda_2| 0.91 for the
    discrete model below, one token step per iteration)."""
    return tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64)


# a model whose only latents are token sites is run by any of these, all the same MLMGibbs updates
BUILDS = {
    "MLMGibbs(NUTS(model))": lambda model: MLMGibbs(NUTS(model), seed=0),
    "MLMGibbs(model)": lambda model: MLMGibbs(model, seed=0),
}


def _set_up(build, model):
    kernel = BUILDS[build](model)
    kernel.setup(0)
    return kernel


def _count_a(mlm, dist_, x):
    return (x[..., dist_.free_positions] == mlm.vocab.index("A")).sum(-1)


@pytest.mark.parametrize("token_kernel", ["mh", "surrogate-mh"])
def test_discrete_and_token_updates_leave_the_exact_posterior_invariant(smooth64, token_kernel):
    """z ~ Bernoulli(0.3); x ~ MLM; y ~ Normal(z + count_a(x) / 2, 0.5): the kernel's own full
    conditionals, composed as it runs them, have the enumerated posterior as stationary law."""
    d = MaskedLMDistribution(smooth64, TEMPLATE)
    y = torch.tensor([1.4, 1.1], dtype=torch.float64)

    def model():
        z = pyro.sample("z", dist.Bernoulli(torch.tensor(0.3, dtype=torch.float64)))
        x = pyro.sample("x", d)
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(z + 0.5 * _count_a(smooth64, d, x), 0.5), obs=y)

    kernel = MLMGibbs(NUTS(model), kernel=token_kernel, seed=0)
    kernel.setup(0)
    assert kernel.mlm_sites == ["x"] and kernel.discrete_sites == ["z"] and kernel.continuous_sites == []
    states = exact.enumerate_states(d)
    c = _count_a(smooth64, d, states).double()
    lik = torch.stack([dist.Normal(z + 0.5 * c[:, None], 0.5).log_prob(y).sum(-1) for z in (0.0, 1.0)])  # (2, S)
    prior_z = torch.tensor([0.7, 0.3], dtype=torch.float64).log()
    post = torch.softmax((exact.exact_log_probs(d, states)[None] + prior_z[:, None] + lik).reshape(-1), 0)

    # z | x from the kernel's log joint; x | z from the MH kernel it built (its factor reads z)
    P = gibbs_iteration_matrix(kernel, states)  # one iteration: discrete sites, then the token site
    assert exact.total_variation(exact.stationary_distribution(P), post) < 1e-10


@pytest.mark.slow
def test_gibbs_with_nuts_matches_the_exact_posterior(smooth64):
    """w ~ Normal(0, 1); x ~ MLM; y_j ~ Normal(w * count_a(x), 1): w integrated analytically."""
    mlm = tiny_residue_bert("ACDE", seed=1, std=0.2)
    d = MaskedLMDistribution(mlm, TEMPLATE)
    y = torch.tensor([1.6, 1.0, 1.3])

    def model():
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        x = pyro.sample("x", d)
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(w * _count_a(mlm, d, x), 1.0), obs=y)

    states = exact.enumerate_states(d)
    c = _count_a(mlm, d, states).double()
    yd, n = y.double(), len(y)
    prec = 1 + n * c**2  # posterior precision of w given c
    mean = c * yd.sum() / prec
    log_ml = -0.5 * prec.log() + 0.5 * prec * mean**2  # log p(y | c) up to a constant
    post = torch.softmax(exact.exact_log_probs(d, states) + log_ml, 0)
    exact_w = float((post * mean).sum())

    pyro.set_rng_seed(0)
    kernel = MLMGibbs(NUTS(model), seed=0, token_steps=2)
    mcmc = MCMC(kernel, num_samples=3000, warmup_steps=200, disable_progbar=True)
    mcmc.run()
    draws = mcmc.get_samples()
    x, w = draws["x"].long(), draws["w"].double()
    assert x.dtype == torch.long and x.shape == (3000, d.template.numel())
    # per-position token marginals (measured 0.037 at 4000 draws; expected noise ~0.03 at ESS ~400)
    for p in d.free_positions.tolist():
        exact_p = torch.stack([post[states[:, p] == t].sum() for t in range(mlm.vocab_size)])
        drawn_p = torch.stack([(x[:, p] == t).double().mean() for t in range(mlm.vocab_size)])
        assert exact.total_variation(exact_p, drawn_p) < 0.08
    assert abs(float(w.mean()) - exact_w) < 0.05  # posterior sd of w 0.75; ESS(w) ~ 600 at 3000 draws
    # w given the drawn tokens follows its exact conditional: standardised residuals ~ N(0, 1)
    cd = _count_a(mlm, d, x).double()
    z = (w - cd * yd.sum() / (1 + n * cd**2)) * (1 + n * cd**2).sqrt()
    assert abs(float(z.mean())) < 0.1 and abs(float(z.var()) - 1) < 0.1
    stats = kernel.draw_stats[-1]["x"]
    assert stats["lp"].shape == (3000,) and 0.3 < float(stats["is_accepted"].double().mean()) <= 1


def test_continuous_updates_never_run_the_mlm(tiny4, monkeypatch):
    d = MaskedLMDistribution(tiny4, "A[MASK]C[MASK]")

    def model():
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        x = pyro.sample("x", d)
        pyro.sample("y", dist.Normal(w * _count_a(tiny4, d, x), 1.0), obs=torch.tensor(1.0))

    rows, evaluated = [], []
    real_logits, real_eval = tiny4.logits_at, d.evaluate
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real_logits(ids, attn, q))
    monkeypatch.setattr(d, "evaluate", lambda x: evaluated.append(x.shape[0]) or real_eval(x))
    kernel = MLMGibbs(NUTS(model), seed=1)
    MCMC(kernel, num_samples=15, warmup_steps=5, disable_progbar=True).run()
    # the fill-in (one forward per free position), then L=4 scored positions per evaluated state
    # (the start and each proposal that changed the tokens); nothing for the NUTS trajectories
    assert sum(rows) == d.num_free + 4 * sum(evaluated)
    assert sum(evaluated) <= 1 + 20


def _one_site_model(d):
    def model():
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("x", d)
        pyro.factor("f", w)

    return model


def test_bad_kernels_and_options_fail_in_the_constructor(tiny4):
    model = _one_site_model(MaskedLMDistribution(tiny4, "A[MASK]C"))
    with pytest.raises(
        ValueError, match="'pseudo-gibbs' cannot move a token site inside MLMGibbs.*'mh', 'surrogate-mh'"
    ):
        MLMGibbs(NUTS(model), kernel="pseudo-gibbs")
    with pytest.raises(TypeError, match="banana"):
        MLMGibbs(NUTS(model), banana=1)
    with pytest.raises(TypeError, match="NUTS built on the model"):
        MLMGibbs(42)
    with pytest.raises(ValueError, match=r"continuous latent sites \['w'\]; pass an inner kernel"):
        MLMGibbs(model).setup(0)
    with pytest.raises(ValueError, match="token_steps"):
        MLMGibbs(NUTS(model), token_steps=0)


def test_sites_it_cannot_update_are_refused(tiny4):
    d = MaskedLMDistribution(tiny4, "A[MASK]C")

    def nested():
        pyro.sample("w", dist.Normal(0.0, 1.0))
        with pyro.plate("a", 2, dim=-2), pyro.plate("b", 2, dim=-1):
            pyro.sample("x", d)

    with pytest.raises(ValueError, match="at most one pyro.plate"):
        MLMGibbs(NUTS(nested)).setup(0)

    def no_tokens():
        pyro.sample("w", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="no latent MaskedLMDistribution site"):
        MLMGibbs(NUTS(no_tokens)).setup(0)


def test_seeds(tiny4):
    model = _one_site_model(MaskedLMDistribution(tiny4, "A[MASK][MASK]C"))

    def run(seed):
        pyro.set_rng_seed(seed)
        mcmc = MCMC(MLMGibbs(NUTS(model)), num_samples=8, warmup_steps=2, disable_progbar=True)
        mcmc.run()
        return mcmc.get_samples()["x"]

    assert torch.equal(run(3), run(3))  # seed=None: pyro.set_rng_seed governs
    assert not math.isnan(float(run(4).double().mean()))


def test_from_pyro_gives_inference_data_for_both_kinds_of_sites(tiny4):
    import warnings

    from mlm_ppl import MLMKernel, from_pyro, summary

    d = MaskedLMDistribution(tiny4, "A[MASK][MASK]C")
    pyro.set_rng_seed(0)
    with warnings.catch_warnings():  # two sequential chains in this process
        warnings.filterwarnings("ignore", "num_chains=2 is more than available_cpu")
        mcmc = MCMC(
            MLMGibbs(NUTS(_one_site_model(d))), num_samples=12, warmup_steps=4, num_chains=2, disable_progbar=True
        )
        mcmc.run()
    idata = from_pyro(mcmc)
    post = idata.posterior
    assert post["x"].shape == (2, 12, d.template.numel()) and post["x"].dtype.kind == "i"  # its Pyro name
    assert post["w"].shape == (2, 12) and post["w"].dtype.kind == "f"
    assert set(idata.sample_stats.data_vars) == set(MetropolisHastings.stat_names())
    assert torch.equal(torch.as_tensor(post["x"].values), mcmc.get_samples(group_by_chain=True)["x"].long())
    report = summary(idata)
    assert {"lp", "w", "x_hamming_chain0_start"} <= set(report.table.index) and len(report.chains) == 2

    def bare():
        pyro.sample("x", d)

    kernel = MLMKernel(bare, num_chains=3, seed=0)
    mcmc = MCMC(kernel, num_samples=5, disable_progbar=True)
    mcmc.run()
    idata = from_pyro(mcmc)
    assert idata.posterior["x"].shape == (3, 5, d.template.numel())
    with pytest.raises(TypeError, match="MLMKernel or MLMGibbs"):
        from_pyro(MCMC(NUTS(lambda: pyro.sample("w", dist.Normal(0.0, 1.0))), num_samples=1))


@pytest.mark.parametrize("build", BUILDS)
def test_two_token_sites_updated_in_turn_leave_the_exact_posterior_invariant(smooth64, build):
    """Two sequences coupled by a pyro.factor: x1 then x2 each by MH given the other."""
    d1 = MaskedLMDistribution(smooth64, "[MASK][MASK]")
    d2 = MaskedLMDistribution(smooth64, "C[MASK][MASK]")

    def matches(x1, x2):
        return (x1[..., d1.free_positions] == x2[..., d2.free_positions]).sum(-1).double()

    def model():
        x1 = pyro.sample("x1", d1)
        x2 = pyro.sample("x2", d2)
        pyro.factor("couple", 1.5 * matches(x1, x2))

    kernel = _set_up(build, model)
    assert kernel.mlm_sites == ["x1", "x2"] and not kernel.is_plated("x1")
    s1, s2 = exact.enumerate_states(d1), exact.enumerate_states(d2)  # 16 states each
    n1, n2 = len(s1), len(s2)
    logp = exact.exact_log_probs(d1, s1)[:, None] + exact.exact_log_probs(d2, s2)[None, :]
    logp = logp + 1.5 * matches(s1[:, None, :].expand(-1, n2, -1), s2[None, :, :].expand(n1, -1, -1))
    post = torch.softmax(logp.reshape(-1), 0)  # row i1 * n2 + i2
    P1 = torch.zeros(n1 * n2, n1 * n2, dtype=torch.float64)
    for i2 in range(n2):
        kernel.hold("x2", s2[i2])
        T = exact.transition_matrix(kernel.site_kernel("x1"), s1)
        rows = torch.arange(n1) * n2 + i2
        P1[rows[:, None], rows[None, :]] = T
    kernel.hold("x2", s2[0])
    P2 = torch.zeros(n1 * n2, n1 * n2, dtype=torch.float64)
    for i1 in range(n1):
        kernel.hold("x1", s1[i1])
        T = exact.transition_matrix(kernel.site_kernel("x2"), s2)
        rows = i1 * n2 + torch.arange(n2)
        P2[rows[:, None], rows[None, :]] = T
    P = P1 @ P2  # one iteration: x1, then x2
    with pytest.raises(ValueError, match=r"MLMKernel moves one token site.*token sites \['x1', 'x2'\]"):
        MLMKernel(model, seed=0).setup(0)
    assert exact.total_variation(exact.stationary_distribution(P), post) < 1e-10
    marginal = post.reshape(n1, n2).sum(1)
    assert exact.total_variation(marginal, exact.exact_log_probs(d1, s1).exp()) > 0.01  # the coupling matters


@pytest.mark.parametrize("build", BUILDS)
def test_sequences_under_a_plate_coupled_by_a_factor_match_enumeration(smooth64, build):
    """A pyro.plate of two sequences coupled by a factor: each updated in turn given the other."""
    d = MaskedLMDistribution(smooth64, "[MASK][MASK]")
    free = d.free_positions

    def matches(a, b):
        return (a[..., free] == b[..., free]).sum(-1).double()

    def model():
        with pyro.plate("seqs", 2):
            x = pyro.sample("x", d)  # (2, L)
        pyro.factor("couple", 1.5 * matches(x[0], x[1]))

    kernel = _set_up(build, model)
    assert kernel.is_plated("x") and kernel.initial_params["x"].shape == (2, d.template.numel())
    s = exact.enumerate_states(d)
    n = len(s)
    logp = exact.exact_log_probs(d, s)[:, None] + exact.exact_log_probs(d, s)[None, :]
    logp = logp + 1.5 * matches(s[:, None, :].expand(-1, n, -1), s[None, :, :].expand(n, -1, -1))
    post = torch.softmax(logp.reshape(-1), 0)  # row i0 * n + i1
    P = plate_sweep_matrix(kernel, "x", s)
    assert exact.total_variation(exact.stationary_distribution(P), post) < 1e-10

    # a run: draws (D, 2, L), per-sequence statistics, and InferenceData of one sequence
    from mlm_ppl import from_pyro

    mcmc = MCMC(BUILDS[build](model), num_samples=6, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    assert mcmc.get_samples()["x"].shape == (6, 2, d.template.numel())
    assert mcmc.kernel.draw_stats[-1]["x"]["lp"].shape == (6, 2)
    idata = from_pyro(mcmc, element=1)
    assert idata.posterior["x_1"].shape == (1, 6, d.template.numel()) and "x_0" not in idata.posterior
    assert torch.equal(torch.as_tensor(idata.posterior["x_1"].values[0]), mcmc.get_samples()["x"][:, 1].long())
    both = from_pyro(mcmc)  # every sequence of the plate, each with its functionals, in one InferenceData
    for e in (0, 1):
        assert torch.equal(torch.as_tensor(both.posterior[f"x_{e}"].values[0]), mcmc.get_samples()["x"][:, e].long())
        assert f"x_{e}_hamming_chain0_start" in both.posterior and f"x_{e}_lp" in both.sample_stats
    stats = both.sample_stats
    np.testing.assert_allclose(stats["lp"].values, stats["x_0_lp"].values + stats["x_1_lp"].values)
    with pytest.raises(ValueError, match=r"MLMKernel moves one token site.*under a pyro.plate.*MLMGibbs\(model"):
        MLMKernel(model, seed=0).setup(0)


def test_a_token_site_whose_distribution_depends_on_another_latent_is_refused(tiny4):
    """Its full conditional would need the MLM distribution's normaliser: refused at the first
    update that sees the distribution change, before any draw is recorded."""
    templates = [MaskedLMDistribution(tiny4, "A[MASK]C"), MaskedLMDistribution(tiny4, "C[MASK]A")]

    def template_from_z():
        z = pyro.sample("z", dist.Bernoulli(0.5))
        pyro.sample("x", templates[int(z)])

    for seed in range(3):  # at set-up or at the first update, whichever first sees the other template
        kernel = MLMGibbs(template_from_z, seed=seed)
        with pytest.raises(ValueError, match="site 'x' changed with the values of other latent sites"):
            kernel.setup(0)
            kernel.sample(kernel.initial_params)

    def temperature_from_w():
        w = pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("x", MaskedLMDistribution(tiny4, "A[MASK]C", temperature=1.0 + float(w.detach() > 0)))

    pyro.set_rng_seed(0)
    with pytest.raises(ValueError, match="normaliser is intractable"):
        MCMC(MLMGibbs(NUTS(temperature_from_w), seed=0), num_samples=20, warmup_steps=5, disable_progbar=True).run()


def test_surrogate_mh_token_updates_keep_both_log_factors_current(tiny4):
    """With continuous sites moving, the surrogate chain's extra terms and the target's are both
    refreshed before each token update (else the next ratio would use stale likelihood terms)."""
    d = MaskedLMDistribution(tiny4, "A[MASK][MASK]C")
    kernel = MLMGibbs(NUTS(_one_site_model(d)), kernel="surrogate-mh", inner_steps=2, seed=0)
    mcmc = MCMC(kernel, num_samples=6, warmup_steps=3, disable_progbar=True)
    mcmc.run()
    state = kernel.site_state("x")
    w = mcmc.get_samples()["w"][-1]
    expected = dist.Normal(0.0, 1.0).log_prob(w) + w  # every term of the model but the MLM's, at the last w
    assert torch.allclose(state.log_factor.double(), expected.double().expand(1), atol=1e-5)
    assert torch.equal(state.inner.log_factor, state.log_factor)
    assert set(kernel.draw_stats[-1]["x"]) >= {"n_moves", "inner_acceptance", "masked_copies"}


def test_from_pyro_keeps_every_token_site_under_its_pyro_name_in_one_inference_data(tiny4):
    """Issue 37: from_pyro renamed the token site to `tokens` and read one site per call. Now every
    token site keeps its name (heavy, light), with its functionals named after it, beside the
    continuous sites, in one InferenceData that mlm_ppl.summary covers."""
    import warnings

    from mlm_ppl import from_pyro, summary

    heavy, light = MaskedLMDistribution(tiny4, "A[MASK][MASK]C"), MaskedLMDistribution(tiny4, "[MASK]C[MASK]")

    def model():
        pyro.sample("w", dist.Normal(0.0, 1.0))
        pyro.sample("heavy", heavy)
        pyro.sample("light", light)

    pyro.set_rng_seed(0)
    with warnings.catch_warnings():  # two sequential chains in this process
        warnings.filterwarnings("ignore", "num_chains=2 is more than available_cpu")
        mcmc = MCMC(MLMGibbs(NUTS(model), seed=0), num_samples=10, warmup_steps=2, num_chains=2, disable_progbar=True)
        mcmc.run()
    idata = from_pyro(mcmc)
    post, stats, samples = idata.posterior, idata.sample_stats, mcmc.get_samples(group_by_chain=True)
    for name in ("heavy", "light"):
        assert torch.equal(torch.as_tensor(post[name].values), samples[name].long())
        assert {f"{name}_hamming_start", f"{name}_hamming_chain0_start"} <= set(post.data_vars)
        assert post[name].dims == ("chain", "draw", f"{name}_position")
    assert "tokens" not in post and "w" in post
    np.testing.assert_allclose(stats["lp"].values, stats["heavy_lp"].values + stats["light_lp"].values)
    assert (stats["n_changed"].values == stats["heavy_n_changed"].values + stats["light_n_changed"].values).all()
    table = summary(idata).table
    assert {"lp", "w", "heavy_hamming_chain0_start", "light_hamming_chain0_start"} <= set(table.index)
    assert not {"heavy", "light"} & set(table.index)  # draws, not functionals
    only = from_pyro(mcmc, site="light")
    assert "light" in only.posterior and "heavy" not in only.posterior
    with pytest.raises(ValueError, match="'x' is not a token site of the model; they are"):
        from_pyro(mcmc, site="x")
