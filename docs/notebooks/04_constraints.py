# %% [markdown]
# # Composing an MLM with a Pyro constraint
#
# A model whose token site is a `MaskedLMDistribution` and whose `pyro.factor` adds a
# hydrophobicity budget: MH through `pyro.infer.MCMC` samples the product exactly. On a tiny
# model we check the result against enumeration.

# %%
import os
import warnings

import pyro
import torch
from pyro.infer import MCMC

import mlm_ppl
from mlm_ppl.inference import exact, run_from_mcmc
from mlm_ppl.testing import tiny_residue_bert

SMOKE = os.environ.get("MLM_PPL_SMOKE") == "1"
mlm = tiny_residue_bert("AILK", seed=2, std=0.15)  # three hydrophobic (A, I, L) and one charged (K) residue types
dist = mlm_ppl.MaskedLMDistribution(mlm, "K[MASK][MASK][MASK]K")
hydrophobic = torch.zeros(mlm.vocab_size)
for aa in "AIL":
    hydrophobic[mlm.vocab.index(aa)] = 1.0


def model(budget=1, strength=2.0):
    x = pyro.sample("x", dist)
    n = hydrophobic[x[..., dist.free_positions]].sum(-1)
    # penalise each hydrophobic residue above the budget
    pyro.factor("hydrophobicity", -strength * torch.clamp(n - budget, min=0))
    return x


# %% [markdown]
# ## Sampling through pyro.infer.MCMC (4 chains batched in one forward pass, block proposals of 2 positions)

# %%
kernel = mlm_ppl.MLMKernel(model, kernel="mh", num_chains=4, seed=0, init="uniform", block_size=2)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    mcmc = MCMC(kernel, num_samples=60 if SMOKE else 2000, warmup_steps=50, disable_progbar=True)
    mcmc.run()
run = run_from_mcmc(mcmc, kernel)
n_hydro = hydrophobic[run.tokens[..., dist.free_positions]].sum(-1)
print("mean hydrophobic residues, constrained:", n_hydro.mean().item())

# %% [markdown]
# ## Against the exact answer

# %%
kernel.setup(0)
pi = exact.exact_log_probs(kernel.target).exp()
states = exact.enumerate_states(kernel.target)
exact_mean = (pi * hydrophobic[states[:, dist.free_positions]].sum(-1).double()).sum().item()
plain = exact.exact_log_probs(dist).exp()
plain_mean = (plain * hydrophobic[states[:, dist.free_positions]].sum(-1).double()).sum().item()
print(f"exact mean with the constraint {exact_mean:.3f}, without {plain_mean:.3f}; sampled {n_hydro.mean():.3f}")
print(mlm_ppl.summary(mlm_ppl.to_inference_data(run, mlm=mlm)))
