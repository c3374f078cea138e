"""Trans-dimensional MH over a variable gap (GapJump): exact by enumeration on a tiny float64 model."""

import pytest
import torch

from exactness import check_fit
from mlm_ppl.inference import exact
from mlm_ppl.inference.jump import GapJump
from mlm_ppl.inference.streams import ChainStreams
from mlm_ppl.models.gaps import LengthPrior, parse_gap

GAP = "A[MASK]{1,3}C"  # loops of 1 to 3 residues over A, C, D, E: 4 + 16 + 64 = 84 states


@pytest.fixture(scope="module")
def jump(tiny4_64):
    gap = parse_gap(GAP, "[MASK]")
    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    # unequal move probabilities: with p_insert = p_delete their ratio is 1, and swapping them in the
    # Hastings ratio went unseen
    return GapJump(tiny4_64, gap, prior, temperature=2.0, p_update=0.2, p_insert=0.5, p_delete=0.3)


def test_one_step_leaves_the_target_on_the_union_of_lengths_invariant(jump):
    P = jump.transition_matrix()
    pi = jump.exact_log_probs().exp()
    assert P.shape == (84, 84) and torch.allclose(P.sum(1), torch.ones(84, dtype=torch.float64), atol=1e-12)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    # and it moves between lengths: the chain is irreducible, its stationary law is the target's
    lengths = torch.tensor([L for L, _ in jump.states()])
    assert float(P[lengths == 2][:, lengths == 3].sum()) > 0 and float(P[lengths == 2][:, lengths == 1].sum()) > 0
    assert exact.total_variation(exact.stationary_distribution(P), pi) < 1e-8


def test_the_length_prior_weighs_the_lengths(tiny4_64, jump):
    """The length marginal is pi(L) Z_L / sum pi Z: the prior times each length's own mass."""
    pi = jump.exact_log_probs().exp()
    lengths = torch.tensor([L for L, _ in jump.states()])
    flat = GapJump(tiny4_64, jump.gap, LengthPrior({1: 1 / 3, 2: 1 / 3, 3: 1 / 3}, "u"), temperature=2.0)  # Z_L
    z = {L: float(flat.exact_log_probs().exp()[lengths == L].sum()) for L in (1, 2, 3)}
    expected = torch.tensor([w * z[L] for L, w in jump.prior.weights.items()], dtype=torch.float64)
    expected /= expected.sum()
    got = torch.stack([pi[lengths == L].sum() for L in (1, 2, 3)])
    assert torch.allclose(got, expected, atol=1e-12)


def test_the_step_draws_each_move_from_its_matrix_row(tiny4_64):
    """6000 single steps from the length-2 state that moves most (insert, delete and update all
    possible): independent draws of the next state; those of each move follow that move's exact
    row (its proposal and its ratio, checked one by one: in the whole row a wrong insert ratio hid
    in a 0.92 diagonal). Temperature 20: the tiny model's energies (17 to 30 nats) refuse most
    jumps at lower temperatures."""
    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    jump = GapJump(tiny4_64, parse_gap(GAP, "[MASK]"), prior, temperature=20.0)
    M = jump.move_matrices()
    states = jump.states()
    jumps = M["insert"] + M["delete"]
    start = min((i for i, (L, _) in enumerate(states) if L == 2), key=lambda i: float(jumps[i, i]))
    assert float(M["insert"][start, start]) < 0.5 and float(M["delete"][start, start]) < 0.95
    L0, x0 = states[start]
    state = jump.init(L0, x0[None])
    key = {(L, tuple(s.tolist())): i for i, (L, s) in enumerate(states)}
    streams = ChainStreams(11, 1)
    counts = {move: torch.zeros(len(states), dtype=torch.float64) for move in M}
    for _ in range(6000):
        new, move, _ = jump.step(state, streams)
        counts[move][key[(new.length, tuple(new.mh.tokens[0].tolist()))]] += 1
    for move, c in counts.items():
        assert c.sum() > 1200, move
        check_fit(M[move][start], c)


def test_bad_moves_and_priors_are_refused(tiny4_64):
    gap = parse_gap(GAP, "[MASK]")
    with pytest.raises(ValueError, match="must each be > 0 and sum to 1"):
        GapJump(tiny4_64, gap, LengthPrior.uniform(gap), p_update=0.5, p_insert=0.5, p_delete=0.0)
    with pytest.raises(ValueError, match="outside the gap's 1..3"):
        GapJump(tiny4_64, gap, LengthPrior({4: 1.0}, "bad"))
    with pytest.raises(ValueError, match=r"lengths \[1, 3\] have a hole: a chain moves one length at a time"):
        GapJump(tiny4_64, gap, LengthPrior({1: 0.5, 3: 0.5}, "holed"))
    long = parse_gap("A[MASK]{1,600}C", "[MASK]")
    with pytest.raises(ValueError, match="accepts at most"):  # at construction, not when a chain gets there
        GapJump(tiny4_64, long, LengthPrior.uniform(long))
