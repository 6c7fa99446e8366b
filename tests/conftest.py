from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pytest_crashpoints import Ledger


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
    import json
    from importlib.resources import files

    import jsonschema

    version = document["version"] if isinstance(document, dict) else None
    schema = json.loads(
        files("pytest_crashpoints").joinpath(f"schemas/report-v{version}.json").read_text()
    )
    jsonschema.Draft202012Validator(schema).validate(document)


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
