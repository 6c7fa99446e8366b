"""The support agent made durable by Pydantic AI's DBOS integration
(``pydantic_dbos_support.py``), crash-tested with DBOS's own recovery: the worker is killed
around each of its steps (the model's answers, the look-up, the refund) and at each of DBOS's
commits; the next process's ``DBOS.launch()`` (a redelivery, or the recovery the harness
runs, two of them at once included) recovers the pending workflow from its last checkpoint.
The model's checkpointed answers are replayed, a step cut short runs again, and with a key
derived from the workflow's id Stripe replays the first refund: one refund. On Anthropic's
Messages, which Pydantic AI streams inside the model's step.

The ledger the invariants read is DBOS's own ``workflow_status`` table. Its twin without a
key is in ``broken/test_pydantic_ai_dbos.py``."""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai.durable_exec.dbos",
    reason="the Pydantic AI scenarios need pydantic-ai with DBOS: pip install -e .[agents]",
)

if sys.version_info >= (3, 12) and sqlite3.sqlite_version_info < (3, 42):
    # DBOS on Python 3.12+ writes its system database with unixepoch('subsec').
    pytest.skip(f"DBOS on Python 3.12+ needs SQLite 3.42 or later, not {sqlite3.sqlite_version}",
                allow_module_level=True)

from pytest_crashpoints import Context, SQLiteLedgerView, State
from scenarios import pydantic_dbos_support
from scenarios.support_agent import TICKET, create_charge
from scenarios.test_pydantic_ai import ANTHROPIC, SCRIPT

STATES = {"PENDING": State.DISPATCHED, "ENQUEUED": State.INTENT_RECORDED,
          "SUCCESS": State.OUTCOME_CONFIRMED, "ERROR": State.FAILED,
          "CANCELLED": State.FAILED, "MAX_RECOVERY_ATTEMPTS_EXCEEDED": State.MANUAL_REVIEW}


def _stripe_env(ctx: Context, task_id: str) -> None:
    os.environ["STRIPE_URL"] = ctx.base_url("payments")
    os.environ["STRIPE_KEY"] = ctx.api_key("payments", task_id)


def _db(ctx: Context) -> str:
    return str(ctx.env.path / "dbos.sqlite")


async def worker(ticket: dict[str, Any], ctx: Context, *, keyed: bool = True) -> str:
    _stripe_env(ctx, str(ticket["task_id"]))
    return await pydantic_dbos_support.handle(ticket, db=_db(ctx), model=ANTHROPIC, keyed=keyed)


def recovery(ctx: Context, *, keyed: bool = True) -> None:
    _stripe_env(ctx, str(TICKET["task_id"]))
    pydantic_dbos_support.recover(db=_db(ctx), model=ANTHROPIC, keyed=keyed)


def workflows(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "dbos.sqlite", table="workflow_status", states=STATES,
                            columns={"attempt_id": "workflow_uuid", "state": "status"})


# No D: DBOS makes a second delivery of the ticket wait for the outcome of the first (one
# workflow per id), which a first held at a point by the schedule never gives.
@pytest.mark.crashpoints(points=["A", "B", "C", "model.tool_call"],
                         providers=["model", "payments"], mode="exhaustive",
                         strict_coverage=False)
def test_a_refund_keyed_by_its_workflow_is_made_once(crashpoints):
    crashpoints.run(worker=worker, recover=recovery, messages=[TICKET], model=SCRIPT,
                    setup=create_charge, ledger_view=workflows)


async def unkeyed_worker(ticket: dict[str, Any], ctx: Context) -> str:
    return await worker(ticket, ctx, keyed=False)


unkeyed_recovery = functools.partial(recovery, keyed=False)
