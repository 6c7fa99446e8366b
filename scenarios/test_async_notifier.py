"""An async def agent under every single fault at A, B, C and D: one notice or a parked one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.async_notifier import notify

if TYPE_CHECKING:
    from pytest_crashpoints import Context, CrashpointsFixture

JOB = {"task_id": "ship-9", "to": "ada@example.com", "text": "Order 9 is on its way."}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def notices(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "notices.db", table="notices", states=STATES,
                            columns={"attempt_id": "id", "state": "status"})


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive", max_faults=1,
                         strict_coverage=False)  # four columns: invariants 3 to 5 unchecked
def test_an_async_agent_sends_each_notice_at_most_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=notify, messages=[JOB], ledger_view=notices)
