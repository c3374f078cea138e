"""The library proposal (unmask mixed with a fixed library of deep states) against exact enumeration."""

import pytest
import torch

from exactness import TEMPLATE, check_draws_and_own_streams, invariance_error
from mlm_ppl import MaskedLMDistribution, run_chains
from mlm_ppl.inference import ChainStreams, MetropolisHastings, ReplicaMH, SurrogateMH, exact
from mlm_ppl.models import ConstrainedTarget
from mlm_ppl.models.constraints import Allowed, ConstraintSpec, Forbid
from mlm_ppl.models.gap_target import GapTarget
from mlm_ppl.models.gaps import LengthPrior
from mlm_ppl.testing import goyal_counterexample

LONG = "AC[MASK]D[MASK]EA[MASK]C"  # 3 free positions among fixed ones (surrogate-MH's windows differ)
LIBRARY = "EEE,DAC,EEE"  # a repeated loop counts twice in n(y_R) / K


def _factor(model):
    a = model.vocab.index("A")
    return lambda x: torch.where(x[:, 4] == a, 0.0, -3.0)


def detailed_balance_error(kernel, pi):
    P = exact.transition_matrix(kernel)
    flow = pi[:, None] * P
    return float((flow - flow.T).abs().max())


@pytest.mark.parametrize(
    "options",
    [dict(p_unmask=1.0), dict(p_unmask=0.5, library_weight=0.2), dict(p_unmask=0.7, unmask_size=2, block_size=2)],
    ids=["whole", "weight", "runs_and_blocks"],
)
@pytest.mark.parametrize("with_factor", [False, True], ids=["bare", "factor"])
def test_mh_with_a_library_is_reversible_for_its_target(tiny4_64, options, with_factor):
    """Every run, order, library entry and fill enumerated: detailed balance to rounding, with a
    log-factor too; the library changes the kernel (it is not silently off)."""
    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=0.7)
    target = ConstrainedTarget(dist, _factor(tiny4_64)) if with_factor else dist
    pi = exact.exact_log_probs(target).exp()
    kernel = MetropolisHastings(target, library=LIBRARY, **options)
    assert kernel.library.ids.shape == (3, 3)
    assert detailed_balance_error(kernel, pi) < 1e-12
    assert invariance_error(kernel, pi) < 1e-10
    plain = {k: v for k, v in options.items() if k != "library_weight"}
    plain = exact.transition_matrix(MetropolisHastings(target, **plain))
    assert float((exact.transition_matrix(kernel) - plain).abs().max()) > 1e-2


def test_the_matrix_weighs_a_move_into_the_library_by_the_mixture(tiny4_64):
    """One entry of the exact matrix by hand: from a state x to the library's loop y (unmask_size
    all, p_unmask 1), the mean over the 3! orders of q(y) min(1, p(y) q(x) / (p(x) q(y))) with
    q = (1 - w) q_U + w n / K; n(y) = 2 of K = 3 entries, n(x) = 0."""
    import itertools
    import math

    dist = MaskedLMDistribution(tiny4_64, TEMPLATE, temperature=0.7)
    states = exact.enumerate_states(dist)
    index = exact.state_index(dist)
    lp = exact.exact_log_probs(dist)
    x, y = states[int(lp.argmin())][None], states[int(lp.argmax())][None]  # into the target's mode
    deep = "".join(tiny4_64.vocab[int(t)] for t in y[0, dist.free_positions])
    w = 0.3
    kernel = MetropolisHastings(dist, p_unmask=1.0, library=f"{deep},DAC,{deep}", library_weight=w)
    expected = 0.0
    for order in itertools.permutations(range(3)):
        o = torch.tensor([order])
        q_x = (1 - w) * math.exp(float(kernel.unmask(x, o, None)[1]))
        q_y = (1 - w) * math.exp(float(kernel.unmask(y, o, None)[1])) + w * 2 / 3
        ratio = math.exp(float(lp[index(y)] - lp[index(x)])) * q_x / q_y
        expected += q_y * min(1.0, ratio) / 6
    P = exact.transition_matrix(kernel)
    assert float(P[index(x), index(y)]) == pytest.approx(expected, rel=1e-9)
    plain = exact.transition_matrix(MetropolisHastings(dist, p_unmask=1.0))
    assert float(P[index(x), index(y)]) > 2 * float(plain[index(x), index(y)])


def test_library_draws_follow_the_exact_matrix_and_each_chain_its_own_stream(tiny4):
    """3000 independent chains, 2 steps from uniform starts, follow p0 P^2 (P by enumeration, from the
    kernel's own code); a chain run alone draws what it draws beside others."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE, temperature=1.0)
    kernel = MetropolisHastings(dist, p_unmask=0.8, unmask_size=2, library=LIBRARY, library_weight=0.6)
    check_draws_and_own_streams(kernel, dist)


def test_a_library_proposal_reads_both_states_along_the_order(tiny4, monkeypatch):
    """A library loop: b passes over the loop's state and the current one (2b copies), then the
    proposal's evaluation; proposal_copies and proposal_cost say so."""
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = MetropolisHastings(dist, p_unmask=1.0, unmask_size=2, library="EEE", library_weight=0.999999)
    state = kernel.init(run_chains(kernel, 3, 1, seed=0).tokens[:, 0])
    rows = []
    real = tiny4.logits_at
    monkeypatch.setattr(tiny4, "logits_at", lambda ids, attn, q: rows.append(ids.shape[0]) or real(ids, attn, q))
    state, info = kernel.step(state, ChainStreams(1, 3))
    assert kernel.proposal_copies.tolist() == [4, 4, 4] and kernel.proposal_cost() == pytest.approx(4.0, abs=1e-5)
    assert rows[:2] == [6, 6]  # the two passes: 3 loops' states and 3 current states
    per_state = dist.scored_positions.numel()
    assert sum(rows) == 12 + per_state * int(info.evaluated.sum())


def test_surrogate_mh_with_a_library_in_its_inner_chain_is_exact(tiny4_64):
    """The inner chain (unmask mixed with the library, on the frozen-frame surrogate) is reversible
    for the surrogate, so the corrected step leaves the target invariant."""
    dist = MaskedLMDistribution(tiny4_64, LONG, temperature=0.8)
    target = ConstrainedTarget(dist, _factor(tiny4_64))
    kernel = SurrogateMH(
        target, surrogate_context=0, surrogate_frame="frozen", inner_steps=2, p_unmask=0.6, library=LIBRARY
    )
    assert kernel.inner.library is not None
    pi = exact.exact_log_probs(target).exp()
    assert invariance_error(kernel, pi) < 1e-10
    sur = exact.exact_log_probs(kernel.surrogate).exp()
    Q = exact.transition_matrix(kernel.inner)
    assert float((sur @ Q - sur).abs().max()) < 1e-10


def test_replica_mh_gives_each_replica_the_library(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    kernel = ReplicaMH(dist, replicas=2, p_unmask=0.5, library="EEE,DAC")
    assert all(k.library is not None and k.library.ids.shape == (2, 3) for k in kernel.kernels)


def test_bad_libraries_fail_before_any_work(tiny4):
    dist = MaskedLMDistribution(tiny4, TEMPLATE)
    for options, message in [
        (dict(library="EEE"), "a library is proposed by unmask proposals.*give p_unmask > 0"),
        (dict(p_unmask=0.5, library_weight=0.3), "library_weight=0.3 does nothing without a library"),
        (dict(p_unmask=0.5, library="EEE", library_weight=1.0), r"library_weight must lie in \(0, 1\)"),
        (dict(p_unmask=0.5, library="EEE,"), "holds an empty loop"),
        (dict(p_unmask=0.5, library="EEEE"), "library loop 'EEEE' has 4 tokens; the template has 3 free positions"),
        (dict(p_unmask=0.5, library="EXE"), "token 'X' is not in the vocabulary"),
    ]:
        with pytest.raises(ValueError, match=message):
            MetropolisHastings(dist, **options)
    with pytest.raises(ValueError, match="library_weight must lie in"):
        MetropolisHastings(dist, p_unmask=0.5, library="EEE", library_weight=1.5)
    only_a = ConstraintSpec([Allowed("only_a", "A", positions=(0,))]).constrain(dist)
    with pytest.raises(ValueError, match="'E' at free position 0 is outside the tokens that position may hold"):
        MetropolisHastings(only_a, p_unmask=0.5, library="EEE")
    no_ee = ConstraintSpec([Forbid("no_ee", "EE")]).constrain(dist)
    with pytest.raises(ValueError, match="library loop 'DEE' breaks a hard rule"):
        MetropolisHastings(no_ee, p_unmask=0.5, library="DAC,DEE")
    with pytest.raises(ValueError, match="needs a target read by a tokenizer"):
        MetropolisHastings(goyal_counterexample(), p_unmask=0.5, library="ab")
    gap = GapTarget(tiny4, "A[MASK]{1,3}C", LengthPrior({1: 0.3, 2: 0.3, 3: 0.4}, "test"))
    with pytest.raises(ValueError, match="take no library"):
        SurrogateMH(gap, p_unmask=0.5, library="EEE")
