# %% [markdown]
# # Diagnosing chains with ArviZ
#
# R-hat and ESS need scalar functionals: token ids are labels. `to_inference_data` adds the
# log density `lp`, Hamming distances and token indicators; `summary` gives a verdict per
# chain. Three runs on a tiny model: one that converged, one that has not, one stuck chain.

# %%
import os
import warnings

import torch
from IPython.display import Image, display

import mlm_ppl
from mlm_ppl.inference import exact
from mlm_ppl.testing import tiny_residue_bert

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

SMOKE = os.environ.get("MLM_PPL_SMOKE") == "1"
mlm = tiny_residue_bert("ACDE", seed=1)
TEMPLATE = "A[MASK]C[MASK][MASK]"

# %% [markdown]
# ## A run that converged
# A hot target with matching proposals mixes quickly.

# %%
good = mlm_ppl.sample(
    mlm,
    TEMPLATE,
    temperature=3.0,
    proposal_temperature=3.0,
    num_chains=4,
    num_samples=150 if SMOKE else 600,
    thin=3,
    warmup_steps=50,
    seed=0,
    init="uniform",
)
idata = mlm_ppl.to_inference_data(good, mlm=mlm, indicators=[(2, "D")])
print(mlm_ppl.summary(idata))
print(az.rhat(idata.sample_stats, var_names=["lp"]))

# %% [markdown]
# ## Chains started far apart, too few draws
# One chain starts at the mode, one at the least likely state; 12 draws each.

# %%
dist = mlm_ppl.MaskedLMDistribution(mlm, TEMPLATE, temperature=2.0)
states, logp = exact.enumerate_states(dist), exact.exact_log_probs(dist)
far = torch.stack([states[logp.argmax()], states[logp.argmin()]])
short = mlm_ppl.sample(
    mlm, TEMPLATE, temperature=2.0, proposal_temperature=2.0, num_chains=2, num_samples=12, seed=0, init=far
)
print(mlm_ppl.summary(mlm_ppl.to_inference_data(short)))

# %% [markdown]
# ## A stuck chain
# With top-1 proposals a move needs its reverse to be the argmax too; from a greedy start the
# chains here never move. ArviZ alone would give them R-hat NaN and ESS = N; the summary calls
# them stuck.

# %%
stuck = mlm_ppl.sample(mlm, TEMPLATE, num_chains=2, num_samples=20, seed=0, init="greedy", top_k=1, warmup_steps=10)
print(mlm_ppl.summary(mlm_ppl.to_inference_data(stuck)))

# %% [markdown]
# ## The plots `mlm-ppl diagnose` writes, for the converged run
# Trace and rank plots of `lp`, running acceptance per chain, and the token frequencies per position.

# %%
for path in mlm_ppl.plot_diagnostics(idata, "notebook_plots", mlm=mlm):
    display(Image(path))
