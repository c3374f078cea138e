"""Times minicons' MaskedLMScorer on AntiBERTy in its own interpreter (bench_score.py runs it).

minicons 0.3.x calls tokenizer APIs that transformers 5 removed, so it may need a separate
environment with transformers<5: pass that environment's python as --minicons-python.
Reads a JSON list of sequences on stdin; prints JSON {"seconds": float, "energies": [...]}.
"""

import importlib.util
import json
import os
import sys
import time

import torch

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", torch.get_num_threads())))
from minicons import scorer  # noqa: E402
from transformers import BertForMaskedLM, BertTokenizer  # noqa: E402

root = os.path.join(list(importlib.util.find_spec("antiberty").submodule_search_locations)[0], "trained_models")
model = BertForMaskedLM.from_pretrained(os.path.join(root, "AntiBERTy_md_smooth")).eval()
tok = BertTokenizer(os.path.join(root, "vocab.txt"), do_lower_case=False)
mc = scorer.MaskedLMScorer(model, "cpu", tokenizer=tok)
seqs = [" ".join(s) for s in json.load(sys.stdin)]
mc.sequence_score(seqs[:1], reduction=lambda x: x.sum(0).item())  # warm-up
t0 = time.perf_counter()
logp = mc.sequence_score(seqs, reduction=lambda x: x.sum(0).item())
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "energies": [-v for v in logp]}))
