# Two commands a newcomer needs: `make dev` (try it) and `make test` (check it).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the trial needs only Flotilla's own dependencies; the checks add the development tools
RUNTIME := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed-dev
# pytest's workers (pytest-xdist): one per core and one more, since the chaos experiments and
# the tests of real processes mostly wait; at most 4 (each has its own PostgreSQL database).
# `make pytest PYTEST_WORKERS=0` runs the suite in one process
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n + 1 : 4 )))

.PHONY: dev test lint typecheck pytest bench clean

$(BIN)/python:
	@echo "== creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# pip shows what it fetches; setuptools' note that a folder named like the package may shadow
# it is moot here (that folder is the package) and would be printed at every install
$(RUNTIME) $(STAMP): export PYTHONWARNINGS = ignore:Editable installation

$(RUNTIME): pyproject.toml | $(BIN)/python
	@echo "== installing Flotilla and the packages it needs into $(VENV) (a minute or two the first time)"
	$(BIN)/python -m pip install -e .
	touch $(RUNTIME)

# the development install includes the runtime one: one install, not two
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing Flotilla with its development tools into $(VENV) (a few minutes the first time)"
	$(BIN)/python -m pip install -e '.[dev]'
	touch $(STAMP) $(RUNTIME)

dev: $(RUNTIME)
	$(BIN)/flotilla dev

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy flotilla tests bench

# the whole suite, the ten slowest tests named at the end; tests marked with one
# `xdist_group` run one after another in one worker (--dist loadgroup)
pytest: $(STAMP)
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=10

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python bench/reconcile.py

clean:
	rm -rf $(VENV) build *.egg-info
