from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_crashpoints import Ledger


@pytest.fixture(autouse=True)
def _frozen_heap() -> Iterator[None]:
    """Keep the cyclic garbage collector off the objects that exist when a test starts.

    Many tests fork workers straight from this process (an xdist worker that has imported
    the whole suite), and each worker collects garbage when its callable returns: a collection
    walks every object the worker inherited, and each object it touches is a page the worker
    must copy. That walk was most of a forked worker's cost (``test_interleaving``'s 100
    workers: 15 s against 2 s). The harness's fork server freezes its heap for the same
    reason; this does it for the test process, around each test. What a test creates is
    collected as usual; what existed before is collected after the test.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


#: A pytest plugin that LangSmith (a dependency of the agents extra's LangChain packages)
#: installs, and that every pytest process loads: importing it was about half of the start of
#: each pytest subprocess (0.6 s of CPU of 1.1 s), and these tests use nothing of it.
NOT_OURS = "-p no:langsmith_plugin"


@pytest.fixture(autouse=True)
def _pytest_subprocesses_without_langsmith(request: pytest.FixtureRequest) -> Iterator[None]:
    """The pytest processes a test starts (``pytester``, ``crashpoints gate`` and ``replay``)
    leave LangSmith's plugin out, through ``PYTEST_ADDOPTS``. Not for the examples of
    ``docs/``: they run as a user runs them, with every plugin the extras install."""
    if request.path.name == "test_docs.py":
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        if "pytester" in request.fixturenames:
            request.getfixturevalue("pytester")  # it empties PYTEST_ADDOPTS when it starts
        given = os.environ.get("PYTEST_ADDOPTS", "")
        patch.setenv("PYTEST_ADDOPTS", f"{given} {NOT_OURS}".strip())
        yield


class ManualClock:
    """A clock the test moves by hand (harness time, never wall time)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def ledger(tmp_path: pytest.TempPathFactory, clock: ManualClock) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.sqlite3", clock=clock)  # type: ignore[operator]
    yield ledger  # type: ignore[misc]
    ledger.close()


def assert_follows_the_report_schema(document: object) -> None:
    """Validate a JSON report with jsonschema against the schema the package ships."""
    from importlib.resources import files

    import jsonschema

    version = document["version"] if isinstance(document, dict) else None
    schema = json.loads(
        files("pytest_crashpoints").joinpath(f"schemas/report-v{version}.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(document)


def run_reported(
    pytester: pytest.Pytester, *args: str
) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    """Run pytest on ``pytester``'s files in a subprocess, with the plugin on, pytest-randomly
    off and a JSON report, then ``args``: the run's result and the report's tests, by test
    name (the node id's last part)."""
    report = pytester.path / "crashpoints-report.json"
    report.unlink(missing_ok=True)  # never an earlier run's
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", f"--crashpoints-report={report}", *args
    )
    tests = json.loads(report.read_text())["tests"]
    return result, {test["nodeid"].rsplit("::", 1)[1]: test for test in tests}


def wait_until(
    condition: Callable[[], object], *, timeout: float, what: str | Callable[[], str]
) -> None:
    """Return as soon as ``condition()`` is true; fail the test if it is still false after
    ``timeout`` seconds, saying it waited for ``what`` (a string, or a callable that says what
    is still missing when the deadline passes).

    For something the test observes (a file, a line, a process gone), never for a guessed
    time: ``timeout`` is a deadline a loaded machine meets, reached only when something is
    wrong.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            message = what() if callable(what) else what
            pytest.fail(f"waited {timeout:g} s for {message}", pytrace=False)
        time.sleep(0.02)  # how often to look, not how long to wait
