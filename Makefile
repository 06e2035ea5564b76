# `make run` and `make test` each set up .venv on first use, then run or test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run demo test bench lint clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/sidecar serve --demo-if-empty

demo: $(STAMP)
	$(BIN)/sidecar demo

test: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest

BENCH_STAMP := $(VENV)/.bench-stamp

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,bench]'
	touch $(BENCH_STAMP)

# the quick sizes; `make bench ARGS=--full` for the full ones
bench: $(BENCH_STAMP)
	$(BIN)/sidecar bench all $(ARGS)

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .sidecar build *.egg-info
