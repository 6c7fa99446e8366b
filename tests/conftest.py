from __future__ import annotations

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
