"""The renewal charger as its crash tests run it: the worker, the recovery and the ledger view
(with the fix, and with the bug production had), and two incidents it had.

- 2026-11-30 (``scenarios/incident/``): November's renewal stuck ``charging``, and Stripe
  holding its charge.
- 2024-06-14 (``scenarios/incident_2024/``): June's renewal stuck ``charging`` the same way;
  Stripe's list of the customer's charges also holds the charge of the customer's other
  subscription (``ren-team-2024-06``), made three seconds later by the same service, which
  the ledger copy (cut down to this subscription) has no row of: that renewal's history,
  never June's. Its worker is long dead: the recovery alone settles it (no message).

``crashpoints reproduce`` names these functions (docs/howto-incident.md)."""

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
INCIDENT_2024_DIR = Path(__file__).parent / "incident_2024"
#: The message of June's renewal, for the incident's reproduction with its worker.
RENEWAL_2024 = json.loads((INCIDENT_2024_DIR / "message.json").read_text())
INCIDENT_2024 = Incident(
    ledger=INCIDENT_2024_DIR / "renewals.sql",
    exports={"payments": INCIDENT_2024_DIR / "charges.json"},
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


def recovery_that_does_nothing(ctx: Context) -> None:
    """A start-up recovery that settles nothing (a stub left in): it causes nothing, so an
    incident's charges are never its duplicates; the rows it leaves stuck are its failure."""


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
