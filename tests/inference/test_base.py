"""The shared pieces: proposals and the one accept."""

import torch

from mlm_ppl.inference import (
    ChainStreams,
    accept,
    proposal_log_probs,
)


def test_truncated_proposals_give_minus_inf_outside_the_set():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0, -9.0]])
    ordinary = torch.tensor([True, True, True, True, False])
    lq = proposal_log_probs(logits, ordinary, top_k=2)
    assert (
        torch.isinf(lq[0, :2]).all()
        and torch.isinf(lq[0, 4])
        and torch.allclose(lq[0, 2:4].exp().sum(), torch.tensor(1.0))
    )
    lq = proposal_log_probs(logits, ordinary, top_p=0.6)  # p = .03 .09 .24 .64: top token alone reaches .6
    assert torch.isfinite(lq[0]).tolist() == [False, False, False, True, False]
    assert not accept(torch.tensor([float("nan"), float("-inf")]), ChainStreams(0, 2)).any()
    assert accept(torch.tensor([0.0, 5.0]), ChainStreams(0, 2)).all()
