# Two commands a newcomer needs: `make dev` (try it) and `make test` (check it).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the trial needs only Flotilla's own dependencies; the checks add the development tools
RUNTIME := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed-dev

.PHONY: dev test lint typecheck pytest bench clean

$(RUNTIME): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): $(RUNTIME)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

dev: $(RUNTIME)
	$(BIN)/flotilla dev

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy flotilla tests bench

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/reconcile.py

clean:
	rm -rf $(VENV) build *.egg-info
