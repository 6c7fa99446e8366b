"""An agent's own reference ledger on the wall clock (``Ledger(path)``, ``time.time`` as in
production) beside the harness's adapters and timeline, which run on harness seconds: the
search lag is weighed on the ledger's clock, and its events stand at their harness time."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from pytest_crashpoints import Context, Ledger, ProviderSpec, guarded_call, recover
from pytest_crashpoints.harness import Deliver, Refuse, Scenario, Schedule, run_case
from tests.cases.test_broken_on_purpose import EMAIL, authority


def _ledger(ctx: Context) -> Ledger:
    return Ledger(ctx.env.path / "own-ledger.sqlite3")  # the wall clock: time.time


def worker(message: Any, ctx: Context) -> str:
    with _ledger(ctx) as ledger:
        return guarded_call(
            ledger, ctx.adapters()["send_email"], task_id=message["task_id"], args=EMAIL,
            idempotency_key="invoice:inv-7:send", authority=ctx.authority(message["task_id"]),
            actor=ctx.worker_id,
        ).state.value


def reconcile(ctx: Context) -> None:
    with _ledger(ctx) as ledger:
        recover(ledger, ctx.adapters(), owner=ctx.worker_id)


def gives_up(ctx: Context) -> None:
    """A recovery that reconciles nothing: the refused send's attempt stays in flight."""


def scenario(recover_with: Any) -> Scenario:
    return Scenario(
        worker=worker, recover=recover_with, messages=({"task_id": "t-1"},),
        providers=(ProviderSpec("email"),),
        authorities={"t-1": authority("email:read", "email:write")},
        ledger_view=_ledger,
    )


REFUSED = Schedule((Refuse("email", 1), Deliver(0)))


def _read_only(ctx: Context) -> Ledger:
    return Ledger(ctx.env.path / "own-ledger.sqlite3", read_only=True)


@pytest.mark.parametrize("view", [_ledger, _read_only], ids=["ledger", "read-only"])
def test_a_refused_send_is_found_absent_and_sent_again(tmp_path: Any, view: Any) -> None:
    """(Read-only, the view cannot open the ledger before the worker has made it: at the
    case's set-up that is a ledger not made yet, not one the faults left unreadable.)"""
    case = run_case(dataclasses.replace(scenario(reconcile), ledger_view=view), REFUSED,
                    base_dir=tmp_path)
    assert case.passed, case.timeline + "\n" + "\n".join(map(str, case.violations))


def test_its_ledger_events_stand_at_their_harness_time_in_the_timeline(tmp_path: Any) -> None:
    case = run_case(scenario(gives_up), REFUSED, base_dir=tmp_path)
    assert not case.passed
    ledger_rows = [line for line in case.timeline.splitlines() if " ledger " in line]
    assert ledger_rows, case.timeline
    for line in ledger_rows:
        at = float(re.match(r"t=\s*([0-9.e+]+)s", line).group(1))  # type: ignore[union-attr]
        assert at < 1_000, case.timeline
    # In order: the intent and the dispatch before the refused request, not after the end.
    lines = case.timeline.splitlines()
    refused = next(i for i, line in enumerate(lines) if "refused by the fault" in line)
    assert any(" ledger " in line for line in lines[:refused]), case.timeline
