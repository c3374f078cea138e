"""Mask-predict decoding."""

import torch

from mlm_ppl import MaskedLMDistribution
from mlm_ppl.inference import (
    MaskPredict,
    run_chains,
)


def test_mask_predict_decodes_deterministically(tiny4):
    dist = MaskedLMDistribution(tiny4, "A[MASK][MASK][MASK][MASK]C")
    run = run_chains(MaskPredict(dist, iterations=3), 2, 5, seed=0)
    final = run.tokens[:, -1]
    assert (final != tiny4.mask_id).all() and torch.equal(final[0], final[1])
    assert torch.equal(run.tokens[:, 2], run.tokens[:, -1])  # done after 3 iterations
    assert (run.tokens[:, 0] == tiny4.mask_id).sum() > 0  # iteration 1 re-masks the least sure
