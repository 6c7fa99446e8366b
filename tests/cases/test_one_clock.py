"""One clock in whole crash cases: what a worker waits moves the providers' time, the same
schedule gives the same times, and the timeline says what was waited and how.

Every skipped wait here is long (an hour, 31 s against a 30 s worker timeout): were it slept,
the case would time out and the test fail. No test measures real time.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import Context
from pytest_crashpoints.harness import Deliver, LoseResponse, Schedule, run_case
from scenarios.patient_mailer import handle

from .conftest import email_task_scenario

JOB = {"task_id": "t-1", "to": "ada@example.com", "subject": "Invoice 31", "body": "310 EUR"}
MAILER = dataclasses.replace(email_task_scenario(handle, JOB), timeout=30.0)


def test_a_lost_answer_waited_out_finds_the_mail_and_the_same_schedule_the_same_times(
    tmp_path: Path,
) -> None:
    golden = run_case(MAILER, Schedule((Deliver(0),)), base_dir=tmp_path)
    lost = Schedule((LoseResponse("email", 1, "timeout"), Deliver(0)))
    runs = [
        run_case(MAILER, lost, base_dir=tmp_path, expected=golden.expected_effects, keep=True)
        for _ in range(2)
    ]
    for result in runs:
        assert result.passed, (result.violations, result.errors)
        assert result.waited.skipped == 31.000001 and result.waited.real == 0
    first, second = (r.timeline for r in runs)
    assert first == second  # times included: the same schedule, the same times
    lines = first.splitlines()
    wait = next(i for i, line in enumerate(lines) if " wait " in line)
    assert lines[wait].startswith("t=     33s") and "waited 31s (time.sleep) in no real time" \
        in lines[wait]
    # The search after the wait runs at harness time 33 s, and shows the mail sent at 2 s.
    assert lines[wait + 1].startswith("t=     33s") and "messages.search" in lines[wait + 1]
    assert sum("mail.send" in line for line in lines) == 1


def sleeps_an_hour_then_mails(message: dict[str, Any], ctx: Context) -> str:
    time.sleep(3600)
    return handle(message, ctx, look_after=0)


def test_two_workers_at_once_each_skip_while_the_other_is_held(tmp_path: Path) -> None:
    """A concurrent delivery: the first worker waits at B while the second runs, each runs
    alone in its turn, so each hour is skipped (the 30 s timeout would end a real one)."""
    case = dataclasses.replace(MAILER, worker=sleeps_an_hour_then_mails)
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert golden.passed, golden.errors
    result = run_case(
        case, Schedule((Deliver(0, duplicate="concurrent", pause_at="B"),)), base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    assert not result.errors, result.errors
    # Each hour skipped, but for what the first worker slept before its twin was held (it
    # starts first and runs freely until then): it is skipped from the moment it runs alone.
    assert result.waited.skipped + result.waited.world >= 2 * 3600
    assert result.waited.real == 0 and result.waited.skipped > 7000
    assert result.timeline.count("waited 3600s (time.sleep) in no real time") >= 2


def mails_beside_a_busy_thread(message: dict[str, Any], ctx: Context) -> str:
    import threading

    stop = threading.Event()
    busy = threading.Thread(target=lambda: [None for _ in iter(lambda: stop.is_set(), True)])
    busy.start()
    try:
        time.sleep(0.2)  # another thread of this process runs meanwhile: a real wait
    finally:
        stop.set()
        busy.join()
    return handle(message, ctx)


def test_a_real_wait_is_named_in_the_timeline_and_moves_the_clock_by_its_length(
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(MAILER, worker=mails_beside_a_busy_thread)
    result = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert result.passed, result.errors
    assert result.waited.world == 0.2 and result.waited.skipped == 0
    assert "worker-1 waited 0.2s (time.sleep), really waited: another thread" in result.timeline


def test_with_the_switch_every_wait_is_real_and_the_times_are_the_same(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PYTEST_CRASHPOINTS_REAL_WAITS", "1")
    case = dataclasses.replace(MAILER, worker=functools.partial(handle, look_after=0.3))
    lost = Schedule((LoseResponse("email", 1, "502"), Deliver(0)))
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    real = run_case(case, lost, base_dir=tmp_path, expected=golden.expected_effects)
    monkeypatch.delenv("PYTEST_CRASHPOINTS_REAL_WAITS")
    skipped = run_case(case, lost, base_dir=tmp_path, expected=golden.expected_effects)
    assert (real.waited.world, real.waited.skipped) == (0.3, 0)
    assert skipped.waited.world == 0 and skipped.waited.skipped == pytest.approx(0.300001)
    strip = [line for line in real.timeline.splitlines() if " wait " not in line]
    assert strip == [line for line in skipped.timeline.splitlines() if " wait " not in line]
    # (the search lags 30 s: after 0.3 s it does not show the mail; both send it again, the
    # same way, at the same times)
