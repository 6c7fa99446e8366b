# Two commands for a fresh machine: `make gate` (the deployment gate on the bundled
# scenarios) and `make test` (lint, types, and the test suite). Both build .venv from scratch.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast test-mcp1 gate lint typecheck clean bench bound2 dist equivalence screenshot stress case-studies

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstalled when the metadata changes: pyproject.toml, and the description it names.
$(STAMP): $(BIN)/python pyproject.toml README.pypi.md
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[agents]' --group dev
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict pytest_crashpoints fake_providers

# Twice as many xdist workers as cores: the suite waits on its processes (a worker paused at
# a point, a busy timeout, a subprocess starting) more than it computes; on 2 cores, -n 4
# ran it in 434 s against 680 s for -n 2, every test passing (tests/README.md).
WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * len(os.sched_getaffinity(0)))')

# test-mcp1: the MCP support on mcp 1.x, which .venv (mcp 2) cannot show.
test: lint typecheck test-mcp1
	$(BIN)/python -m pytest -n $(WORKERS)

# The pure, in-process layer of the suite (tests/unit): seconds, for the edit-test loop.
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit

# The MCP helpers, the fake MCP server, the mcp 1.x scenarios and docs/howto-mcp-sdk1.md on
# the mcp 1.x SDK (FastMCP, its clients, langchain-mcp-adapters, which requires mcp<2): a venv
# of its own, built from scratch each time (.venv has mcp 2). One pytest session, plugin on
# (the scenarios need it; the tests here never use the marker in-process). Under a minute.
MCP1 := .venv-mcp1
MCP1_TESTS := tests/unit/test_mcp_serving.py tests/unit/test_mcp_annotations.py \
	tests/providers/test_mcp.py scenarios/test_mcp1.py scenarios/broken/test_mcp1.py \
	tests/acceptance/test_docs.py

test-mcp1:
	rm -rf $(MCP1)
	$(PYTHON) -m venv $(MCP1)
	$(MCP1)/bin/python -m pip install --quiet -e . 'mcp>=1.8,<2' langchain-mcp-adapters \
		pytest-xdist respx
	$(MCP1)/bin/python -m pytest -p crashpoints $(MCP1_TESTS) -k 'not test_docs or howto-mcp-sdk1' \
		-n 2 -q -p no:randomly

# Writes crashpoints-report.json, -junit.xml, -summary.md and -report.html here.
gate: $(STAMP)
	$(BIN)/crashpoints gate scenarios -- -n auto

# Published libraries that promise safe tool calls, crash-tested unchanged at the versions
# pinned in the case-studies extra (docs/case-studies.md): each test passes when the library's
# verdict is the table's. Not in the gate: a new release must not turn the gate red.
case-studies: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[case-studies]'
	$(BIN)/python -m pytest -p crashpoints scenarios/case_studies -n 2 -q -p no:randomly

# The HTML report's screenshot in the docs: a broken agent's failing case, in headless Chromium.
screenshot: $(STAMP)
	$(BIN)/python -m tests.browser docs/images/html-report.png

# Every schedule of up to two faults on a two-call, two-provider message (five to ten minutes).
bound2: $(STAMP)
	$(BIN)/python -m scenarios.bound2

# Every single-fault schedule of every bundled scenario and broken agent on both engines:
# a schedule where the states engine and a real kill differ fails its test (about twice the
# exhaustive sweep's time).
equivalence: $(STAMP)
	$(BIN)/python -m pytest -p crashpoints scenarios --crashpoints-mode=exhaustive \
		--crashpoints-max-faults=1 --crashpoints-engine=compare -n auto -q -p no:randomly

# The gate's verdicts on a busy machine against a quiet one: 5 seeds, each run quiet, then
# under load (4 busy processes per core, -n and --crashpoints-jobs above the core count, two
# gate sessions at once); any difference in a verdict, schedule list or fingerprint fails and
# shows both runs (about 40 minutes on 2 cores). STRESS_ARGS=--short: 1 seed, a few scenarios.
stress: $(STAMP)
	$(BIN)/python -m tests.stress $(STRESS_ARGS)

# Benchmarks: writes bench/results.json and the table in docs/performance.md.
# BENCH_ARGS=--quick for a smoke run, BENCH_ARGS='--only 1,3' for some items.
bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# The sdist and the wheel, in dist/, checked as a release is (twine, check-wheel-contents).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/check-wheel-contents dist/*.whl

clean:
	rm -rf $(VENV) $(MCP1) .pytest_cache .mypy_cache .ruff_cache .hypothesis dist
