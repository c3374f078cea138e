# Two commands on a fresh machine:  `make demo` (the main job on AntiBERTy: redesign a CDR-H3), `make test`.
# `make lint`: ruff (lint and format check) and mypy on the package; CI runs it beside the tests.
# Each creates .venv if missing: torch's CPU wheel first (pinned), then the project.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: demo converge lengths germlines test test-fast lint bench venv pairs reproductions notebooks docs docs-check

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[antibody,test,lint,ray,docs]'
	touch $@

# IGHV3-23 + IGHJ4 human heavy chain (mlm_ppl.data.example_heavy_chain) with its 13-residue CDR-H3 masked
CDRH3_TEMPLATE := EVQLLESGGGLVQPGGSLRLSCAASGFTFSSYAMSWVRQAPGKGLEWVSAISGSGGSTYYADSVKGRFTISRDNSKNTLYLQMNSLRAEDTAVYYC$(subst x,[MASK],xxxxxxxxxxxxx)WGQGTLVTVSS

# The example chain's own CDR-H3, the reference of the summaries' Hamming distances
CDRH3_LOOP := AKDRGYSSGWFDY

# The main job: surrogate-MH, exact for E_norm in float32; its inner chain (26 steps, half of them whole-loop proposals
# by unmasking the loop one residue at a time, half single-site MH) runs on the 13 loop positions' own terms, read by
# a bfloat16 copy of the model beside the frozen rest of the chain (docs/performance.md measures the choices).
MAIN_JOB := --model antiberty --template '$(CDRH3_TEMPLATE)' --kernel surrogate-mh --surrogate-dtype bfloat16 \
	--surrogate-frame frozen --inner-steps 26 --p-unmask 0.5 --energy norm --seed 0

# 5 to 7 minutes on 2 cores (16 draws at 16 to 24 s per step of the 4 chains); not converged, and its summary says so
demo: venv
	$(VENV)/bin/mlm-ppl sample $(MAIN_JOB) --num-chains 4 --num-samples 16 --out runs/cdrh3 --overwrite

# The main job run in docs/converge/run until its summary says converged (R-hat <= 1.01 and bulk and tail ESS >= 400
# over the 4 chains for lp and the Hamming distance to a reference; checked every 10 draws after 20 warm-up steps, at
# most 5000 draws; 17 to 26 s per step of the 4 chains on 2 cores). Restartable: run it again after an interruption and
# it resumes exactly (the same flags with --resume: a changed setting is refused, a higher --num-samples raises the cap: the
# run reached its first cap of 1000 unconverged); the run directory is committed, so a fresh clone resumes it too.
# Then docs/converge/: the summary with the loop distribution and the 10 deepest states (summary.md), the plots and the
# run's config.json. Stopped partway, `mlm-ppl diagnose docs/converge/run` writes the run's current outputs from its
# checkpoint (run.nc, samples.txt, summary.txt), which the commands below then read.
CONVERGE := docs/converge/run
CONVERGE_RUN := $(MAIN_JOB) --num-chains 4 --num-samples 5000 --warmup-steps 20 --until-converged
converge: venv
	if [ -f $(CONVERGE)/config.json ]; then \
		$(VENV)/bin/mlm-ppl sample --resume $(CONVERGE) $(CONVERGE_RUN); \
	else \
		$(VENV)/bin/mlm-ppl sample $(CONVERGE_RUN) --out $(CONVERGE); \
	fi
	mkdir -p docs/converge
	$(VENV)/bin/mlm-ppl diagnose $(CONVERGE) --loops 20 --deep 10 --reference $(CDRH3_LOOP) --plots docs/converge \
		> docs/converge/summary.md
	cp $(CONVERGE)/config.json docs/converge/config.json

# What AntiBERTy's energy says about CDR-H3 length (for docs/reproductions.md section 4): the main job's heavy chain
# with a gap of 8 to 20 residues between its Cys and Trp, uniform prior, E_norm, sampled by surrogate-MH around
# gap-jump's moves (40 inner steps on each length's frozen-frame bfloat16 surrogate: update 0.2, half of the updates
# whole-loop unmask proposals, insert 0.4, delete 0.4; one exact evaluation per step); the chains start at 20, 16, 12
# and 8 residues; until converged (as converge, for lp and the length), at most 2000 draws; about 16 s per step of the
# 4 chains on 2 cores (a pilot), restartable and committed like converge. Its length marginal is shown beside human
# CDR-H3 lengths (--length-reference human-cdrh3: src/mlm_ppl/tables/human_cdrh3_olga.tsv says where they come from).
LENGTHS := docs/lengths/run
COMMA := ,
LENGTHS_RUN := --model antiberty --template '$(subst $(subst x,[MASK],xxxxxxxxxxxxx),[MASK]{8$(COMMA)20},$(CDRH3_TEMPLATE))' \
	--length-mode jump --kernel surrogate-mh --surrogate-dtype bfloat16 --surrogate-frame frozen --inner-steps 40 \
	--p-update 0.2 --p-insert 0.4 --p-delete 0.4 --p-unmask 0.5 --energy norm --num-chains 4 --warmup-steps 50 --num-samples 2000 \
	--until-converged --seed 0
lengths: venv
	if [ -f $(LENGTHS)/config.json ]; then \
		$(VENV)/bin/mlm-ppl sample --resume $(LENGTHS); \
	else \
		$(VENV)/bin/mlm-ppl sample $(LENGTHS_RUN) --out $(LENGTHS); \
	fi
	mkdir -p docs/lengths
	$(VENV)/bin/mlm-ppl diagnose $(LENGTHS) --loops 10 --deep 10 --plots docs/lengths \
		--length-reference human-cdrh3 > docs/lengths/summary.md
	cp $(LENGTHS)/config.json docs/lengths/config.json

germlines: venv
	$(VENV)/bin/mlm-ppl germlines --model antiberty --n 12

test: venv
	$(PY) -m pytest -q --durations=20

# the edit loop: everything but the real model, the notebooks, Ray, the slowest CLI checks and tests over about 2 s
# (2 min 39 s on 2 idle cores, 1471 tests with the docstring checks, 2026-12-06; aim: under 3 minutes)
test-fast: venv
	$(PY) -m pytest -q -m "not slow" --ignore=tests/test_notebooks.py --ignore=tests/cli/test_ray.py \
		--ignore=tests/cli/test_reliability.py --ignore=tests/test_experiments.py

LINTED := src tests benchmarks experiments docs/notebooks docs/_ext docs/_inventories docs/conf.py
lint: venv
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)
	$(VENV)/bin/mypy

# The documentation site in docs/_build/html (Sphinx, MyST-NB: the committed notebooks as they are, the API reference
# from the docstrings, the command line from its parser); a warning is an error
docs: venv
	$(PY) -m sphinx -b html -W --keep-going -q docs docs/_build/html

# The built site in headless Chromium (Debian's chromium and chromium-driver): no console errors, no broken internal
# links, the search finds MaskedLMDistribution; screenshots in docs/_build/screenshots
docs-check: docs
	MLM_PPL_DOCS_HTML=docs/_build/html $(PY) -m pytest -q tests/test_docs_browser.py

# docs/notebooks/*.ipynb: each percent-script source executed at full size on a Jupyter kernel
# (about 40 minutes on 2 cores, 30 of them notebook 05's 1600 Gibbs iterations on AntiBERTy)
notebooks: venv
	$(PY) docs/notebooks/execute.py

bench: venv
	$(PY) benchmarks/bench_score.py

# docs/pairs.md: 200 contiguous and 200 random pairs of human heavy V genes (about 7 minutes each)
pairs: venv
	$(VENV)/bin/mlm-ppl pairs --model antiberty --data germlines:human:H --pairs contiguous --n 200 --seed 0 --out docs/pairs/contiguous
	$(VENV)/bin/mlm-ppl pairs --model antiberty --data germlines:human:H --pairs random --n 200 --seed 0 --out docs/pairs/random

# docs/reproductions.md: the three experiments at their default size (2 CPU cores: about 37 minutes in all)
reproductions: venv
	$(PY) experiments/samplers.py --out docs/reproductions/samplers
	$(PY) experiments/pseudo_gibbs.py --out docs/reproductions/pseudo_gibbs
	$(PY) experiments/mode_seeking.py --out docs/reproductions/mode_seeking
