"""Gap-jump's run moves (a run of k residues inserted or deleted in one step): exact by enumeration
on a tiny float64 model, the kernel's steps drawn from the exact rows, in gap-jump and inside
surrogate-MH, refused at the bounds, and their options checked."""

import json

import pytest
import torch

from exactness import check_fit, tv_noise
from mlm_ppl.inference import ChainStreams, SurrogateMH, exact, run_chains
from mlm_ppl.inference.jump import MOVES, GapJump
from mlm_ppl.models.gap_target import GapTarget
from mlm_ppl.models.gaps import LengthPrior

GAP = "A[MASK]{1,3}C"  # loops of 1 to 3 residues over A, C, D, E: 4 + 16 + 64 = 84 states
PRIOR = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")
# unequal probabilities everywhere, so that a swapped pair in a Hastings ratio shows
RUNS = dict(p_update=0.05, p_insert=0.1, p_delete=0.05, p_insert_run=0.5, p_delete_run=0.3)


@pytest.fixture(scope="module")
def jump(tiny4_64):
    """Runs of 2 or 3 (3 never fits in lengths 1-3: refused), temperature 5 (at 2 most runs of 2
    from length 1 are accepted outright, and the rows would not test the ratio)."""
    return GapJump(GapTarget(tiny4_64, GAP, PRIOR, temperature=5.0), max_run=3, **RUNS)


@pytest.fixture(scope="module")
def matrices(jump):
    return jump.move_matrices()


def _lengths(jump):
    return torch.tensor([L for L, _ in jump.states()])


def test_the_run_moves_satisfy_detailed_balance_and_the_step_leaves_the_target_invariant(jump, matrices):
    """Each run move's matrix (given the move) is stochastic; the pair, weighed by its move
    probabilities, is reversible for pi(L) exp(-E/T) (one is the other's reverse), so the whole step
    is invariant; a run crosses from length 1 to 3 in one step (what single moves cannot)."""
    pi = jump.exact_log_probs().exp()
    assert list(matrices) == list(MOVES)
    for move in MOVES:
        assert torch.allclose(matrices[move].sum(1), torch.ones(84, dtype=torch.float64), atol=1e-12), move
    runs = RUNS["p_insert_run"] * matrices["insert_run"] + RUNS["p_delete_run"] * matrices["delete_run"]
    flow = pi[:, None] * runs
    assert float((flow - flow.T).abs().max()) < 1e-15
    P = jump.exact_matrix()
    assert float((pi @ P - pi).abs().max()) < 1e-12
    assert exact.total_variation(exact.stationary_distribution(P), pi) < 1e-8
    lengths = _lengths(jump)
    one, three = lengths == 1, lengths == 3
    assert float(runs[one][:, three].sum()) > 0.5 and float(runs[three][:, one].sum()) > 0.5
    single = jump.p_insert * matrices["insert"] + jump.p_delete * matrices["delete"]
    assert float(single[one][:, three].sum()) == 0.0
    # the runs' matrices (given the move) are 0 between lengths they do not join
    for move in ("insert_run", "delete_run"):
        assert float(matrices[move][one][:, lengths == 2].sum()) == 0.0


def test_a_run_past_a_bound_is_refused_and_leaves_the_state(jump, matrices):
    """At length 2 every run (2 or 3) leaves the lengths 1..3: both rows are the identity; at 1 a
    delete run and at 3 an insert run are; from 1 the runs of 3 (half the draws) are refused. The
    step returns the state it was given, not accepted, with acceptance probability 0."""
    lengths = _lengths(jump)
    for move, L in (("insert_run", 2), ("delete_run", 2), ("insert_run", 3), ("delete_run", 1)):
        rows = (lengths == L).nonzero().flatten()
        assert torch.equal(matrices[move][rows][:, rows], torch.eye(len(rows), dtype=torch.float64)), (move, L)
    ones = (lengths == 1).nonzero().flatten()
    assert bool((matrices["insert_run"][ones, ones] >= 0.5).all())
    states = jump.states()
    for L in (1, 2, 3):
        i = int((lengths == L).nonzero()[0])
        state = jump.init_chain(L, states[i][1][None])
        streams, seen = ChainStreams(3, 1), set()
        for _ in range(40):
            new, move, ok, prob = jump.step_chain(state, streams)
            if (move == "delete_run" and L < 3) or (move == "insert_run" and L > 1):
                assert new is state and not ok and prob == 0.0, (move, L)
                seen.add(move)
        assert seen == ({"insert_run", "delete_run"} if L == 2 else {"delete_run"} if L == 1 else {"insert_run"})


@pytest.mark.slow
@pytest.mark.parametrize("move, L", [("insert_run", 1), ("delete_run", 3)])
def test_the_step_draws_each_run_move_from_its_exact_row(jump, matrices, move, L):
    """Independent single steps from one fixed state (the one of its length whose run row moves
    most); the next states of the run move follow that move's exact row (its k, slot, order and fills,
    and the ratio). The steps are independent draws (no chain: N_eff = N), so the derived bound is
    the sampling noise alone; the row moves enough (off its diagonal, >= 0.3) for that noise (about
    0.06 at 1200 draws) to be small beside it."""
    lengths = _lengths(jump)
    rows = (lengths == L).nonzero().flatten().tolist()
    start = min(rows, key=lambda i: float(matrices[move][i, i]))
    row = matrices[move][start]
    assert 1 - float(row[start]) > 0.3
    mean, sd = tv_noise(row, 1200)
    assert mean + 6 * sd < 0.1
    states = jump.states()
    key = {(n, tuple(s.tolist())): i for i, (n, s) in enumerate(states)}
    state = jump.init_chain(L, states[start][1][None])
    streams = ChainStreams(17, 1)
    counts = torch.zeros(len(states), dtype=torch.float64)
    while counts.sum() < 1200:
        new, kind, _, _ = jump.step_chain(state, streams)
        if kind == move:
            counts[key[(new.length, tuple(new.mh.tokens[0].tolist()))]] += 1
    check_fit(row, counts)


def test_run_chains_records_the_run_moves_codes_and_changes(tiny4):
    """In a run the run moves are codes 3 and 4 (after update, insert, delete: a run's 0, 1, 2 keep
    their meaning); an accepted one changes the length by k and n_changed counts the k residues."""
    jump = GapJump(GapTarget(tiny4, GAP, PRIOR, temperature=5.0), **RUNS)
    run = run_chains(jump, 2, 60, seed=3)
    assert MOVES[3:] == ("insert_run", "delete_run")
    move, ok, n = run.stats["move"], run.stats["is_accepted"], run.stats["n_changed"]
    step = torch.diff(run.stats["length"], dim=1)
    later = (slice(None), slice(1, None))
    assert bool((step[ok[later] & (move[later] == 3)] == 2).all()) and bool(
        (step[ok[later] & (move[later] == 4)] == -2).all()
    )
    runs = (move >= 3) & ok
    assert int(runs.sum()) > 0 and bool((n[runs] == 2).all())
    assert bool((n[(move >= 1) & ~ok] == 0).all())


@pytest.mark.parametrize("max_run", [2, 3])
def test_surrogate_mh_around_the_run_moves_is_exact(tiny4_64, max_run):
    """Surrogate-MH's inner gap-jump chain makes the run moves too (on the surrogate), and one exact
    correction per step keeps pi(L) exp(-E/T) invariant; it crosses 1 -> 3 in one inner step."""
    target = GapTarget(tiny4_64, "AD[MASK]{1,3}CE", PRIOR, temperature=2.0)
    kernel = SurrogateMH(target, inner_steps=1, max_run=max_run, **RUNS)
    assert kernel.inner.p_insert_run == RUNS["p_insert_run"] and kernel.inner.run_sizes == tuple(range(2, max_run + 1))
    P, log_pi = kernel.gap_matrix()
    pi = log_pi.exp()
    assert float((pi @ P - pi).abs().max()) < 1e-10
    lengths = _lengths(kernel.inner)
    assert float(P[lengths == 1][:, lengths == 3].sum()) > 0  # one inner step: only a run move does that


@pytest.mark.slow
def test_surrogate_mh_steps_with_run_moves_follow_the_exact_row(tiny4):
    """1500 chains from one length-1 state, one step each (2 inner steps, most of them runs): the
    next states follow the exact row; independent draws, so the bound is the sampling noise."""
    kernel = SurrogateMH(GapTarget(tiny4, "AD[MASK]{1,3}CE", PRIOR, temperature=3.0), inner_steps=2, **RUNS)
    P, _ = kernel.gap_matrix()
    states = kernel.inner.states()
    start = next(i for i, (L, _) in enumerate(states) if L == 1)
    assert 1 - float(P[start, start]) > 0.3
    x0 = kernel.target.pad(states[start][1][None], 1)
    run = run_chains(kernel, 1500, 1, seed=7, init=x0.expand(1500, -1))
    index = {(L, tuple(s.tolist())): i for i, (L, s) in enumerate(states)}
    lengths = kernel.target.length_of(run.tokens[:, 0])
    rows = [
        index[(int(L), tuple(kernel.target.unpad(t[None], int(L))[0].tolist()))]
        for t, L in zip(run.tokens[:, 0], lengths)
    ]
    check_fit(P[start].float(), torch.bincount(torch.tensor(rows), minlength=len(states)).double())
    assert 3 in set(lengths.tolist())


def test_the_run_options_are_checked(tiny4_64):
    target = GapTarget(tiny4_64, GAP, PRIOR)
    with pytest.raises(ValueError, match=r"p_update, p_insert, p_delete, p_insert_run, p_delete_run .* must sum to 1"):
        GapJump(target, p_insert_run=0.1, p_delete_run=0.1)
    with pytest.raises(ValueError, match="must sum to 1"):
        SurrogateMH(target, p_update=0.4, p_insert=0.2, p_delete=0.2, p_insert_run=0.2, p_delete_run=0.2)
    with pytest.raises(ValueError, match="must be both 0 or both > 0"):
        GapJump(target, p_update=0.4, p_insert=0.2, p_delete=0.2, p_insert_run=0.2)
    with pytest.raises(ValueError, match=r"p_insert_run must lie in \[0, 1\]"):
        GapJump(target, p_insert_run=-0.1, p_delete_run=0.1)
    with pytest.raises(ValueError, match="max_run must be an integer >= 2"):
        GapJump(target, max_run=1)
    with pytest.raises(ValueError, match="max_run=3 does nothing without p_insert_run"):
        GapJump(target, max_run=3)
    with pytest.raises(ValueError, match=r"no run of 2..2 residues fits between the prior's lengths 1..2"):
        GapJump(GapTarget(tiny4_64, "A[MASK]{1,2}C"), **RUNS)
    with pytest.raises(ValueError, match="p_insert_run, p_delete_run, max_run are the inner chain's moves"):
        SurrogateMH(target.target(2), p_update=0.3, p_insert_run=0.1, p_delete_run=0.1)
    ok = GapJump(target, max_run=3, **RUNS)
    assert ok.jump_reads() == pytest.approx(0.1 + 0.05 + 0.8 * 2.5)  # a run of k reads k copies


def test_the_flags_and_older_records(tmp_path):
    """The command line has --p-insert-run, --p-delete-run, --max-run (from the options); a record
    written before them is read with the values its runs had (none), so a resume is not an edit."""
    from mlm_ppl.cli import build_parser
    from mlm_ppl.settings import RunSettings

    args = build_parser().parse_args(
        ["sample", "--template", GAP, "--p-insert-run", "0.1", "--p-delete-run", "0.2", "--max-run", "3"]
    )
    assert (args.p_insert_run, args.p_delete_run, args.max_run) == (0.1, 0.2, 3)
    for kernel, template in (("gap-jump", GAP), ("surrogate-mh", "A[MASK]C")):
        today = RunSettings(template=template, kernel=kernel).to_dict()
        old = json.loads(json.dumps(today))
        for name in ("p_insert_run", "p_delete_run", "max_run"):
            del old["kernel_options"][name]
        assert RunSettings.completed(old) == RunSettings.completed(today)
        assert RunSettings.from_dict(old) == RunSettings.from_dict(today)
