import pickle

import pyro
import pyro.distributions as pdist
import pytest
import torch

from mlm_ppl import MaskedLMDistribution

TEMPLATE = "A[MASK]C[MASK][MASK]"


@pytest.fixture(scope="module")
def dist(tiny4):
    return MaskedLMDistribution(tiny4, TEMPLATE, validate_args=True)


def test_log_prob_is_minus_energy_over_temperature(tiny4):
    seqs = ["ADCEE", "ACCDA"]
    x = tiny4.encode(seqs).input_ids
    for energy in ("norm", "raw"):
        for T in (1.0, 0.5):
            d = MaskedLMDistribution(tiny4, TEMPLATE, energy=energy, temperature=T)
            assert torch.allclose(d.log_prob(x), -tiny4.score(seqs, energy=energy) / T, atol=1e-5)


def test_shapes_and_pyro_flags(dist):
    assert dist.event_shape == (7,) and dist.batch_shape == ()
    assert not dist.has_enumerate_support
    assert dist.free_positions.tolist() == [2, 4, 5] and dist.num_free == 3
    x = dist.sample((2, 3))
    assert x.shape == (2, 3, 7) and x.dtype == torch.long
    assert dist.log_prob(x).shape == (2, 3)
    expanded = dist.expand((4,))
    assert expanded.batch_shape == (4,) and expanded.sample().shape == (4, 7)


def test_batch_shapes_under_a_plate(dist):
    def model():
        with pyro.plate("seqs", 3):
            return pyro.sample("x", dist)

    tr = pyro.poutine.trace(model).get_trace()
    site = tr.nodes["x"]
    assert site["value"].shape == (3, 7) and site["fn"].batch_shape == (3,)
    tr.compute_log_prob()
    assert site["log_prob"].shape == (3,)
    one = dist.template.clone()
    one[dist.free_positions] = dist.template[1]  # a complete state: the fixed token "A" everywhere
    expanded = dist.expand([3])
    assert expanded.log_prob(one).shape == (3,)  # broadcast over the batch, as Pyro's Trace_ELBO checks
    assert torch.allclose(expanded.log_prob(one), dist.log_prob(one).expand(3))


def test_sample_is_reproducible_with_pyro_seed(dist):
    pyro.set_rng_seed(3)
    a = dist.sample((2,))
    pyro.set_rng_seed(3)
    b = dist.sample((2,))
    assert torch.equal(a, b)
    fixed = ~dist.free
    assert (a[:, fixed] == dist.template[fixed]).all()
    options = dict(seed=1, num_steps=5, scan="left_to_right")
    first = MaskedLMDistribution(dist.mlm, TEMPLATE, sampler_options=options).sample((2,))
    assert torch.equal(MaskedLMDistribution(dist.mlm, TEMPLATE, sampler_options=options).sample((2,)), first)


def test_validation_rejects_values_outside_the_support(dist, tiny4):
    good = tiny4.encode(["ADCEE"]).input_ids[0]
    bad_fixed = good.clone()
    bad_fixed[1] = tiny4.vocab.index("E")
    with pytest.raises(ValueError, match="fixed position"):
        dist.log_prob(bad_fixed)
    partial = good.clone()
    partial[2] = tiny4.mask_id  # a partial sequence: named as such, with what to do instead
    with pytest.raises(ValueError, match="mask token at 1 free position.*put the known tokens into the template"):
        dist.log_prob(partial)
    bad_special = good.clone()
    bad_special[2] = tiny4.pad_id
    with pytest.raises(ValueError, match="special token"):
        dist.log_prob(bad_special)
    with pytest.raises(TypeError, match="torch.long"):
        dist.log_prob(good.float())
    with pytest.raises(ValueError, match="event_shape|event shape"):
        dist.log_prob(good[:5])


def test_pickling_round_trip(dist, tiny4):
    x = tiny4.encode(["ADCEE"]).input_ids
    again = pickle.loads(pickle.dumps(dist))
    assert torch.equal(again.template, dist.template) and again.energy_name == dist.energy_name
    assert torch.allclose(again.log_prob(x), dist.log_prob(x), atol=1e-6)


@pytest.mark.parametrize(
    "template, kwargs, error, match",
    [
        ("ACDE", {}, ValueError, "no free position"),
        ("A" * 70 + "[MASK]", {}, ValueError, "at most 64"),
        ("A[MASK]", dict(temperature=0), ValueError, "temperature must be > 0"),
        ("A[MASK]", dict(energy="nrom"), ValueError, "unknown energy"),
        ("A[MASK]B", {}, ValueError, "character 'B'"),
        (torch.tensor([2.0, 4.0]), {}, TypeError, "1-D torch.long"),
        (42, {}, TypeError, "template must be a string"),
    ],
)
def test_bad_templates(tiny4, template, kwargs, error, match):
    with pytest.raises(error, match=match):
        MaskedLMDistribution(tiny4, template, **kwargs)


def test_template_as_ids_and_with_esm_mask(tiny_models):
    esm, _ = tiny_models["esm"]
    d = MaskedLMDistribution(esm, "MK<mask>L<mask>")
    assert d.num_free == 2
    same = MaskedLMDistribution(esm, d.template)
    assert torch.equal(same.template, d.template)
    assert isinstance(d, pdist.TorchDistribution)


def test_the_unnormalised_log_prob_cannot_compare_temperatures():
    """docs/pyro.md's demonstration: at the T=1 mode, T=2 scores 10.7 nats 'better' unnormalised,
    while normalised it is 0.74 nats worse. Only sequences of one distribution compare."""
    from mlm_ppl.inference import exact
    from mlm_ppl.testing import tiny_residue_bert

    mlm = tiny_residue_bert("ACDE", seed=1, dtype=torch.float64)
    cold, warm = (MaskedLMDistribution(mlm, TEMPLATE, temperature=T) for T in (1.0, 2.0))
    states = exact.enumerate_states(cold)
    mode = exact.exact_log_probs(cold, states).argmax()
    x = states[mode]
    unnormalised = float(warm.log_prob(x) - cold.log_prob(x))
    normalised = float(exact.exact_log_probs(warm, states)[mode] - exact.exact_log_probs(cold, states)[mode])
    assert unnormalised == pytest.approx(10.725, abs=1e-3) and normalised == pytest.approx(-0.738, abs=1e-3)
