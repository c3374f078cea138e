"""Trans-dimensional MH over a variable gap (GapJump): exact by enumeration on a tiny float64 model."""

import pytest
import torch

from exactness import check_fit
from mlm_ppl.inference import exact
from mlm_ppl.inference.exact import enumerate_states
from mlm_ppl.inference.jump import GapJump
from mlm_ppl.inference.streams import ChainStreams
from mlm_ppl.models.gap_target import GapTarget
from mlm_ppl.models.gaps import LengthPrior, parse_gap

GAP = "A[MASK]{1,3}C"  # loops of 1 to 3 residues over A, C, D, E: 4 + 16 + 64 = 84 states


@pytest.fixture(scope="module")
def jump(tiny4_64):
    gap = parse_gap(GAP, "[MASK]")
    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    # unequal move probabilities: with p_insert = p_delete their ratio is 1, and swapping them in the
    # Hastings ratio went unseen
    return GapJump(GapTarget(tiny4_64, gap, prior, temperature=2.0), p_update=0.2, p_insert=0.5, p_delete=0.3)


def test_one_step_leaves_the_target_on_the_union_of_lengths_invariant(jump):
    P = jump.exact_matrix()
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
    flat = GapJump(GapTarget(tiny4_64, GAP, LengthPrior({1: 1 / 3, 2: 1 / 3, 3: 1 / 3}, "u"), temperature=2.0))  # Z_L
    z = {L: float(flat.exact_log_probs().exp()[lengths == L].sum()) for L in (1, 2, 3)}
    expected = torch.tensor([w * z[L] for L, w in jump.target.prior.weights.items()], dtype=torch.float64)
    expected /= expected.sum()
    got = torch.stack([pi[lengths == L].sum() for L in (1, 2, 3)])
    assert torch.allclose(got, expected, atol=1e-12)


@pytest.mark.slow
def test_the_step_draws_each_move_from_its_matrix_row(tiny4_64):
    """6000 single steps from the length-2 state that moves most (insert, delete and update all
    possible): independent draws of the next state; those of each move follow that move's exact
    row (its proposal and its ratio, checked one by one: in the whole row a wrong insert ratio hid
    in a 0.92 diagonal). Temperature 20: the tiny model's energies (17 to 30 nats) refuse most
    jumps at lower temperatures."""
    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    jump = GapJump(GapTarget(tiny4_64, GAP, prior, temperature=20.0))
    M = jump.move_matrices()
    states = jump.states()
    jumps = M["insert"] + M["delete"]
    start = min((i for i, (L, _) in enumerate(states) if L == 2), key=lambda i: float(jumps[i, i]))
    assert float(M["insert"][start, start]) < 0.5 and float(M["delete"][start, start]) < 0.95
    L0, x0 = states[start]
    state = jump.init_chain(L0, x0[None])
    key = {(L, tuple(s.tolist())): i for i, (L, s) in enumerate(states)}
    streams = ChainStreams(11, 1)
    counts = {move: torch.zeros(len(states), dtype=torch.float64) for move in M}
    for _ in range(6000):
        new, move, _, _ = jump.step_chain(state, streams)
        counts[move][key[(new.length, tuple(new.mh.tokens[0].tolist()))]] += 1
    for move, c in counts.items():
        assert c.sum() > 1200, move
        check_fit(M[move][start], c)


def test_bad_moves_and_priors_are_refused(tiny4_64):
    gap = parse_gap(GAP, "[MASK]")
    target = GapTarget(tiny4_64, gap)
    with pytest.raises(ValueError, match=r"p_delete must lie in \(0, 1\]"):
        GapJump(target, p_update=0.5, p_insert=0.5, p_delete=0.0)
    with pytest.raises(ValueError, match="must sum to 1"):
        GapJump(target, p_update=0.5, p_insert=0.4, p_delete=0.4)
    with pytest.raises(ValueError, match="outside the gap's 1..3"):
        GapTarget(tiny4_64, gap, LengthPrior({4: 1.0}, "bad"))
    with pytest.raises(ValueError, match=r"lengths \[1, 3\] have a hole: a chain moves one length at a time"):
        GapTarget(tiny4_64, gap, LengthPrior({1: 0.5, 3: 0.5}, "holed"))
    with pytest.raises(ValueError, match="more than the model accepts"):  # at construction, before any length
        GapTarget(tiny4_64, "A[MASK]{1,600}C")
    with pytest.raises(ValueError, match="more than the model accepts"):  # a parsed gap too: check_fits first
        GapTarget(tiny4_64, parse_gap("A[MASK]{1,600}C", "[MASK]"))
    with pytest.raises(ValueError, match="has no variable gap"):
        GapTarget(tiny4_64, "A[MASK]C")


def test_kernels_that_keep_the_length_refuse_a_variable_gap_and_gap_jump_a_fixed_template(tiny4_64):
    from mlm_ppl import MaskedLMDistribution
    from mlm_ppl.inference.registry import KERNELS, make_kernel

    target = GapTarget(tiny4_64, GAP)
    movers = {name for name, cls in KERNELS.items() if cls.capabilities.lengths}
    assert movers == {"gap-jump", "surrogate-mh"}  # surrogate-MH around gap-jump's moves
    for name in set(KERNELS) - movers:
        with pytest.raises(ValueError, match="use kernel='gap-jump', or 'surrogate-mh' around its moves"):
            make_kernel(name, target)
    with pytest.raises(ValueError, match="give it a GapTarget"):
        make_kernel("gap-jump", MaskedLMDistribution(tiny4_64, "A[MASK]C"))


def test_padded_states_round_trip_and_evaluate_at_their_own_length(tiny4_64):
    target = GapTarget(tiny4_64, GAP, temperature=2.0)
    for L in (1, 2, 3):
        states = enumerate_states(target.target(L))
        padded = target.pad(states, L)
        assert padded.shape[1] == target.base.template.numel()
        assert torch.equal(target.length_of(padded), torch.full((len(states),), L))
        assert torch.equal(target.unpad(padded, L), states)
        target.validate_tokens(padded)
        ev, own = target.evaluate(padded), target.target(L).evaluate(states)
        assert torch.equal(ev.energy, own.energy)
        assert torch.allclose(
            ev.log_factor.double(), torch.full((len(states),), target.log_prior(L), dtype=torch.float64)
        )
        assert torch.equal(ev.cond_logits[:, target.free_index(L)], own.cond_logits)
    bad = target.pad(enumerate_states(target.target(1))[:1], 1)
    bad[0, target.gap_slots[0]], bad[0, target.gap_slots[1]] = target.pad_id, bad[0, 1]  # a pad before a residue
    with pytest.raises(ValueError, match="pad token before a residue"):
        target.validate_tokens(bad)


def test_run_chains_of_the_registered_kernel_is_the_one_chain_step_chain_by_chain(tiny4_64):
    """What the command line runs (``run_chains`` of the batched kernel, padded states) equals the
    one-chain step tested exactly above, replayed chain by chain from each chain's own stream and
    start: the same states, lengths, moves and acceptances at every step."""
    from mlm_ppl.inference.base import initial_tokens
    from mlm_ppl.inference.jump import MOVES
    from mlm_ppl.inference.runner import run_chains

    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    jump = GapJump(GapTarget(tiny4_64, GAP, prior, temperature=2.0), p_update=0.4, p_insert=0.3, p_delete=0.3)
    target = jump.target
    run = run_chains(jump, 3, 40, seed=5)
    assert run.tokens.shape == (3, 40, target.base.template.numel())
    streams = ChainStreams(5, 3)
    start = initial_tokens(jump, 3, streams, "sample")
    assert torch.equal(run.initial, start) and target.length_of(start).tolist() == [3, 2, 1]  # spread over lengths
    for c in range(3):
        state = jump.chain(jump.init(start[c : c + 1]), 0)
        own = streams.subset([c])
        for d in range(40):
            state, move, ok, prob = jump.step_chain(state, own)
            assert torch.equal(target.pad(state.mh.tokens, state.length)[0], run.tokens[c, d])
            assert int(run.stats["length"][c, d]) == state.length and MOVES[int(run.stats["move"][c, d])] == move
            assert bool(run.stats["is_accepted"][c, d]) == ok
            assert float(run.stats["acceptance_rate"][c, d]) == pytest.approx(prob)
    lengths = set(run.stats["length"].flatten().tolist())
    moves = set(run.stats["move"][run.stats["is_accepted"]].flatten().tolist())
    assert lengths == {1, 2, 3} and moves == {0, 1, 2}  # the replay covered every length and move


def test_chains_start_at_lengths_spread_from_the_longest_to_the_shortest(tiny4_64):
    """Chain 0 at the longest length, the last at the shortest, the others evenly between (by hand:
    gap 8..20 with 4 chains starts at 20, 16, 12, 8); each start is its length's own fill, padded
    (the constrained case is tests/cli/test_cli_jump.py's: starts repaired at their lengths)."""
    from mlm_ppl.inference.base import fill_gap, fill_template, start_lengths

    wide = GapTarget(tiny4_64, "A[MASK]{8,20}C")
    assert start_lengths(wide, 4) == [20, 16, 12, 8] and start_lengths(wide, 1) == [20]
    assert start_lengths(wide, 2) == [20, 8] and start_lengths(wide, 13) == list(range(20, 7, -1))
    target = GapTarget(tiny4_64, GAP, LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test"))
    assert start_lengths(target, 5) == [3, 3, 2, 1, 1]
    tokens = fill_gap(target, 3, ChainStreams(2, 3))
    streams = ChainStreams(2, 3)
    for c, L in enumerate([3, 2, 1]):
        own = fill_template(target.target(L), 1, streams.subset([c]))
        assert torch.equal(tokens[c : c + 1], target.pad(own, L))


def test_sample_runs_a_variable_gap_with_gap_jump_and_refuses_it_otherwise(tiny4):
    import mlm_ppl

    prior = LengthPrior({1: 0.5, 2: 0.5}, "test")
    run = mlm_ppl.sample(tiny4, GAP, kernel="gap-jump", length_prior=prior, num_chains=2, num_samples=5, seed=1)
    assert run.attrs["length_prior"] == {"1": 0.5, "2": 0.5} and run.tokens.shape == (2, 5, 6)
    assert set(run.stats["length"].flatten().tolist()) <= {1, 2}
    with pytest.raises(ValueError, match="give --length-mode jump .*kernel gap-jump or surrogate-mh"):
        mlm_ppl.sample(tiny4, GAP, num_chains=1, num_samples=1)
    with pytest.raises(ValueError, match="length_prior .* apply to one template with a variable gap"):
        mlm_ppl.sample(tiny4, "A[MASK]C", length_prior=prior, num_chains=1, num_samples=1)


def test_a_constrained_variable_gap_is_exact_and_reads_each_state_at_its_length(tiny4_64):
    """A spec bound to each length (a rule at the loop's last residue, counted from the end; a
    forbidden pair; an expert on the sequence): the one-step matrix leaves pi(L) exp(-E/T + f_L)
    invariant, forbidden states get no mass, and the rules read padded states at their own length."""
    from mlm_ppl.inference.starts import rule_violations
    from mlm_ppl.models.constraints import Allowed, ConstraintSpec, Expert, Forbid

    spec = ConstraintSpec(
        [Allowed("last", "CD", positions=(-1,)), Forbid("no-dd", "DD")],
        [Expert("es", lambda seqs: [float(s.count("E")) for s in seqs], weight=0.5)],
    )
    prior = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
    target = GapTarget(tiny4_64, GAP, prior, temperature=2.0, constraints=spec)
    jump = GapJump(target, p_update=0.2, p_insert=0.5, p_delete=0.3)
    P, pi = jump.exact_matrix(), jump.exact_log_probs().exp()
    assert float((pi @ P - pi).abs().max()) < 1e-10
    padded = torch.cat([target.pad(s[None], L) for L, s in jump.states()])
    loops = [tiny4_64.decode(s[None])[0][1:-1] for _, s in jump.states()]
    broken = [loop[-1] not in "CD" or "DD" in loop for loop in loops]
    assert torch.equal(pi == 0, torch.tensor(broken)) and sum(broken) < len(broken)
    found = rule_violations(target, padded)
    assert torch.equal(found["last"] | found["no-dd"], torch.tensor(broken))
    assert torch.equal(target.constraints.feasible(padded), ~torch.tensor(broken))
    es = target.constraints.expert_values(padded)["es"]
    assert es.tolist() == [float(loop.count("E")) for loop in loops]
