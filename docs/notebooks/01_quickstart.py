# %% [markdown]
# # Quickstart: AntiBERTy as a probabilistic model
#
# Load AntiBERTy offline, score real germline genes against shuffles, and redesign a few
# residues of a heavy chain with Metropolis-Hastings on the PLL energy.
# `MLM_PPL_SMOKE=1` (set by the test suite) shrinks the run.

# %%
import os

import mlm_ppl
from mlm_ppl.data import example_heavy_chain, germline_sequences, shuffled

SMOKE = os.environ.get("MLM_PPL_SMOKE") == "1"
mlm = mlm_ppl.load_mlm("antiberty")
print(mlm)

# %% [markdown]
# ## Energies: real genes against shuffles
# `E_norm` is the negative pseudo-log-likelihood in nats: lower is more likely.

# %%
genes = germline_sequences("human", "H", "V")
names = list(genes)[: 2 if SMOKE else 6]
real = [genes[n] for n in names]
controls = [shuffled(s, seed=i) for i, s in enumerate(real)]
energies = mlm.score(real + controls)
for i, name in enumerate(names):
    print(f"{name:<10} real {energies[i]:8.2f}   shuffled {energies[len(real) + i]:8.2f}")

# %% [markdown]
# ## Sampling a short loop
# Mask four residues of the CDR-H3 in a 40-residue window of a heavy chain and run MH chains.

# %%
seq, cdr3 = example_heavy_chain()
window = seq[cdr3.start - 20 : cdr3.stop + 7]
start = 22
template = window[:start] + "[MASK]" * 4 + window[start + 4 :]
run = mlm_ppl.sample(mlm, template, kernel="mh", num_chains=2, num_samples=3 if SMOKE else 30, seed=0)
print("acceptance:", run.stats["is_accepted"].float().mean().item())
for c in range(run.num_chains):
    print(f"chain {c}:", mlm.decode(run.tokens[c, -1])[0])

# %%
idata = mlm_ppl.to_inference_data(run, mlm=mlm, reference=window)
print(mlm_ppl.summary(idata))
