# The two commands of the README: `make run` and `make test`. Each runs the (idempotent) setup first.
PYTHON := .venv/bin/python
ARGS ?=
PYTEST_ARGS ?=

.PHONY: setup run test test-fast bench-eval clean

setup:
	@bash scripts/setup.sh

run: setup  ## evaluate (default: DOM-BM25 on the embedded benchmark); pass Hydra overrides as ARGS="..."
	$(PYTHON) run.py $(ARGS)

test: setup  ## the full test suite (what CI runs)
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-fast: setup  ## everything except the slow end-to-end tests
	$(PYTHON) -m pytest -m "not slow" $(PYTEST_ARGS)

bench-eval: setup  ## evaluation speed at paper scale vs pytrec_eval and ranx (several minutes)
	$(PYTHON) benchmarks/bench_evaluate.py

clean:  ## remove generated data, caches, logs and results (not the committed ones)
	rm -rf data cache logs results/runs
