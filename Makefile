# Two commands for a fresh machine: `make gate` (the deployment gate on the bundled
# scenarios) and `make test` (lint, types, and the test suite). Both build .venv from scratch.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test gate lint typecheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict pytest_crashpoints fake_providers

test: lint typecheck
	$(BIN)/python -m pytest -n auto

gate: $(STAMP)
	$(BIN)/crashpoints gate scenarios -- -n auto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
