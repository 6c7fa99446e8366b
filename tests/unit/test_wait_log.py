"""The wait log (what workers write, what the timeline reads), the interleaving's plan, and the
switches: pure files and text, no process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_crashpoints._harness.case.waited import Waited, read_waits
from pytest_crashpoints._harness.verdict.history import History
from pytest_crashpoints._process import switches
from pytest_crashpoints._process.plan import nobody_alone, plan_path, read_plan, write_plan
from pytest_crashpoints._process.waits import log_path, read_log, records_by_run


def _record(pid: int, seconds: float, at: float, why: str | None = None, real: bool = False,
            what: str = "time.sleep", process: str = "worker-1") -> str:
    return json.dumps({"pid": pid, "process": process, "what": what, "seconds": seconds,
                       "at": at, "why": why, "real": real}) + "\n"


def test_the_log_is_read_whole_lines_only_and_from_where_the_last_read_ended(
    tmp_path: Path,
) -> None:
    log = log_path(tmp_path / "clock")
    log.write_text(_record(1, 31.0, 33.0) + '{"pid": 1, "tor')  # a line cut short by a kill
    records, end = read_log(log)
    assert [r["seconds"] for r in records] == [31.0]
    assert read_log(log, end) == ([], end)  # the torn line waits for its end
    with log.open("a") as file:
        file.write("n garbage\n" + _record(1, 2.0, 35.0))
    records, end = read_log(log, end)
    assert [r["seconds"] for r in records] == [2.0]  # the torn one is skipped, not guessed
    # A log put back shorter (a crash state) is read again from its start.
    log.write_text(_record(2, 5.0, 7.0))
    assert [r["pid"] for r in read_log(log, end)[0]] == [2]
    assert read_log(tmp_path / "none") == ([], 0)


def test_waits_of_one_process_that_went_the_same_way_make_one_line(tmp_path: Path) -> None:
    log = log_path(tmp_path / "clock")
    lines = [
        _record(1, 31.000001, 33.000001),
        _record(1, 1.0, 34.0, "a connection to pid 9 (redis-server)", True),
        _record(1, 2.0, 36.0, "a connection to pid 9 (redis-server)", True),
        _record(2, 0.5, 36.5, "another thread (python, 5) can move", process="worker-2"),
    ]
    log.write_text("".join(lines))
    records, _ = read_log(log)
    assert [len(run) for run in records_by_run(records)] == [1, 2, 1]
    history, waited = History(), Waited()
    read_waits(str(tmp_path / "clock"), 0, history, 3, waited)
    assert [(e.at, e.kind, e.step, e.text) for e in history.entries] == [
        (33.000001, "wait", 3, "worker-1 waited 31s (time.sleep) in no real time"),
        (36.0, "wait", 3, "worker-1 waited 3s for real (2 waits, time.sleep): a connection "
                          "to pid 9 (redis-server)"),
        (36.5, "wait", 3, "worker-2 waited 0.5s (time.sleep), really waited: another thread "
                          "(python, 5) can move"),
    ]
    assert history.entries[0].data == {"process": "worker-1"}
    assert waited.to_json() == {"skipped": 31.0, "real": 3.0, "world": 0.5, "waits": 4}
    total = Waited()
    total.merge(waited)
    total.merge(waited)
    assert total.to_json() == {"skipped": 62.0, "real": 6.0, "world": 1.0, "waits": 8}


def test_the_plan_names_one_runner_or_nobody_and_is_gone_after(tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    plan = plan_path(clock)
    assert read_plan(plan) is None  # no plan: one process at a time, it runs alone
    with nobody_alone(clock):
        assert read_plan(plan) == (0, 0.0)
        write_plan(clock, 1234, 56.5)
        assert read_plan(plan) == (1234, 56.5)
    assert not plan.exists()
    plan.write_text("garbage")
    assert read_plan(plan) == (0, 0.0)  # unreadable: names nobody, never "no plan"
    with nobody_alone(None):  # no clock: nothing written
        assert read_plan(plan) == (0, 0.0)


@pytest.mark.parametrize(("value", "on"), [("1", True), ("yes", True), (" On ", True),
                                           ("0", False), ("off", False), ("", False)])
def test_a_switch_is_on_unless_it_says_off(
    monkeypatch: pytest.MonkeyPatch, value: str, on: bool
) -> None:
    monkeypatch.setenv(switches.REAL_WAITS_ENV, value)
    assert switches.switched_on(switches.REAL_WAITS_ENV) is on
    monkeypatch.delenv(switches.REAL_WAITS_ENV)
    assert switches.switched_on(switches.REAL_WAITS_ENV) is False
