"""The renewal charger with the fix, tested two ways: the usual crash test from an empty world,
and from the incident production left on 2026-11-30 (``scenarios/incident/``): November's
renewal stuck ``charging``, and Stripe holding its charge. Settling a stuck row by asking
Stripe confirms the charge that was made, and never charges again (docs/howto-incident.md).
Its twin that charges again is in ``broken/test_renewal_charger.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_crashpoints import Incident, SQLiteLedgerView, State
from scenarios import renewal_charger

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytest_crashpoints import Context, CrashpointsFixture

INCIDENT_DIR = Path(__file__).parent / "incident"
#: The message the queue redelivers: November's renewal, never acknowledged.
RENEWAL = json.loads((INCIDENT_DIR / "message.json").read_text())
INCIDENT = Incident(
    ledger=INCIDENT_DIR / "renewals.sql",
    exports={"payments": INCIDENT_DIR / "charges.json"},
)
STATES = {"charging": State.DISPATCHED, "charged": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def worker(renewal: Mapping[str, Any], ctx: Context, *, settle: str = "lookup") -> str:
    return renewal_charger.renew(
        renewal, db=ctx.env.path / "billing.db", api_url=ctx.base_url("payments"),
        api_key=_key(ctx, renewal["task_id"]), settle=settle,  # type: ignore[arg-type]
    )


def recovery(ctx: Context, *, settle: str = "lookup") -> None:
    renewal_charger.recover(
        db=ctx.env.path / "billing.db", api_url=ctx.base_url("payments"),
        api_key=_key(ctx, ctx.tasks()[0]), settle=settle,  # type: ignore[arg-type]
    )


def _key(ctx: Context, task: str) -> str:
    # What the billing integration's key store holds now: nothing valid once revoked.
    return ctx.api_key("payments", task) if ctx.authority(task) is not None else "sk_revoked"


def renewals(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(
        ctx.env.path / "billing.db", table="renewals", states=STATES,
        columns={"attempt_id": "id", "task_id": "id", "state": "status",
                 "idempotency_key": "idem_key", "result_ref": "charge_id"},
    )


@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive")
def test_each_renewal_is_charged_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=worker, recover=recovery, messages=[RENEWAL], ledger_view=renewals)


# Settled right, the incident never charges: A and B stay unreached (strict_coverage=False).
@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", max_faults=1,
                         strict_coverage=False)
def test_the_november_incident_is_settled_without_a_second_charge(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(worker=worker, recover=recovery, messages=[RENEWAL], ledger_view=renewals,
                    incident=INCIDENT)
