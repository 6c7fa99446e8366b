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
