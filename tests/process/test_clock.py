"""The harness clock: shared by parent and workers; a worker's wall time starts at it and moves."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Pause
from pytest_crashpoints._process.clock import HARNESS_EPOCH
from pytest_crashpoints._process.outcome import Completed, Outcome
from pytest_crashpoints._process.worker import run_worker, start_worker
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import HarnessClock


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
    assert 0 <= wall - (HARNESS_EPOCH.timestamp() + 3600) < 1.0
    assert iso.startswith("2026-01-01T01:00:0")
    assert harness == 3600.0


def paused_while_the_clock_advances(
    work: Callable[[], object], clock: HarnessClock, seconds: float
) -> Outcome:
    """The outcome of ``work`` run in a worker with ``clock``, paused at ``lease.check`` while
    harness time advances ``seconds``."""
    with start_worker(
        work, faults=[Fault("lease.check", Pause("g"))], clock=clock, timeout=30
    ) as worker:
        worker.wait_paused("g")
        clock.advance(seconds)
        worker.release("g")
        return worker.wait()


def test_a_paused_worker_follows_the_parents_advance(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")

    def two_readings() -> tuple[float, float]:
        before = time.time()
        crashpoint("lease.check")
        return before, time.time()

    outcome = paused_while_the_clock_advances(two_readings, clock, 30)
    assert isinstance(outcome, Completed)
    before, after = outcome.value
    assert 29.9 < after - before < 31  # to harness time 30, less the drift before


def test_wall_time_moves_and_the_real_clocks_are_real(tmp_path: Path) -> None:
    """Timeouts, deadlines and backoff in a worker behave as in production."""
    clock = HarnessClock(tmp_path / "clock", start=60.0)

    def timers() -> dict[str, float]:
        start_wall, start_mono = time.time(), time.monotonic()
        deadline = time.monotonic() + 0.2  # a 200 ms deadline loop
        rounds = 0
        while time.monotonic() < deadline:
            time.sleep(0.01)
            rounds += 1
        delay = 0.01
        for _ in range(3):  # a retry with exponential backoff
            time.sleep(delay)
            delay *= 2
        return {
            "wall": time.time() - start_wall,
            "mono": time.monotonic() - start_mono,
            "gap": abs(time.monotonic() - time.clock_gettime(time.CLOCK_MONOTONIC)),
            "start": start_wall - HARNESS_EPOCH.timestamp(),
            "rounds": rounds,
        }

    outcome = run_worker(timers, clock=clock, timeout=10)
    assert isinstance(outcome, Completed), outcome
    seen = outcome.value
    # Wall time moves as real time does (no upper bound in seconds: a loaded machine is slow).
    assert seen["wall"] >= 0.27 and seen["mono"] >= 0.27
    assert abs(seen["wall"] - seen["mono"]) < 0.05
    assert seen["gap"] < 0.01  # monotonic() is the real clock, not a pinned one
    assert 60.0 <= seen["start"] < 61.0
    assert seen["rounds"] >= 5


def test_an_advance_jumps_wall_time_forward_never_back(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")

    def readings() -> tuple[float, float, float, float]:
        time.sleep(0.3)  # ahead of harness time by 0.3 s of real time
        ahead = time.time()
        crashpoint("sync")  # harness time has not moved: no jump back
        same = time.time()
        mono = time.monotonic()
        crashpoint("lease.check")  # the parent advances 400 s while this one waits
        return ahead, same, time.time(), time.monotonic() - mono

    outcome = paused_while_the_clock_advances(readings, clock, 400)
    assert isinstance(outcome, Completed), outcome
    ahead, same, after, mono_moved = outcome.value
    epoch = HARNESS_EPOCH.timestamp()
    assert 0.3 <= ahead - epoch < 1.0 and same >= ahead
    assert 400.0 <= after - epoch < 401.0
    assert mono_moved < 5.0  # the jump is the wall clock's only



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
