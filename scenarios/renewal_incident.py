"""The renewal charger as its crash tests run it: the worker, the recovery and the ledger view
(with the fix, and with the bug production had), and the incident of 2026-11-30 in
``scenarios/incident/``: November's renewal stuck ``charging``, and Stripe holding its
charge. ``crashpoints reproduce`` names these functions (docs/howto-incident.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_crashpoints import Context, Incident, SQLiteLedgerView, State
from scenarios import renewal_charger

INCIDENT_DIR = Path(__file__).parent / "incident"
#: The message the queue redelivers: November's renewal, never acknowledged.
RENEWAL = json.loads((INCIDENT_DIR / "message.json").read_text())
INCIDENT = Incident(
    ledger=INCIDENT_DIR / "renewals.sql",
    exports={"payments": INCIDENT_DIR / "charges.json"},
)
STATES = {"charging": State.DISPATCHED, "charged": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def worker(renewal: Mapping[str, Any], ctx: Context) -> str:
    """The fixed worker: a row left ``charging`` is settled by asking Stripe."""
    return _renew(renewal, ctx, "lookup")


def recovery(ctx: Context) -> None:
    """The fixed start-up recovery."""
    _recover(ctx, "lookup")


def worker_that_retries(renewal: Mapping[str, Any], ctx: Context) -> str:
    """The worker as production ran it: a row left ``charging`` is charged again."""
    return _renew(renewal, ctx, "retry")


def recovery_that_retries(ctx: Context) -> None:
    """The start-up recovery as production ran it."""
    _recover(ctx, "retry")


def renewals(ctx: Context) -> SQLiteLedgerView:
    """The renewals table as the ledger the invariants read."""
    return SQLiteLedgerView(
        ctx.env.path / "billing.db", table="renewals", states=STATES,
        columns={"attempt_id": "id", "task_id": "id", "state": "status",
                 "idempotency_key": "idem_key", "result_ref": "charge_id"},
    )


def _renew(renewal: Mapping[str, Any], ctx: Context, settle: renewal_charger.Settle) -> str:
    return renewal_charger.renew(
        renewal, db=ctx.env.path / "billing.db", api_url=ctx.base_url("payments"),
        api_key=_key(ctx, str(renewal["task_id"])), settle=settle,
    )


def _recover(ctx: Context, settle: renewal_charger.Settle) -> None:
    renewal_charger.recover(
        db=ctx.env.path / "billing.db", api_url=ctx.base_url("payments"),
        api_key=_key(ctx, ctx.tasks()[0]), settle=settle,
    )


def _key(ctx: Context, task: str) -> str:
    # What the billing integration's key store holds now: nothing valid once revoked.
    return ctx.api_key("payments", task) if ctx.authority(task) is not None else "sk_revoked"
