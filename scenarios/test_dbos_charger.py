"""A DBOS workflow charging an order (``dbos_charger.py``), crash-tested with DBOS's own
recovery: the worker is killed around the step's charge; the next process's
``DBOS.launch()`` (a redelivery, or the recovery the harness runs, two of them at once
included) recovers the pending workflow from its last checkpoint and runs the step again.
With a key derived from the workflow's id the provider replays the first charge: one charge.
Its twin without a key is in ``broken/test_dbos_charger.py``. The ledger the invariants read
is DBOS's own ``workflow_status`` table."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("dbos", reason="the DBOS scenario needs dbos (pip install dbos)")

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import dbos_charger

ORDER = {"task_id": "order-7", "amount": 4200}
STATES = {"PENDING": State.DISPATCHED, "ENQUEUED": State.INTENT_RECORDED,
          "SUCCESS": State.OUTCOME_CONFIRMED, "ERROR": State.FAILED,
          "CANCELLED": State.FAILED, "MAX_RECOVERY_ATTEMPTS_EXCEEDED": State.MANUAL_REVIEW}


def _env(ctx, task_id):
    import os

    os.environ["PAYMENTS_URL"] = ctx.base_url("payments")
    os.environ["PAYMENTS_KEY"] = ctx.api_key("payments", task_id)


def worker(order, ctx, *, keyed=True):
    _env(ctx, order["task_id"])
    return dbos_charger.handle(order, db=str(ctx.env.path / "dbos.sqlite"), keyed=keyed)


def recovery(ctx, *, keyed=True):
    _env(ctx, ORDER["task_id"])
    dbos_charger.recover(db=str(ctx.env.path / "dbos.sqlite"), keyed=keyed)


def workflows(ctx):
    return SQLiteLedgerView(ctx.env.path / "dbos.sqlite", table="workflow_status", states=STATES,
                            columns={"attempt_id": "workflow_uuid", "state": "status"})


@pytest.mark.crashpoints(points="ABC", providers=["payments"], mode="exhaustive",
                         strict_coverage=False)
def test_a_step_keyed_by_its_workflow_charges_once(crashpoints):
    crashpoints.run(worker=worker, recover=recovery, messages=[ORDER], ledger_view=workflows)


def unkeyed_worker(order, ctx):
    return worker(order, ctx, keyed=False)


unkeyed_recovery = functools.partial(recovery, keyed=False)
