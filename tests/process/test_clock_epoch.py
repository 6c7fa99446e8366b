"""A run's epoch: the wall time its harness time 0 stands for. The harness's by default; a
run that starts from an incident has its own, kept beside the clock, and every worker's wall
time starts there, a worker forked from the fork server (pinned at the harness's) included."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from pytest_crashpoints._harness.storage.agentfiles import agent_files
from pytest_crashpoints._harness.storage.crashstates import _skipped
from pytest_crashpoints._process.clock import HARNESS_EPOCH
from pytest_crashpoints._process.forkserver import serving
from pytest_crashpoints._process.outcome import Completed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import HarnessClock

#: 2024-06-14T09:30:01Z
JUNE = 1718357401.0


def test_a_run_has_the_harness_epoch_until_it_is_given_its_own(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock", start=64.0)
    assert clock.epoch() == HARNESS_EPOCH.timestamp()
    clock.set_epoch(JUNE)
    assert clock.datetime() == dt.datetime(2024, 6, 14, 9, 31, 5, tzinfo=dt.timezone.utc)
    # Another process's view of the run (a clock opened on the same file) reads it too.
    assert HarnessClock(tmp_path / "clock").epoch() == JUNE
    assert (tmp_path / "clock.epoch").read_text() == repr(JUNE)


def test_the_epoch_is_given_once_and_is_a_number(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    with pytest.raises(HarnessUsageError, match="give Unix seconds"):
        clock.set_epoch(float("nan"))
    clock.set_epoch(JUNE)
    with pytest.raises(HarnessUsageError, match="has an epoch already"):
        HarnessClock(tmp_path / "clock").set_epoch(JUNE + 1)
    assert clock.epoch() == JUNE


def test_a_workers_wall_time_starts_at_the_runs_epoch(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock", start=64.0)
    clock.set_epoch(JUNE)

    def read_time() -> tuple[float, str]:
        return time.time(), dt.datetime.now(dt.timezone.utc).isoformat()

    outcome = run_worker(read_time, clock=clock, timeout=30)
    assert isinstance(outcome, Completed), outcome
    wall, iso = outcome.value
    assert 0 <= wall - (JUNE + 64) < 1.0
    assert iso.startswith("2024-06-14T09:31:0")


def test_a_worker_of_the_fork_server_goes_back_to_an_earlier_epoch(tmp_path: Path) -> None:
    """The fork server pins its own wall time at the harness's epoch (2026); a run from a 2024
    incident moves its workers' back to 2024."""
    clock = HarnessClock(tmp_path / "clock", start=5.0)
    clock.set_epoch(JUNE)
    with serving() as server:
        assert server is not None
        outcome = run_worker(time.time, clock=clock, timeout=30)
    assert isinstance(outcome, Completed), outcome
    assert 0 <= outcome.value - (JUNE + 5) < 1.0


def test_the_epoch_is_part_of_a_crash_state_and_never_the_agents_file(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    clock.set_epoch(JUNE)
    (tmp_path / "jobs.db").write_text("")
    assert not _skipped("clock.epoch")
    assert [p.name for p in agent_files(tmp_path)] == ["jobs.db"]
