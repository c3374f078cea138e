"""The GPU check prepared for a session lent a device (not run in CI): the CUDA path of the front
door and batched chains, on a random BERT of AntiBERTy's shape (8 layers, hidden 512, 8 heads, FFN
2048, its 25-token vocabulary): AntiBERTy's own weights are too large to carry to the device, and
the forward passes cost the same. Writes $OUT/gpu.json. On the device, with pyro-ppl, pyro-api,
google-re2, arviz and xarray-einstats carried as wheels:

    PYTHONPATH=/tmp/site:$PWD/src python3 benchmarks/gpu_check.py

``DEV=cpu QUICK=1`` runs it here on a tiny model, to check the script itself.
"""

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

import mlm_ppl
from mlm_ppl.testing import save_tiny, tiny_antibody_bert

OUT = Path(os.environ.get("OUT", "/tmp/out"))
DEV = os.environ.get("DEV", "cuda")  # DEV=cpu QUICK=1: a dry run of this script on a CPU
QUICK = os.environ.get("QUICK") == "1"
if DEV == "cpu":
    torch.cuda.synchronize = lambda: None  # type: ignore[assignment]
    torch.cuda.get_device_name = lambda i=0: "cpu"  # type: ignore[assignment]
    torch.cuda.max_memory_allocated = lambda: 0  # type: ignore[assignment]
OUT.mkdir(parents=True, exist_ok=True)
res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0]}


def save():
    (OUT / "gpu.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res), flush=True)


FRAME = "EVQLLESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVSAISGSGGSTYYADSVKGRFTISRDNSKNTLYLQMNSLRAEDTAVYYC"
TEMPLATE = FRAME + "[MASK]" * 13 + "WGQGTLVTVSS"
tmp = Path(tempfile.mkdtemp())
small = tiny_antibody_bert(seed=0, max_length=512)
save_tiny(small, tmp / "m")
cfg = small.model.config.to_dict()
if not QUICK:
    cfg.update(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, intermediate_size=2048)
torch.manual_seed(0)
BertForMaskedLM(BertConfig(**cfg)).save_pretrained(tmp / "m")
model_dir = str(tmp / "m")

# 1. the same energies on the CPU and on CUDA
cpu, gpu = mlm_ppl.load_mlm(model_dir), mlm_ppl.load_mlm(model_dir, device=DEV)
seqs = [FRAME + "AKDRGYSSGWFDY" + "WGQGTLVTVSS", FRAME + "ARESEDLTSNFDY" + "WGQGTLVTVSS"]
e_cpu, e_gpu = cpu.score(seqs).double(), gpu.score(seqs).double().cpu()
res["score_max_abs_diff_cpu_cuda"] = float((e_cpu - e_gpu).abs().max())
res["score_cpu"] = e_cpu.tolist()
save()

# 2. batched MH chains on CUDA through the front door: seconds per step by number of chains
res["mh"] = []
for chains in (2,) if QUICK else (4, 64, 256, 1024, 4096):
    try:
        mlm_ppl.sample(gpu, TEMPLATE, num_chains=chains, num_samples=1, seed=0)  # warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run = mlm_ppl.sample(gpu, TEMPLATE, num_chains=chains, num_samples=4, seed=0)
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        steps = 4
        res["mh"].append(
            dict(
                chains=chains,
                seconds=s,
                s_per_step=s / steps,
                chain_steps_per_s=chains * steps / s,
                acceptance=float(run.stats["is_accepted"].float().mean()),
                evaluated=float(run.stats["evaluated"].float().mean()),
                max_mem_gib=torch.cuda.max_memory_allocated() / 2**30,
            )
        )
    except Exception as err:
        res["mh"].append(dict(chains=chains, error=f"{type(err).__name__}: {err}"[:500]))
    save()
    if res["mh"][-1].get("seconds", 0) > 60:  # the next size would take over four minutes
        break

# 3. the main job's kernel (surrogate-MH, bfloat16 frozen-frame surrogate, 26 inner steps)
res["surrogate"] = []
main = dict(kernel="surrogate-mh", surrogate_dtype="bfloat16", surrogate_frame="frozen", inner_steps=26, p_unmask=0.5)
for chains in (2,) if QUICK else (4, 64, 256):
    try:
        mlm_ppl.sample(gpu, TEMPLATE, num_chains=chains, num_samples=1, seed=0, **main)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        run = mlm_ppl.sample(gpu, TEMPLATE, num_chains=chains, num_samples=3, seed=0, **main)
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        res["surrogate"].append(
            dict(
                chains=chains,
                seconds=s,
                s_per_step=s / 3,
                chain_steps_per_s=chains * 3 / s,
                acceptance=float(run.stats["is_accepted"].float().mean()),
            )
        )
    except Exception as err:
        res["surrogate"].append(dict(chains=chains, error=f"{type(err).__name__}: {err}"[:500]))
    save()

# 4. a run directory on CUDA: run 6 draws, resume to 12, against 12 uninterrupted (the same draws?)
try:
    keys = dict(num_chains=8, seed=3, device=DEV, checkpoint_seconds=0.0)
    whole = mlm_ppl.sample(model_dir, TEMPLATE, num_samples=12, out=tmp / "whole", **keys)
    mlm_ppl.sample(model_dir, TEMPLATE, num_samples=6, out=tmp / "part", **keys)
    part = mlm_ppl.resume(tmp / "part", num_samples=12)
    res["rundir_cuda_resume_equal"] = bool(torch.equal(whole.tokens, part.tokens))
    res["rundir_summary_first_line"] = str(whole.summary()).splitlines()[0]
    cpu_run = mlm_ppl.sample(cpu, TEMPLATE, num_chains=8, num_samples=12, seed=3)
    res["cuda_vs_cpu_tokens_equal"] = bool(torch.equal(whole.tokens, cpu_run.tokens))
    res["cuda_vs_cpu_first_draw_equal"] = bool(torch.equal(whole.tokens[:, 0], cpu_run.tokens[:, 0]))
except Exception:
    res["rundir_error"] = traceback.format_exc()[-1500:]
save()
