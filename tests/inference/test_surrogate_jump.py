"""Surrogate-MH around gap-jump's moves: one exact correction per step, whatever the inner chain did
to the length; exact by enumeration over loops of 1 to 3 residues on a tiny float64 model."""

import pytest
import torch

from exactness import check_fit
from mlm_ppl import sample
from mlm_ppl.inference import ChainStreams, SurrogateMH, exact, run_chains
from mlm_ppl.inference.jump import GapJump
from mlm_ppl.models.gap_target import GapTarget
from mlm_ppl.models.gaps import LengthPrior

GAP = "AD[MASK]{1,3}CE"  # fixed residues beside the loop: the surrogate (the loop's own terms) leaves them out
PRIOR = LengthPrior({1: 0.2, 2: 0.3, 3: 0.5}, "test")


@pytest.mark.parametrize(
    "options",
    [
        dict(p_update=0.2, p_insert=0.5, p_delete=0.3),
        dict(p_unmask=0.5, surrogate_context=0, surrogate_frame="frozen"),
        dict(p_unmask=0.5, unmask_size=1, surrogate_window=1, p_insert=0.4, p_delete=0.1, p_update=0.5),
    ],
    ids=["moves", "unmask_frozen", "window"],
)
def test_one_step_leaves_the_target_over_every_length_invariant(tiny4_64, options):
    """The exact matrix (gap-jump's on the surrogate to the power inner_steps, corrected) leaves
    pi(L) exp(-E/T) invariant over the 84 states of lengths 1-3, though the surrogate's law is far
    from it; the chain moves between lengths."""
    kernel = SurrogateMH(GapTarget(tiny4_64, GAP, PRIOR, temperature=2.0), inner_steps=2, **options)
    P, log_pi = kernel.gap_matrix()
    pi = log_pi.exp()
    assert P.shape == (84, 84) and torch.allclose(P.sum(1), torch.ones(84, dtype=torch.float64), atol=1e-12)
    assert float((pi @ P - pi).abs().max()) < 1e-10
    assert exact.total_variation(kernel.inner.exact_log_probs().exp(), pi) > 0.05  # the correction does the work
    lengths = torch.tensor([L for L, _ in kernel.inner.states()])
    assert float(P[lengths == 1][:, lengths == 3].sum()) > 0  # two inner steps can cross two lengths


def test_the_check_sees_a_missing_correction(tiny4_64):
    """The inner chain alone (no outer correction) leaves the surrogate invariant, not the target."""
    kernel = SurrogateMH(GapTarget(tiny4_64, GAP, PRIOR, temperature=2.0), inner_steps=2)
    _, log_pi = kernel.gap_matrix()
    Q = kernel.inner.exact_matrix()
    sur = kernel.inner.exact_log_probs().exp()
    assert float((sur @ Q - sur).abs().max()) < 1e-10
    assert float((log_pi.exp() @ Q - log_pi.exp()).abs().max()) > 1e-3


def test_a_constrained_gap_is_exact_with_the_surrogate(tiny4_64):
    """A spec bound to each length (a rule at the loop's last residue, a forbidden pair, an expert)."""
    from mlm_ppl.models.constraints import Allowed, ConstraintSpec, Expert, Forbid

    spec = ConstraintSpec(
        [Allowed("last", "CD", positions=(-1,)), Forbid("no-dd", "DD")],
        [Expert("es", lambda seqs: [float(s.count("E")) for s in seqs], weight=0.5)],
    )
    target = GapTarget(tiny4_64, GAP, PRIOR, temperature=2.0, constraints=spec)
    kernel = SurrogateMH(target, inner_steps=2, p_insert=0.4, p_delete=0.4, p_update=0.2)
    P, log_pi = kernel.gap_matrix()
    pi = log_pi.exp()
    assert float((pi @ P - pi).abs().max()) < 1e-10
    sequences = [tiny4_64.decode(s[None])[0] for _, s in kernel.inner.states()]  # "AD" + loop + "CE"
    broken = [seq[-3] not in "CD" or "DD" in seq for seq in sequences]  # the pattern reads the whole sequence
    assert torch.equal(pi == 0, torch.tensor(broken)) and sum(broken) < len(broken)


@pytest.mark.slow
def test_the_step_draws_follow_the_exact_row_and_count_their_copies(tiny4, monkeypatch):
    """1500 chains from one length-2 state, one step each: the next states follow that state's row of
    the exact matrix; masked_copies counts the copies run, the lengths move."""
    kernel = SurrogateMH(GapTarget(tiny4, GAP, PRIOR, temperature=3.0), inner_steps=2, p_unmask=0.3)
    P, _ = kernel.gap_matrix()
    states = kernel.inner.states()
    start = next(i for i, (L, s) in enumerate(states) if L == 2)
    x0 = kernel.target.pad(states[start][1][None], 2)
    run = run_chains(kernel, 1500, 1, seed=7, init=x0.expand(1500, -1))
    index = {(L, tuple(s.tolist())): i for i, (L, s) in enumerate(states)}
    lengths = kernel.target.length_of(run.tokens[:, 0])
    rows = [
        index[(int(L), tuple(kernel.target.unpad(t[None], int(L))[0].tolist()))]
        for t, L in zip(run.tokens[:, 0], lengths)
    ]
    check_fit(P[start].float(), torch.bincount(torch.tensor(rows), minlength=len(states)).double())
    assert set(lengths.tolist()) == {1, 2, 3}
    # the copies: every model call counted, chain by chain
    calls = []
    real = tiny4.logits_at
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: calls.append(ids.shape[0]) or real(ids, attn, q))
    state = kernel.init(x0.expand(3, -1))
    calls.clear()
    state, info = kernel.step(state, ChainStreams(1, 3))
    assert sum(calls) == int(info.masked_copies.sum()) and bool((info.masked_copies > 0).all())


def test_sample_and_the_refusals(tiny4):
    run = sample(
        tiny4, GAP, kernel="surrogate-mh", num_chains=2, num_samples=10, seed=0, inner_steps=3, temperature=2.0
    )
    assert run.tokens.shape == (2, 10, 9)
    target = GapTarget(tiny4, GAP, PRIOR)
    with pytest.raises(ValueError, match="take no block_size"):
        SurrogateMH(target, block_size=2)
    with pytest.raises(ValueError, match="take no top_k"):
        SurrogateMH(target, top_k=2)
    with pytest.raises(ValueError, match="must sum to 1"):
        SurrogateMH(target, p_update=0.5, p_insert=0.5, p_delete=0.5)
    with pytest.raises(ValueError, match="at the gap's shortest length, 1: unmask_size=2 is larger than the 1 free"):
        SurrogateMH(target, p_unmask=0.5, unmask_size=2)
    with pytest.raises(ValueError, match="this template has no variable gap"):
        SurrogateMH(target.target(2), p_insert=0.5, p_update=0.25)
    with pytest.raises(ValueError, match="must sum to 1"):
        GapJump(target, p_update=0.9)


def test_each_length_surrogate_is_calibrated_at_a_fixed_state(tiny4_64):
    """E~ + offset equals E at each length's greedy fill (the same state at every start and resume),
    so the inner chain does not favour the lengths whose surrogate misses most of the frame."""
    from mlm_ppl.inference import fill_template

    kernel = SurrogateMH(GapTarget(tiny4_64, GAP, PRIOR, temperature=2.0), inner_steps=2)
    offsets = []
    for L in (1, 2, 3):
        surrogate = kernel.surrogate.target(L)
        reference = fill_template(surrogate.base, 1, ChainStreams(5, 1), "greedy")
        assert torch.allclose(surrogate.evaluate(reference).energy, surrogate.base.evaluate(reference).energy)
        offsets.append(surrogate.offset)
    assert len(set(offsets)) == 3 and all(o != 0 for o in offsets)
