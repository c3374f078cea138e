"""A constraint spec from Pyro: ``MaskedLMDistribution(mlm, template, constraints=spec)`` (issue 23).

On the 64 states of A?C?? (ACDE, float64) with alphabets ACD/ACD/AD, ``Forbid("D[CA]")`` and
``hydropathy(weight=-0.5)`` (10 feasible states): ``log_prob`` is the hand-written
``-E/T + w f`` on feasible states and ``-inf`` off them (no forward pass for those); MLMKernel
(MH single-site and block, surrogate-MH) and MLMGibbs (beside a discrete site) have exact
transition matrices that leave Pyro's own joint invariant to 1e-10, under ``poutine.scale`` and
``poutine.mask`` too; proposals stay in the alphabets and a proposal that breaks the pattern
costs no forward pass; runs from infeasible fills draw nothing infeasible; the record holds the
rule and expert functionals; a spec that does not fit the template fails at construction.
"""

import pickle
import re
import warnings

import pyro
import pyro.distributions as pdist
import pyro.poutine as poutine
import pytest
import torch
from pyro.infer import MCMC, NUTS

from exactness import TEMPLATE
from gibbs_exact import gibbs_iteration_matrix
from mlm_ppl import MaskedLMDistribution, MLMGibbs, MLMKernel, from_pyro
from mlm_ppl.inference import exact
from mlm_ppl.inference.base import fill_template
from mlm_ppl.inference.pyro_chains import chain_streams
from mlm_ppl.models.constraints import KYTE_DOOLITTLE, Allowed, ConstraintSpec, Forbid, hydropathy
from mlm_ppl.testing import tiny_residue_bert

RULES = [Allowed("no-e", "ACD"), Allowed("last", "AD", positions=[-1]), Forbid("no-dc-da", "D[CA]")]
WEIGHT = -0.5
T = 0.7


def spec(weight=WEIGHT):
    return ConstraintSpec(RULES, [hydropathy(weight=weight)])


@pytest.fixture(scope="module")
def mlm():
    return tiny_residue_bert("ACDE", seed=1, std=0.2, dtype=torch.float64)


@pytest.fixture(scope="module")
def d(mlm):
    return MaskedLMDistribution(mlm, TEMPLATE, temperature=T, constraints=spec(), validate_args=True)


@pytest.fixture(scope="module")
def bare(mlm):
    return MaskedLMDistribution(mlm, TEMPLATE, temperature=T)


@pytest.fixture(scope="module")
def states(d):
    return exact.enumerate_states(d)


def by_hand(mlm, states):
    """Feasibility and the expert's value of each state, written out: the free positions 1, 3, 4
    of A?C?? in ACD, ACD, AD; no D followed by C or A where the pair touches a free position;
    the mean Kyte-Doolittle hydropathy of the three designed residues."""
    feasible, value = [], []
    for seq in mlm.decode(states):
        designed = [seq[1], seq[3], seq[4]]
        alphabets = designed[0] in "ACD" and designed[1] in "ACD" and designed[2] in "AD"
        pattern = any(seq[i] == "D" and seq[i + 1] in "CA" and ({i, i + 1} & {1, 3, 4}) for i in range(4))
        feasible.append(alphabets and not pattern)
        value.append(sum(KYTE_DOOLITTLE[c] for c in designed) / 3)
    return torch.tensor(feasible), torch.tensor(value, dtype=torch.float64)


def in_alphabets(target, tokens):
    free = tokens[:, target.free_positions]
    return target.allowed.gather(1, free.T).T.all(-1)


def count_a(d, x):
    return (x[..., d.free_positions] == d.mlm.vocab.index("A")).sum(-1).double()


def pyro_joint(model, values):
    """Pyro's own normalised joint over the given latent values (one dict per state)."""
    logp = torch.stack(
        [poutine.trace(poutine.condition(model, data=v)).get_trace().log_prob_sum().double() for v in values]
    )
    return torch.softmax(logp, 0)


def with_factor(d, handler=None):
    """x ~ d (under ``handler``), and a factor on x's count of A."""

    def model():
        if handler is None:
            x = pyro.sample("x", d)
        else:
            with handler():
                x = pyro.sample("x", d)
        pyro.factor("f", 0.8 * count_a(d, x))

    return model


# ---------------------------------------------------------------------- (a) the density
def test_log_prob_is_the_mlm_term_plus_the_weighted_expert_on_feasible_states(mlm, d, bare, states):
    feasible, value = by_hand(mlm, states)
    assert int(feasible.sum()) == 10
    lp = d.log_prob(states)  # validate_args: infeasible values are values of density 0, not errors
    expected = bare.log_prob(states) + WEIGHT * value
    torch.testing.assert_close(lp[feasible], expected[feasible], atol=1e-12, rtol=0)
    assert bool(torch.isneginf(lp[~feasible]).all())
    assert torch.equal(d.forbidden(states), ~feasible)  # the rules alone
    assert torch.equal(in_alphabets(d, states).sum(), torch.tensor(18))
    assert torch.equal(d.allowed.sum(-1), torch.tensor([3, 3, 2]))
    assert torch.equal(bare.allowed, bare.ordinary_mask.expand(3, -1)) and not bare.forbidden(states).any()
    # a kernel's evaluation carries the same log-factor
    ev = d.evaluate(states)
    torch.testing.assert_close(-ev.energy / T + ev.log_factor, lp, atol=1e-12, rtol=0)


def test_an_infeasible_value_costs_no_forward_pass(mlm, d, states, monkeypatch):
    feasible, _ = by_hand(mlm, states)
    rows = []
    real = mlm.logits_at
    monkeypatch.setattr(mlm, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real(ids, attn, q))
    assert bool(torch.isneginf(d.log_prob(states[~feasible])).all()) and not rows
    d.log_prob(states[feasible][:2])
    assert sum(rows) > 0


def test_batches_expand_plates_and_pickling_keep_the_constraints(mlm, d, states):
    x = states[:6].reshape(2, 3, -1)
    lp = d.log_prob(x)
    assert lp.shape == (2, 3) and torch.equal(lp.reshape(-1), d.log_prob(states[:6]))
    expanded = d.expand((4,))
    assert expanded.constraints is d.constraints and expanded.log_prob(states[0]).shape == (4,)
    torch.testing.assert_close(expanded.log_prob(states[:1]), d.log_prob(states[:1]).expand(4))
    again = pickle.loads(pickle.dumps(d))
    assert again.constraints.spec.to_dict() == d.constraints.spec.to_dict()
    assert torch.equal(again.log_prob(states), d.log_prob(states))  # -inf where it was, the same elsewhere
    assert "constraints=ConstraintSpec(['no-e', 'last', 'no-dc-da', 'hydropathy']" in repr(d)

    def plated():
        with pyro.plate("seqs", 2):
            pyro.sample("x", d, obs=states[[0, 5]])

    trace = poutine.trace(plated).get_trace()
    trace.compute_log_prob()
    assert torch.equal(trace.nodes["x"]["log_prob"], d.log_prob(states[[0, 5]]))


def test_sample_draws_feasible_sequences(d):
    options = dict(seed=2, num_steps=6)
    x = MaskedLMDistribution(d.mlm, TEMPLATE, constraints=spec(), sampler_options=options).sample((12,))
    assert x.shape == (12, 7) and bool(d.constraints.feasible(x).all())


# ---------------------------------------------------------------------- (b) exact kernels
KERNELS = [
    ("mh", dict(scan="random")),
    ("mh", dict(scan="left_to_right", block_size=2)),
    ("surrogate-mh", dict(inner_steps=2)),
]
IDS = [f"{k}-{'-'.join(map(str, o.values()))}" for k, o in KERNELS]


@pytest.mark.parametrize("kernel, options", KERNELS, ids=IDS)
def test_mlm_kernel_leaves_pyros_constrained_joint_invariant(d, bare, states, kernel, options):
    model = with_factor(d)
    pi = pyro_joint(model, [{"x": s} for s in states])
    k = MLMKernel(model, kernel=kernel, seed=0, **options)
    k.setup(0)
    P = exact.transition_matrix(k.kernel, states)
    torch.testing.assert_close(P.sum(1), torch.ones(len(pi), dtype=P.dtype), atol=1e-12, rtol=0)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    feasible = pi > 0
    assert int(feasible.sum()) == 10 and float(P[feasible][:, ~feasible].abs().max()) == 0.0
    unconstrained = pyro_joint(with_factor(bare), [{"x": s} for s in states])  # the check has power
    assert exact.total_variation(pi, unconstrained) > 0.1


HANDLERS = {"scale 2.5": lambda: poutine.scale(scale=2.5), "mask False": lambda: poutine.mask(mask=False)}


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("which", ["MLMKernel", "MLMGibbs"])
def test_scale_and_mask_act_on_the_whole_constrained_term_as_pyro_scores_it(d, states, handler, which):
    """poutine.scale(s) multiplies the site's whole log_prob, experts included (-inf stays -inf);
    poutine.mask(False) drops it, rules included: Pyro's joint then has every state."""
    model = with_factor(d, HANDLERS[handler])
    pi = pyro_joint(model, [{"x": s} for s in states])
    k = (MLMKernel if which == "MLMKernel" else MLMGibbs)(model, seed=0)
    k.setup(0)
    token_kernel = k.kernel if which == "MLMKernel" else k.site_kernel("x")
    P = exact.transition_matrix(token_kernel, states)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    plain = pyro_joint(with_factor(d), [{"x": s} for s in states])
    assert exact.total_variation(plain, pi) > 0.02  # the handler changes the law: the check has power
    if handler == "mask False":
        assert bool((pi > 0).all()) and bool(in_alphabets(token_kernel.target, states).all())


def test_mlm_gibbs_beside_a_discrete_site_leaves_the_exact_posterior_invariant(d, states):
    """z ~ Bernoulli(0.3); x ~ d (constrained); y ~ Normal(z + count_a(x) / 2, 0.5)."""
    y = torch.tensor([1.4, 1.1], dtype=torch.float64)

    def model():
        z = pyro.sample("z", pdist.Bernoulli(torch.tensor(0.3, dtype=torch.float64)))
        x = pyro.sample("x", d)
        with pyro.plate("data", len(y)):
            pyro.sample("y", pdist.Normal(z + 0.5 * count_a(d, x), 0.5), obs=y)

    kernel = MLMGibbs(NUTS(model), seed=0)
    kernel.setup(0)
    post = pyro_joint(model, [{"z": z, "x": s} for z in kernel.discrete_support("z") for s in states])
    P = gibbs_iteration_matrix(kernel, states)
    assert float((post @ P - post).abs().max()) < 1e-10
    assert int((post > 0).sum()) == 20 and float(P[post > 0][:, post == 0].abs().max()) == 0.0


def test_mlm_gibbs_keeps_the_sites_constraints_in_its_refreshed_log_factor(d):
    """Beside a continuous site, the token state's log-factor is refreshed before each update: the
    rest of the model at the new w plus the site's own constraint factor (not the rest alone)."""

    def model():
        w = pyro.sample("w", pdist.Normal(0.0, 1.0))
        pyro.sample("x", d)
        pyro.factor("f", w)

    kernel = MLMGibbs(NUTS(model), seed=0)
    mcmc = MCMC(kernel, num_samples=5, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    state = kernel.site_state("x")
    w = mcmc.get_samples()["w"][-1].double()
    expected = pdist.Normal(0.0, 1.0).log_prob(w).double() + w + d.log_factor(state.tokens)
    torch.testing.assert_close(state.log_factor.double(), expected, atol=1e-5, rtol=0)
    assert float(d.log_factor(state.tokens)) != 0.0


# ---------------------------------------------------------------------- (c) proposals and passes
def test_proposals_stay_in_the_alphabets_and_a_broken_pattern_costs_no_forward(d, monkeypatch):
    model = with_factor(d)
    proposed, rows = [], []
    real_forbidden, real_evaluate = d.forbidden, d.evaluate
    monkeypatch.setattr(d, "forbidden", lambda x: proposed.append(x.clone()) or real_forbidden(x))
    monkeypatch.setattr(d, "evaluate", lambda x, *a, **k: rows.append(x.shape[0]) or real_evaluate(x, *a, **k))
    kernel = MLMKernel(model, num_chains=16, seed=4)
    mcmc = MCMC(kernel, num_samples=25, warmup_steps=0, disable_progbar=True)
    mcmc.run()
    stats = kernel.draw_stats[-1]
    proposals = torch.cat(proposed)
    assert len(proposals) > 100 and bool(in_alphabets(d, proposals).all())
    assert sum(rows) == 16 + int(stats["evaluated"].sum())  # the starts, then one pass per evaluated proposal
    killed = int((~stats["evaluated"] & (stats["acceptance_rate"] == 0)).sum())  # changed, broke the rule, unrun
    assert killed > 0 and not bool((stats["is_accepted"] & ~stats["evaluated"] & (stats["acceptance_rate"] == 0)).any())
    draws = mcmc.get_samples()["x"]
    assert bool(d.constraints.feasible(draws).all())


@pytest.mark.parametrize(
    "rules, ok",
    [(RULES[:2], True), (RULES, False)],
    ids=["alphabets alone", "a pattern too"],
)
def test_pseudo_gibbs_takes_a_spec_of_alphabets_alone(mlm, rules, ok):
    d = MaskedLMDistribution(mlm, TEMPLATE, constraints=ConstraintSpec(rules))
    kernel = MLMKernel(lambda: pyro.sample("x", d), kernel="pseudo-gibbs", seed=0)
    if not ok:
        with pytest.raises(ValueError, match="pseudo-gibbs would ignore the log-factor"):
            kernel.setup(0)
        return
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=0, disable_progbar=True)
    mcmc.run()
    assert bool(in_alphabets(d, mcmc.get_samples()["x"]).all())


# ---------------------------------------------------------------------- (d) starts
def test_infeasible_fills_are_repaired_and_no_draw_breaks_a_rule(d):
    # MLMKernel, 16 batched chains, the default fill (init="sample"): several fills break the pattern
    fills = fill_template(d, 16, chain_streams(7, 0, 16), "sample")
    assert not bool(d.constraints.feasible(fills).all())
    kernel = MLMKernel(with_factor(d), num_chains=16, seed=7)
    mcmc = MCMC(kernel, num_samples=10, warmup_steps=0, disable_progbar=True)
    mcmc.run()
    assert bool(d.constraints.feasible(kernel.initial_states[-1]).all())
    assert int((~d.constraints.feasible(mcmc.get_samples()["x"])).sum()) == 0
    # MLMGibbs beside a continuous site: the greedy fill ADCDD breaks "D[CA]"
    greedy = fill_template(d, 1, chain_streams(0, 0, 1), "greedy")
    assert d.mlm.decode(greedy) == ["ADCDD"] and not bool(d.constraints.feasible(greedy).any())

    def model():
        w = pyro.sample("w", pdist.Normal(0.0, 1.0))
        x = pyro.sample("x", d)
        pyro.factor("f", w * count_a(d, x))

    gibbs = MLMGibbs(NUTS(model), seed=0, init="greedy")
    mcmc = MCMC(gibbs, num_samples=10, warmup_steps=2, disable_progbar=True)
    mcmc.run()
    assert bool(d.constraints.feasible(gibbs.initial_states[-1]["x"][None]).all())
    assert int((~d.constraints.feasible(mcmc.get_samples()["x"])).sum()) == 0


def test_initial_params_that_break_a_rule_are_refused(d, states):
    kernel = MLMKernel(lambda: pyro.sample("x", d), seed=0)
    kernel.initial_params = {"x": states[~d.constraints.feasible(states)][0]}
    with pytest.raises(ValueError, match=r"the start of chain 0 breaks rule '(no-e|last|no-dc-da)'"):
        kernel.setup(0)


# ---------------------------------------------------------------------- the record
@pytest.mark.parametrize("which", ["MLMKernel", "MLMGibbs"])
def test_the_record_holds_the_rule_and_expert_functionals(d, which):
    model = with_factor(d)
    kernel = MLMKernel(model, num_chains=2, seed=1) if which == "MLMKernel" else MLMGibbs(model, seed=1)
    mcmc = MCMC(kernel, num_samples=6, warmup_steps=0, disable_progbar=True)
    mcmc.run()
    post = from_pyro(mcmc).posterior
    names = {"x_rule_no_e", "x_rule_last", "x_rule_no_dc_da", "x_feasible", "x_expert_hydropathy"}
    assert names <= set(post.data_vars)
    assert float(post["x_feasible"].min()) == 1.0
    tokens = torch.as_tensor(post["x"].values)
    C, D, L = tokens.shape
    values = d.constraints.expert_values(tokens.reshape(-1, L))["hydropathy"].reshape(C, D)
    torch.testing.assert_close(torch.as_tensor(post["x_expert_hydropathy"].values), values)


# ---------------------------------------------------------------------- (e) errors
MISFITS = {
    "position": (
        [Allowed("far", "AC", positions=[3])],
        "rule 'far': free position 3 is out of range; the template has 3 free",
    ),
    "token": ([Allowed("zed", "AZ")], "rule 'zed': token 'Z' is not in the vocabulary"),
    "empty alphabet": (
        [Allowed("only-e", "E", positions=[-1]), Allowed("no-e", "ACD")],
        "rule 'no-e' leaves free position 2 .* with no allowed token",
    ),
}


@pytest.mark.parametrize("case", MISFITS)
def test_a_spec_that_does_not_fit_the_template_fails_at_construction(mlm, case):
    rules, match = MISFITS[case]
    with pytest.raises(ValueError, match=match) as info:
        MaskedLMDistribution(mlm, TEMPLATE, constraints=ConstraintSpec(rules))
    assert "\n" not in str(info.value)
    if case == "position":  # the same rule fits a template with 4 free positions
        fits = MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK][MASK]", constraints=ConstraintSpec(rules))
        assert fits.allowed.sum(-1).tolist() == [4, 4, 4, 2]


def test_constraints_must_be_a_spec(mlm):
    with pytest.raises(TypeError, match=re.escape("constraints must be a ConstraintSpec")):
        MaskedLMDistribution(mlm, TEMPLATE, constraints="spec.toml")


def test_a_spec_that_depends_on_another_latent_site_is_refused(mlm):
    loose = MaskedLMDistribution(mlm, TEMPLATE, constraints=ConstraintSpec(RULES[:1]))
    tight = MaskedLMDistribution(mlm, TEMPLATE, constraints=spec())

    def model():
        z = pyro.sample("z", pdist.Bernoulli(0.5))
        pyro.sample("x", tight if bool(z) else loose)

    kernel = MLMGibbs(model, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="site 'x' changed with the values of other latent sites.*constraints"):
            MCMC(kernel, num_samples=3, warmup_steps=0, disable_progbar=True).run()

    def rebuilt():  # the same spec built anew at every run of the model is the same spec
        pyro.sample("z", pdist.Bernoulli(0.5))
        pyro.sample("x", MaskedLMDistribution(mlm, TEMPLATE, constraints=spec()))

    MCMC(MLMGibbs(rebuilt, seed=0), num_samples=3, warmup_steps=0, disable_progbar=True).run()


def test_a_spec_with_no_file_form_rebuilt_in_the_model_is_told_to_be_built_once(mlm):
    """A spec built inside the model with a lambda expert cannot be compared with the last run's:
    the error said its constraints depend on other latent sites; now it says what to do."""
    from mlm_ppl.models.constraints import Expert

    def lambda_spec():
        return ConstraintSpec(RULES, [Expert("count", lambda seqs: [float(s.count("A")) for s in seqs], -0.5)])

    def rebuilt():
        pyro.sample("z", pdist.Bernoulli(0.5))
        pyro.sample("x", MaskedLMDistribution(mlm, TEMPLATE, constraints=lambda_spec()))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="site 'x' is built anew at each run.*build the spec once") as err:
            MCMC(MLMGibbs(rebuilt, seed=0), num_samples=3, warmup_steps=0, disable_progbar=True).run()
    assert "other latent sites (its template" not in str(err.value) and "expert 'count'" in str(err.value)

    once = MaskedLMDistribution(mlm, TEMPLATE, constraints=lambda_spec())

    def built_once():
        pyro.sample("z", pdist.Bernoulli(0.5))
        pyro.sample("x", once)

    MCMC(MLMGibbs(built_once, seed=0), num_samples=3, warmup_steps=0, disable_progbar=True).run()
