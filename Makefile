# `make run` and `make test` each set up .venv on first use, then run or test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PIP := $(BIN)/python -m pip --disable-pip-version-check
# BFCL's multi-turn simulators (benchmarks/bfcl.py and its tests): without its
# dependencies, whose pins clash with ours; the simulators need only mpmath
BFCL_INSTALL := $(PIP) install --progress-bar off --no-deps bfcl-eval==2026.3.23 mpmath

.PHONY: run demo test test-fast lint bench clean

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@echo "==> setting up $(VENV) (the first time takes a few minutes: PyTorch for the CPU, Chroma, the embedding model)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --progress-bar off -e '.[test]'
	$(BFCL_INSTALL)
	@touch $(STAMP)
	@echo "==> $(VENV) is ready; run commands with $(BIN)/sidecar, or '. $(BIN)/activate' first"

run: $(STAMP)
	$(BIN)/sidecar serve --demo-if-empty

demo: $(STAMP)
	$(BIN)/sidecar demo

# ruff, the format check and mypy, then the whole suite
test: lint
	$(BIN)/python -m pytest

# under a minute: no subprocess servers, crashes, faults, real-model tests or long
# property-based runs
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not integration and not model and not slow" -q

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP)
	$(PIP) install --progress-bar off -e '.[test,bench]'
	$(BFCL_INSTALL)
	@touch $(BENCH_STAMP)

# the quick sizes; `make bench ARGS=--full` for the full ones
bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run all $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .sidecar build *.egg-info
