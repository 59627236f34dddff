# The two commands of the README: `make run` and `make test`. Each runs the (idempotent) setup first.
PYTHON := .venv/bin/python
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup run lint format test test-fast bench-eval bench-maxsim bench-settings bench-compressed bench-context bench-scale bench-gpu bench-render mini mini-ship clean cleaning-ablations evidence generate build collect audit

setup:
	@bash scripts/setup.sh

run: setup  ## evaluate (default: DOM-BM25 on the embedded benchmark); pass Hydra overrides as ARGS="..."
	$(PYTHON) run.py $(ARGS)

build: setup  ## build a benchmark: generated HTML, or your own documents (ARGS="input=/data/my-docs spec.name=my-bench ...")
	$(PYTHON) -m vldocir.apps.build $(ARGS)

collect: setup  ## fetch source documents into a document index (ARGS="collect=sec collect.out_dir=/data/raw/sec")
	$(PYTHON) -m vldocir.apps.collect $(ARGS)

audit: setup  ## the query audit (App. A.7, Table 12): sample a review sheet, or ARGS="do=import sheet=filled.csv"
	$(PYTHON) -m vldocir.apps.audit $(ARGS)

evidence: setup  ## evidence configurations for VLM query generation on the shipped mini (offline); Hydra overrides as ARGS="..."
	$(PYTHON) -m vldocir.apps.sample_evidence $(ARGS)

generate: setup  ## query generation over the shipped mini (recorded answers replayed offline); Hydra overrides as ARGS="..."
	$(PYTHON) -m vldocir.apps.generate_queries $(ARGS)

cleaning-ablations: setup  ## query-cleaning ablations (Tables 6-10) on the shipped synthetic set; Hydra overrides as ARGS="..."
	$(PYTHON) -m vldocir.apps.cleaning_ablations $(ARGS)

lint: setup  ## ruff lint and format check (CI runs it before the tests; `make format` fixes what it can)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format: setup  ## ruff: sort imports, fix what is fixable, format
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

# pytest-xdist: one worker per core the machine gives (TEST_WORKERS=0 runs in this process, e.g. to debug)
TEST_WORKERS ?= auto
PYTEST_XDIST = -n $(TEST_WORKERS) --dist worksteal

test: setup  ## the full test suite (what CI runs), in parallel workers
	$(PYTHON) -m pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

test-fast: setup  ## everything except the slow end-to-end tests
	$(PYTHON) -m pytest $(PYTEST_XDIST) -m "not slow" $(PYTEST_ARGS)

bench-eval: setup  ## evaluation speed at paper scale vs pytrec_eval and ranx (several minutes)
	$(PYTHON) perf/bench_evaluate.py

bench-maxsim: setup  ## exact MaxSim search on CPU vs colpali-engine score_multi_vector and fp32 matmul (ARGS="--pages 20000")
	$(PYTHON) perf/bench_maxsim.py $(ARGS)

bench-settings: setup  ## cost of setting=ctx and setting=hierarchical vs exact search, 100,000 random pages + the mini (ARGS="--quick")
	$(PYTHON) perf/bench_settings.py $(ARGS)

bench-compressed: setup  ## setting=compressed (pooling, codecs, centroid index) vs exact search on 100,000 clustered pages, PASS/FAIL (~40 min; ARGS="--pages 20000"; ARGS="--suite residuals": the defaults, PASS, ~1 hour)
	$(PYTHON) perf/bench_compressed.py $(ARGS)

bench-context: setup  ## document-context vectors: peak RSS flat in the corpus size, s/doc, worker speed-up (ARGS="--docs 200")
	$(PYTHON) perf/bench_context.py $(ARGS)

bench-scale: setup  ## paper-scale CPU paths through run.py with PASS/FAIL: DOM-BM25 <= 10 min, re-evaluation <= 5 s, flat context memory (10-15 min)
	$(PYTHON) perf/bench_scale.py $(ARGS)

bench-render: setup  ## rendering: pages per CPU-second and per machine core on ../shared/real-html and generated pages, 1 and N workers, peak memory, PASS/FAIL at 2 pages/s/core (~4 min; ARGS="--workers 1,8")
	$(PYTHON) perf/bench_render.py $(ARGS)

bench-gpu: setup  ## one H200, ~8 min: encode/search/context on full-size random models + H200-hours projection (ARGS="--json gpu.json"; --cpu-smoke without a GPU)
	$(PYTHON) perf/bench_gpu.py $(ARGS)

mini: setup  ## rebuild the mini benchmark from its seed (Chromium + Tesseract; queries by the VLM pipeline replaying data/generation/), full-size pages, into data/vl-docir-mini-full
	$(PYTHON) -m vldocir.apps.build

mini-ship: setup  ## regenerate the compact copy that ships in data/vl-docir-mini (400x800 JPEG pages)
	$(PYTHON) -m vldocir.apps.build spec.name=vl-docir-mini images.scale=0.2 images.format=jpeg images.jpeg_quality=65 'out_dir=$${paths.root_dir}/data/vl-docir-mini'

clean:  ## remove generated data, caches, logs and results (not the committed ones)
	rm -rf cache logs results/runs results/cleaning results/audit results/compare data/evidence-configs data/vl-docir-mini-full data/vl-docir-mini-generated data/synthetic-*

# Paper tables, figures and the reproduction check: vldocir.apps.report (conf/report.yaml), which reads the
# results store of the paths group (runs as run.py writes them; Table 12 from an audit imported by `make audit
# ARGS=do=import`) and, for Table 1 and Figs. 5-7, the benchmark itself (where its runs or its conf/dataset entry
# say; ARGS="benchmark_dir=DIR" to name it). Hydra overrides go in ARGS, as for `make run`:
#   make tables ARGS="paths.results_dir=/scratch/r"    (or: make tables RESULTS_DIR=/scratch/r)
#   make check ARGS="quiet=true tolerance=0.1"         ('only=[table13_overall]' for some tables only)
# BENCHMARK=<name> compares that benchmark's runs (benchmark=<name>; default: the paper's, or the store's
# with the most mapped runs); WANDB=1 also logs the tables and figures to W&B (logger=wandb;
# WANDB_MODE=offline works without network). RESULTS_DIR sets VLDOCIR_RESULTS_DIR, which conf/paths reads.
BENCHMARK ?=
WANDB ?=
RESULTS_DIR ?=
REPORT = $(if $(RESULTS_DIR),VLDOCIR_RESULTS_DIR=$(RESULTS_DIR)) $(PYTHON) -m vldocir.apps.report \
	$(if $(BENCHMARK),benchmark=$(BENCHMARK)) $(if $(filter 1 true yes,$(WANDB)),logger=wandb)

.PHONY: tables figures check compare

tables: setup  ## Markdown + LaTeX tables (results/tables) and PDF + PNG figures (results/figures), reproduced beside published
	$(REPORT) 'do=[tables,figures]' $(ARGS)

figures: setup  ## only the figures (results/figures)
	$(REPORT) 'do=[figures]' $(ARGS)

check: setup  ## OK / DIFF / MISSING for every published cell (the app exits 1 on DIFF, make then 2); ARGS="quiet=true tolerance=0.1"
	$(REPORT) 'do=[check]' $(ARGS)

compare: setup  ## paired tests of stored runs against a baseline; ARGS="runs=[B/R/S,...] baseline=B/R0/S0"
	$(REPORT) do=compare $(ARGS)
