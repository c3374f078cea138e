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


def tv_noise(probs, n):
    """Mean and standard deviation of the total variation between ``probs`` and the empirical law
    of ``n`` independent draws from it. Each cell's error ``p^_i - p_i`` is nearly normal with
    variance ``v_i = p_i (1 - p_i) / n``, so ``|p^_i - p_i|`` has mean ``sqrt(2 v_i / pi)`` and
    variance ``v_i (1 - 2 / pi)``; TV is half their sum (the cells taken as independent)."""
    var = probs * (1 - probs) / n
    mean = 0.5 * float(torch.sqrt(2 * var / torch.pi).sum())
    sd = 0.5 * float(torch.sqrt((var * (1 - 2 / torch.pi)).sum()))
    return mean, sd


def check_fit(probs, counts, *, offset=0.0, n_eff=None):
    """Pearson's test (p-value above 1e-3) and the total variation between ``probs`` and the
    counts, below its expected sampling noise plus 6 standard deviations plus ``offset`` (a known
    distance between ``probs`` and the law the draws follow, e.g. TV(p_n, pi)). The bound is
    derived, not chosen: fixed bounds near the noise's mean passed or failed with the seed.
    ``n_eff`` replaces the draw count for autocorrelated draws."""
    n = counts.sum()
    keep = probs * n > 10  # Pearson's test on the well-populated cells, truncated
    gof = multinomial_goodness_of_fit(probs[keep], counts[keep], total_count=int(n))
    tv = exact.total_variation(probs, counts / n)
    mean, sd = tv_noise(probs, float(n) if n_eff is None else n_eff)
    bound = mean + 6 * sd + offset
    assert gof > 1e-3, f"chi-square p-value {gof:.2e}"
    assert tv < bound, f"total variation {tv:.3f} (bound {bound:.3f}: noise {mean:.3f} + 6 x {sd:.4f} + {offset:.3f})"
    return gof, tv


def after(kernel, steps):
    """Exact distribution of the state after ``steps`` steps from a uniform start."""
    P = exact.transition_matrix(kernel)
    p0 = torch.full((P.shape[0],), 1.0 / P.shape[0], dtype=P.dtype)
    return p0 @ torch.linalg.matrix_power(P, steps)


def check_draws_and_own_streams(kernel, target, chains=3000):
    """``chains`` independent chains, 2 steps from uniform starts, follow ``p0 P^2`` (``P`` by
    enumeration, from the kernel's own code); a chain run alone draws what it draws beside others."""
    from mlm_ppl.inference import ChainStreams, run_chains

    p2 = after(kernel, 2)
    run = run_chains(kernel, chains, 1, warmup_steps=1, seed=3, init="uniform")
    check_fit(p2, empirical(target, run.tokens[:, 0]))
    start = run.tokens[:4, 0]
    together, alone = kernel.init(start), kernel.init(start[2:3])
    s4, s1 = ChainStreams(9, 4), ChainStreams(9, [2])
    for _ in range(6):
        together, _ = kernel.step(together, s4)
        alone, _ = kernel.step(alone, s1)
    assert torch.equal(together.tokens[2], alone.tokens[0])


def plate_sweep_matrix(gibbs, site, states):
    """The exact matrix of one MLMGibbs iteration over a token site of two sequences under a
    plate: sequence 0 updated given sequence 1, then 1 given 0. Rows index ``i0 * n + i1``."""
    n = len(states)
    P0 = torch.zeros(n * n, n * n, dtype=torch.float64)
    P1 = torch.zeros(n * n, n * n, dtype=torch.float64)
    for other in range(n):
        gibbs.hold(site, states[other], element=1)
        rows = torch.arange(n) * n + other
        P0[rows[:, None], rows[None, :]] = exact.transition_matrix(gibbs.site_kernel(site, 0), states)
    for other in range(n):
        gibbs.hold(site, states[other], element=0)
        rows = other * n + torch.arange(n)
        P1[rows[:, None], rows[None, :]] = exact.transition_matrix(gibbs.site_kernel(site, 1), states)
    return P0 @ P1
