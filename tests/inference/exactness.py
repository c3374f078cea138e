"""Exactness helpers for the kernel tests: invariance, exact finite-time laws, goodness of fit."""

import torch
from pyro.distributions.testing.gof import multinomial_goodness_of_fit

from mlm_ppl.inference import exact

TEMPLATE = "A[MASK]C[MASK][MASK]"  # 3 free positions over 4 tokens: 64 states


def invariance_error(kernel, pi):
    P = exact.transition_matrix(kernel)
    assert torch.allclose(P.sum(1), torch.ones(len(pi), dtype=P.dtype), atol=1e-6)
    return float((pi @ P - pi).abs().max())


def empirical(target, tokens):
    idx = exact.state_index(target)(tokens)
    return torch.bincount(idx, minlength=exact.enumerate_states(target).shape[0]).double()


def check_fit(probs, counts, tv_bound):
    n = counts.sum()
    keep = probs * n > 10  # Pearson's test on the well-populated cells, truncated
    gof = multinomial_goodness_of_fit(probs[keep], counts[keep], total_count=int(n))
    tv = exact.total_variation(probs, counts / n)
    assert gof > 1e-3, f"chi-square p-value {gof:.2e}"
    assert tv < tv_bound, f"total variation {tv:.3f}"
    return gof, tv


def after(kernel, steps):
    """Exact distribution of the state after ``steps`` steps from a uniform start."""
    P = exact.transition_matrix(kernel)
    p0 = torch.full((P.shape[0],), 1.0 / P.shape[0], dtype=P.dtype)
    return p0 @ torch.linalg.matrix_power(P, steps)
