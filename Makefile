# The two commands of the README: `make run` and `make test`. Each runs the (idempotent) setup first.
PYTHON := .venv/bin/python
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup run test test-fast bench-eval bench-maxsim mini mini-ship clean

setup:
	@bash scripts/setup.sh

run: setup  ## evaluate (default: DOM-BM25 on the embedded benchmark); pass Hydra overrides as ARGS="..."
	$(PYTHON) run.py $(ARGS)

test: setup  ## the full test suite (what CI runs)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-fast: setup  ## everything except the slow end-to-end tests
	$(PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS)

bench-eval: setup  ## evaluation speed at paper scale vs pytrec_eval and ranx (several minutes)
	$(PYTHON) perf/bench_evaluate.py

bench-maxsim: setup  ## exact MaxSim search on CPU vs colpali-engine score_multi_vector and fp32 matmul (ARGS="--pages 20000")
	$(PYTHON) perf/bench_maxsim.py $(ARGS)

mini: setup  ## rebuild the mini benchmark from its seed (Chromium + Tesseract), full-size pages, into data/vl-docir-mini-full
	$(PYTHON) build.py

mini-ship: setup  ## regenerate the compact copy that ships in data/vl-docir-mini (400x800 JPEG pages)
	$(PYTHON) build.py spec.name=vl-docir-mini images.scale=0.2 images.format=jpeg images.jpeg_quality=65 'out_dir=$${paths.root_dir}/data/vl-docir-mini'

clean:  ## remove generated data, caches, logs and results (not the committed ones)
	rm -rf cache logs results/runs data/vl-docir-mini-full data/synthetic-*

# Paper tables, figures and the reproduction check (vldocir.reporting; they read only the results store).
# BENCHMARK=<name> compares that benchmark's runs (default: the paper's, or the store's only one);
# WANDB=1 also logs the tables and figures to W&B (WANDB_MODE=offline works without network).
BENCHMARK ?=
WANDB ?=
CHECK_ARGS ?=
REPORT_ARGS = $(if $(BENCHMARK),--benchmark $(BENCHMARK)) $(if $(filter 1 true yes,$(WANDB)),--wandb)

.PHONY: tables figures check

tables: setup  ## Markdown + LaTeX tables (results/tables) and PDF + PNG figures (results/figures), reproduced beside published
	$(PYTHON) -m vldocir.reporting.tables $(REPORT_ARGS)

figures: setup  ## only the figures (results/figures)
	$(PYTHON) -m vldocir.reporting.tables --no-tables $(REPORT_ARGS)

check: setup  ## OK / DIFF / MISSING for every published cell (exit 1 on DIFF); CHECK_ARGS="--quiet --tolerance 0.1"
	$(PYTHON) -m vldocir.reporting.check $(if $(BENCHMARK),--benchmark $(BENCHMARK)) $(CHECK_ARGS)
