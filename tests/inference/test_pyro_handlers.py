"""Pyro's effect handlers on token sites: every kernel samples the joint Pyro's own trace scores.

The reference is Pyro itself: ``poutine.trace(poutine.condition(model, {...})).log_prob_sum()``
over every state, which applies whatever ``scale`` and ``mask`` the handlers put on the site.
The kernels' exact transition matrices must leave that law invariant (float64 models, so to
1e-10), for MLMKernel and MLMGibbs, MH and surrogate-MH. A subsampled plate over token
sequences is refused.
"""

import warnings

import pyro
import pyro.poutine as poutine
import pytest
import torch

from exactness import check_fit, empirical, plate_sweep_matrix
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel
from mlm_ppl.inference import exact
from mlm_ppl.models import ScaledTarget
from mlm_ppl.testing import tiny_residue_bert

KERNELS = [
    ("mh", {}),
    ("surrogate-mh", {"inner_steps": 2}),
    ("surrogate-mh", {"inner_steps": 2, "surrogate_context": 0}),
]


@pytest.fixture(scope="module")
def smooth64():
    return tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64)


def _pyro_joint(model, values_list):
    """Pyro's own normalised joint over the given latent values (one dict per state)."""
    logp = torch.stack(
        [poutine.trace(poutine.condition(model, data=v)).get_trace().log_prob_sum().double() for v in values_list]
    )
    return torch.softmax(logp, 0)


def _count(d, x, token):
    return (x[..., d.free_positions] == token).sum(-1).double()


def _handled(d, handler, a):
    """A model with token site ``x`` of ``d`` under ``handler()`` and a factor on its count of ``a``."""

    def model():
        with handler():
            x = pyro.sample("x", d)
        pyro.factor("f", 0.8 * _count(d, x, a))

    return model


HANDLERS = {
    "scale 2.5": lambda: poutine.scale(scale=2.5),
    "scale 0.3": lambda: poutine.scale(scale=0.3),
    "mask False": lambda: poutine.mask(mask=False),
}


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("kernel, options", KERNELS)
@pytest.mark.parametrize("which", ["MLMKernel", "MLMGibbs"])
def test_a_scaled_or_masked_token_site_is_sampled_as_pyro_scores_it(smooth64, handler, kernel, options, which):
    d = MaskedLMDistribution(smooth64, "A[MASK]C[MASK][MASK]")
    a = smooth64.vocab.index("A")
    model = _handled(d, HANDLERS[handler], a)
    states = exact.enumerate_states(d)
    target = _pyro_joint(model, [{"x": s} for s in states])
    if which == "MLMKernel":
        k = MLMKernel(model, kernel=kernel, seed=0, **options)
        k.setup(0)
        token_kernel = k.kernel
    else:
        k = MLMGibbs(model, kernel=kernel, seed=0, **options)
        k.setup(0)
        token_kernel = k.site_kernel("x")
    P = exact.transition_matrix(token_kernel, states)
    assert float((target @ P - target).abs().max()) < 1e-10
    # without the handler the law is another one: the check has power
    plain = _pyro_joint(lambda: pyro.factor("f", 0.8 * _count(d, pyro.sample("x", d), a)), [{"x": s} for s in states])
    assert exact.total_variation(plain, target) > 0.02


@pytest.mark.parametrize("kernel, options", KERNELS)
def test_a_mask_per_sequence_of_a_plate_is_honoured_for_each_sequence(smooth64, kernel, options):
    """pyro.plate of two sequences, the second masked out: its MLM term is dropped, the first's kept."""
    d = MaskedLMDistribution(smooth64, "[MASK][MASK]")
    free = d.free_positions

    def model():
        with pyro.plate("seqs", 2), poutine.mask(mask=torch.tensor([True, False])):
            x = pyro.sample("x", d)
        pyro.factor("couple", 1.5 * (x[0, free] == x[1, free]).sum().double())

    s = exact.enumerate_states(d)
    n = len(s)
    target = _pyro_joint(model, [{"x": torch.stack([s[i], s[j]])} for i in range(n) for j in range(n)])
    k = MLMGibbs(model, kernel=kernel, seed=0, **options)
    k.setup(0)
    assert isinstance(k.site_target("x", 1).base, ScaledTarget) and k.site_target("x", 1).base.scale == 0.0
    assert not isinstance(k.site_target("x", 0).base, ScaledTarget)
    P = plate_sweep_matrix(k, "x", s)
    assert float((target @ P - target).abs().max()) < 1e-10


def test_a_subsampled_plate_of_token_sequences_is_refused(smooth64):
    d = MaskedLMDistribution(smooth64, "[MASK][MASK]")

    def model():
        with pyro.plate("seqs", 4, subsample_size=2):
            pyro.sample("x", d)

    with pytest.raises(ValueError, match=r"pyro.plate\('seqs', 4, subsample_size=2\).*remove subsample_size"):
        MLMGibbs(model, seed=0).setup(0)


def test_pseudo_gibbs_refuses_a_scaled_site(smooth64):
    d = MaskedLMDistribution(smooth64, "A[MASK]C")

    def model():
        with poutine.scale(scale=2.0):
            pyro.sample("x", d)

    with pytest.raises(ValueError, match="pseudo-gibbs would ignore .*poutine.scale or mask"):
        MLMKernel(model, kernel="pseudo-gibbs", seed=0).setup(0)


DRAWN = {"scale 3": lambda: poutine.scale(scale=3.0), "mask False": lambda: poutine.mask(mask=False)}


@pytest.mark.parametrize("handler", DRAWN)
@pytest.mark.parametrize("which, chains", [("MLMKernel", 3000), ("MLMGibbs", 1000)])
@pytest.mark.slow
def test_draws_under_a_handler_follow_pyros_joint(smooth64, handler, which, chains):
    """Draws, not only the matrix: independent chains from a uniform start, after 8 steps, for
    both kernels (MLMKernel: batched chains in one Pyro chain; MLMGibbs: one Pyro chain each).
    Their states follow the exact 8-step law (Pearson's test and a TV bound derived from the
    sampling noise), and that law converges to Pyro's joint of the handled model."""
    d = MaskedLMDistribution(smooth64, "A[MASK][MASK]")
    model = _handled(d, DRAWN[handler], smooth64.vocab.index("A"))
    states = exact.enumerate_states(d)
    target = _pyro_joint(model, [{"x": s} for s in states])
    if which == "MLMKernel":
        k = MLMKernel(model, num_chains=chains, seed=1, init="uniform")
        k.setup(0)
        P = exact.transition_matrix(k.kernel, states)
        mcmc = pyro.infer.MCMC(k, num_samples=1, warmup_steps=7, disable_progbar=True)
    else:
        k = MLMGibbs(model, seed=1, init="uniform")
        k.setup(0)
        P = exact.transition_matrix(k.site_kernel("x"), states)
        with warnings.catch_warnings():  # MCMC runs them one after another: what this test wants
            warnings.filterwarnings("ignore", f"num_chains={chains} is more than available_cpu")
            mcmc = pyro.infer.MCMC(k, num_samples=1, warmup_steps=7, num_chains=chains, disable_progbar=True)
    p8 = torch.full((len(states),), 1.0 / len(states), dtype=P.dtype) @ torch.linalg.matrix_power(P, 8)
    mcmc.run()
    draws = mcmc.get_samples()["x"]
    assert draws.shape == (chains, states.shape[1])  # one draw per chain
    check_fit(p8, empirical(d, draws))
    p_long = p8 @ torch.linalg.matrix_power(P, 300)  # the same chains run longer reach Pyro's joint
    assert exact.total_variation(p_long, target) < 1e-6 < exact.total_variation(p8, target)
