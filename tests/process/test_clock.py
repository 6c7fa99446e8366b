"""The harness clock: shared by parent and workers, pinned into workers with freezegun."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import (
    HARNESS_EPOCH,
    Completed,
    Fault,
    HarnessClock,
    Pause,
    run_worker,
    start_worker,
)


def test_advance_and_set_are_shared_through_the_file(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    assert clock.now() == 0.0
    assert clock.advance(1.5) == 1.5
    other = HarnessClock(tmp_path / "clock", start=99.0)  # opens, does not reset
    assert other.now() == 1.5
    other.set(10.0)
    assert clock() == 10.0
    assert clock.datetime() == HARNESS_EPOCH + dt.timedelta(seconds=10)


def test_harness_time_never_goes_back(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock", start=5.0)
    with pytest.raises(HarnessUsageError, match="never goes backwards"):
        clock.advance(-1)
    with pytest.raises(HarnessUsageError, match=r"already 5\.0"):
        clock.set(4.0)
    assert clock.now() == 5.0


def test_a_worker_sees_harness_time_as_wall_time(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock", start=3600.0)

    def read_time() -> tuple[float, str, float]:
        return time.time(), dt.datetime.now(dt.timezone.utc).isoformat(), clock.now()

    outcome = run_worker(read_time, clock=clock, timeout=30)
    assert isinstance(outcome, Completed)
    wall, iso, harness = outcome.value
    assert wall == HARNESS_EPOCH.timestamp() + 3600
    assert iso == "2026-01-01T01:00:00+00:00"
    assert harness == 3600.0


def test_a_paused_worker_follows_the_parents_advance(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")

    def two_readings() -> tuple[float, float]:
        before = time.time()
        crashpoint("lease.check")
        return before, time.time()

    with start_worker(
        two_readings, faults=[Fault("lease.check", Pause("g"))], clock=clock, timeout=30
    ) as worker:
        worker.wait_paused("g")
        clock.advance(30)
        worker.release("g")
        outcome = worker.wait()
    assert isinstance(outcome, Completed)
    before, after = outcome.value
    assert after - before == 30


def test_the_clock_and_its_lock_file_are_created_rw_r__r__(tmp_path: Path) -> None:
    import os
    import stat

    old = os.umask(0o022)
    try:
        clock = HarnessClock(tmp_path / "clock")
        clock.advance(1.0)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"clock": 0o644, "clock.lock": 0o644}
