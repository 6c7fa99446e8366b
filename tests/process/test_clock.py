"""The harness clock: shared by parent and workers; a worker's clocks start at it, stand still
while it computes, and follow it."""

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
    assert wall == HARNESS_EPOCH.timestamp() + 3600  # exactly: computing takes no time
    assert iso == "2026-01-01T01:00:00+00:00"
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
    assert after - before == 30  # to harness time 30: the gate's real time is not the world's


def test_deadlines_and_backoff_run_on_the_clock_the_waits_move(tmp_path: Path) -> None:
    """A deadline loop and a backoff end as in production, on one clock: wall time,
    monotonic() and perf_counter() move together, by exactly what was waited."""
    clock = HarnessClock(tmp_path / "clock", start=60.0)

    def timers() -> dict[str, float]:
        start_wall, start_mono, start_perf = time.time(), time.monotonic(), time.perf_counter()
        deadline = time.monotonic() + 0.2  # a 200 ms deadline loop
        rounds = 0
        while time.monotonic() < deadline:
            time.sleep(0.01)
            rounds += 1
        delay = 0.01
        for _ in range(3):  # a retry with exponential backoff
            time.sleep(delay)
            delay *= 2
        sum(range(200_000))  # computing takes no time on the clock
        return {
            "wall": time.time() - start_wall,
            "mono": time.monotonic() - start_mono,
            "perf": time.perf_counter() - start_perf,
            "start": start_wall - HARNESS_EPOCH.timestamp(),
            "rounds": rounds,
        }

    outcome = run_worker(timers, clock=clock, timeout=30)
    assert isinstance(outcome, Completed), outcome
    seen = outcome.value
    assert seen["rounds"] == 20  # 20 sleeps of 10 ms (and a microsecond) reach 200 ms
    waited = 20 * 0.01 + 0.07 + 23 * 1e-6
    assert seen["mono"] == pytest.approx(waited, abs=1e-9)
    assert seen["perf"] == pytest.approx(waited, abs=1e-9)
    assert seen["wall"] == pytest.approx(waited, abs=1e-6)  # a timestamp's float rounding
    assert seen["start"] == 60.0
    assert clock.now() == pytest.approx(60.0 + waited, abs=1e-9)  # the providers' view too


def test_an_advance_jumps_every_clock_forward_never_back(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")

    def readings() -> tuple[float, float, float, float]:
        time.sleep(0.3)
        ahead = time.time()
        crashpoint("sync")  # harness time has not moved: no jump
        same = time.time()
        mono = time.monotonic()
        crashpoint("lease.check")  # the parent advances 400 s while this one waits
        return ahead, same, time.time(), time.monotonic() - mono

    outcome = paused_while_the_clock_advances(readings, clock, 400)
    assert isinstance(outcome, Completed), outcome
    ahead, same, after, mono_moved = outcome.value
    epoch = HARNESS_EPOCH.timestamp()
    assert ahead - epoch == pytest.approx(0.300001) and same == ahead
    assert after - epoch == pytest.approx(400.300001)
    assert mono_moved == pytest.approx(400.0)  # one clock: monotonic() jumps with wall time


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


def reach_each(path: str, targets: list[float]) -> float:
    clock = HarnessClock(path)
    for target in targets:
        clock.reach(target)
    return clock.now()


def test_reach_moves_forward_only_and_two_processes_at_once_end_at_the_furthest(
    tmp_path: Path,
) -> None:
    """What two workers' waits do at once: each moves the clock to where its wait ends; the
    clock ends at the furthest, never back (the writes hold the clock's lock)."""
    clock = HarnessClock(tmp_path / "clock", start=5.0)
    assert clock.reach(3.0) == 5.0 and clock.now() == 5.0
    assert clock.reach(7.5) == 7.5
    workers = [
        start_worker(reach_each, args=(str(clock.path), [8.0 + n * 0.5 + k for k in range(50)]),
                     timeout=60)
        for n in range(4)
    ]
    for worker in workers:
        assert isinstance(worker.wait(), Completed)
    assert clock.now() == 8.0 + 1.5 + 49
