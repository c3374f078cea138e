"""Per-chain random streams: a chain's draws depend only on (seed, chain index)."""

import pytest
import torch

from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import ChainStreams, chain_seed, make_kernel, run_chains

TEMPLATE = "A[MASK]C[MASK][MASK]"


def test_each_row_is_its_chains_own_stream():
    both = ChainStreams(5, [3, 7])
    alone = [ChainStreams(5, [3]), ChainStreams(5, [7])]
    for _ in range(3):
        u = both.rand((2, 4))
        assert torch.equal(u[0], alone[0].rand((1, 4))[0]) and torch.equal(u[1], alone[1].rand((1, 4))[0])
        probs = torch.rand(2, 3, 6)
        picks = both.categorical(probs)
        assert picks.shape == (2, 3)
        assert torch.equal(picks[1], alone[1].categorical(probs[1:])[0])
        alone[0].categorical(probs[:1])
    assert len({chain_seed(0, c) for c in range(100)} | {chain_seed(1, c) for c in range(100)}) == 200
    assert chain_seed(-1, 0) == chain_seed(2**64 - 1, 0)  # torch's seed range, as one non-negative int


def test_states_round_trip_and_bad_states_are_refused():
    s = ChainStreams(1, 3)
    s.rand((3, 2))
    saved = s.get_state()
    expected = s.rand((3, 5))
    restored = ChainStreams(99, 3)
    restored.set_state(saved)
    assert torch.equal(restored.rand((3, 5)), expected)
    with pytest.raises(ValueError, match="do not fit 3 chains"):
        restored.set_state(saved[:2])
    with pytest.raises(ValueError, match="leading dimension"):
        s.rand((2, 5))
    with pytest.raises(ValueError, match="chain index"):
        ChainStreams(0, [-1])


@pytest.mark.parametrize("kernel", ["mh", "surrogate-mh", "replica-mh", "pseudo-gibbs", "mask-predict"])
def test_a_chain_draws_the_same_beside_any_number_of_chains(tiny4_64, kernel):
    """Chains 0-1 of a 4-chain run are a 2-chain run; chains [2, 3] run on their own are chains 2-3."""
    options = dict(replicas=3, p_swap=0.4) if kernel == "replica-mh" else {}  # exchanges and local steps per chain
    k = make_kernel(kernel, MaskedLMDistribution(tiny4_64, TEMPLATE), **options)
    four = run_chains(k, 4, 12, warmup_steps=3, thin=2, seed=11)
    two = run_chains(k, 2, 12, warmup_steps=3, thin=2, seed=11)
    last = run_chains(k, 2, 12, warmup_steps=3, thin=2, seed=11, chains=[2, 3])
    assert torch.equal(four.tokens[:2], two.tokens) and torch.equal(four.tokens[2:], last.tokens)
    assert torch.equal(four.initial[:2], two.initial)
    for name, values in four.stats.items():
        torch.testing.assert_close(values[:2], two.stats[name], equal_nan=True, msg=name)
        torch.testing.assert_close(values[2:], last.stats[name], equal_nan=True, msg=name)
    if kernel != "mask-predict":  # a deterministic decoder draws no random numbers
        other = run_chains(k, 2, 12, warmup_steps=3, thin=2, seed=12)
        assert not torch.equal(other.tokens, two.tokens)


def test_chain_indices_are_checked(tiny4):
    k = make_kernel("mh", MaskedLMDistribution(tiny4, TEMPLATE))
    with pytest.raises(ValueError, match="2 chain indices for num_chains=3"):
        run_chains(k, 3, 2, chains=[0, 1])
