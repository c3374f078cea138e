# %% [markdown]
# # MH versus pseudo-Gibbs against the exact distribution
#
# On a tiny random BERT (4 tokens, 3 free positions: 64 states) the energy-based distribution
# `p(x) ∝ exp(-E_norm(x))` can be enumerated. Metropolis-Hastings with MLM proposals samples
# it exactly; pseudo-Gibbs (Wang & Cho's sampler) converges to a different distribution.

# %%
import os

import matplotlib.pyplot as plt
import torch

import mlm_ppl
from mlm_ppl.inference import MetropolisHastings, PseudoGibbs, exact, run_chains
from mlm_ppl.testing import goyal_counterexample, tiny_residue_bert

SMOKE = os.environ.get("MLM_PPL_SMOKE") == "1"
mlm = tiny_residue_bert("ACDE", seed=1)
dist = mlm_ppl.MaskedLMDistribution(mlm, "A[MASK]C[MASK][MASK]", temperature=2.0)
target = exact.exact_log_probs(dist).exp()

# %% [markdown]
# ## Exact distributions after n steps from a uniform start

# %%
kernels = {
    "MH": MetropolisHastings(dist, proposal_temperature=2.0),
    "pseudo-Gibbs": PseudoGibbs(dist, proposal_temperature=2.0),
}
steps = range(0, 61, 3)
curves = {}
for name, kernel in kernels.items():
    P = exact.transition_matrix(kernel)
    p = torch.full((P.shape[0],), 1.0 / P.shape[0], dtype=P.dtype)
    tv = []
    for n in range(max(steps) + 1):
        if n in steps:
            tv.append(exact.total_variation(p, target))
        p = p @ P
    curves[name] = tv
    print(f"{name:>12}: TV to exp(-E/T) after {max(steps)} steps = {tv[-1]:.4f}")
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, tv in curves.items():
    ax.plot(list(steps), tv, label=name)
ax.set(xlabel="steps", ylabel="total variation to exp(-E/T)", yscale="log", title="Exact, by enumeration")
ax.legend()
plt.show()

# %% [markdown]
# ## Long runs agree with the exact numbers

# %%
chains = 200 if SMOKE else 2000
for name, kernel in kernels.items():
    run = run_chains(kernel, chains, 1, warmup_steps=59, seed=0, init="uniform")
    counts = torch.bincount(exact.state_index(dist)(run.tokens[:, 0]), minlength=len(target)).double()
    print(f"{name:>12}: empirical TV to exp(-E/T) = {exact.total_variation(counts / chains, target):.3f}")

# %% [markdown]
# ## Goyal et al.'s two-token counterexample
# `p(X1|X2) = [[.99, .01], [.01, .99]]`, `p(X2|X1)` uniform: pseudo-Gibbs' stationary
# distribution depends on the scan order; MH's does not.

# %%
toy = goyal_counterexample()
for scan in ("left_to_right", "random"):
    pi = exact.stationary_distribution(exact.transition_matrix(PseudoGibbs(toy, scan=scan)))
    print(f"pseudo-Gibbs {scan:>13}: {[round(v, 4) for v in pi.tolist()]}")
pi = exact.stationary_distribution(exact.transition_matrix(MetropolisHastings(toy)))
print(f"MH                        : {[round(v, 4) for v in pi.tolist()]}")

# %% [markdown]
# ## What the summary says
# Four chains of each kernel. R-hat and ESS measure whether chains agree on the law they sample;
# for pseudo-Gibbs that law is its own, so its chains are called "mixed", never "converged", and
# the summary starts with a note that says so. The exact numbers beside it show why.

# %%
draws = 40 if SMOKE else 5000
for name, kernel in kernels.items():
    run = run_chains(kernel, 4, draws, warmup_steps=50, seed=0)
    report = mlm_ppl.summary(mlm_ppl.to_inference_data(run))
    counts = torch.bincount(
        exact.state_index(dist)(run.tokens.reshape(-1, run.tokens.shape[-1])), minlength=len(target)
    )
    pooled = counts.double() / counts.sum()
    print(f"{name}: verdicts {report.chains}; pooled TV to exp(-E/T) = {exact.total_variation(pooled, target):.3f}")
    if report.stationary_law is not None:
        print("  " + report.stationary_law)
