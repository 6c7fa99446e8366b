"""An order charger on Stripe's PaymentIntents whose recovery lists the customer's
PaymentIntents (``intent_charger.py``), crash-tested under every default fault. Three correct
ways to survive a power loss that takes the ``pending`` row: SQLite's default sync, a key
derived from the order, or a look-up before every charge. (Its broken twin, WAL with
``synchronous=NORMAL`` and none of these, is in ``broken/test_intent_charger.py``.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_crashpoints import Context, SQLiteLedgerView, State
from scenarios import intent_charger

ORDER = {"task_id": "order-7", "customer": "cus_ada", "amount": 2900}


def charger(**variant: Any) -> Callable[[dict[str, Any], Context], str]:
    """The charger of ``variant`` (see ``intent_charger.charge``) as a worker."""

    def worker(order: dict[str, Any], ctx: Context) -> str:
        db = ctx.env.path / "shop.db"
        authority = ctx.authority(order["task_id"])
        if authority is None:  # its credentials were revoked
            return intent_charger.park(order, db=db, synchronous=variant.get(
                "synchronous", "FULL"))
        return intent_charger.charge(
            order, db=db, api_url=ctx.base_url("payments"),
            api_key=ctx.api_key("payments", authority), account=authority.tenant_id,
            policy=authority.policy_version, **variant)

    return worker


def orders(ctx: Context) -> SQLiteLedgerView:
    """The charger's own table: one row an order, its status and lease holder."""
    return SQLiteLedgerView(
        ctx.env.path / "shop.db", table="orders",
        columns={"attempt_id": "id", "state": "status", "owner": "owner",
                 "result_ref": "intent_id"},
        states={"pending": State.DISPATCHED, "charged": State.OUTCOME_CONFIRMED,
                "review": State.MANUAL_REVIEW})


def charged_in(mode: str = "exhaustive") -> pytest.MarkDecorator:
    return pytest.mark.crashpoints(providers=["payments"], mode=mode, strict_coverage=False)


@charged_in()
def test_with_sqlites_default_sync_the_pending_row_survives(crashpoints):
    crashpoints.run(worker=charger(), messages=[ORDER], ledger_view=orders)


@charged_in()
def test_a_key_derived_from_the_order_survives_a_power_loss(crashpoints):
    crashpoints.run(worker=charger(synchronous="NORMAL", idempotency_key=True),
                    messages=[ORDER], ledger_view=orders)


@charged_in()
def test_looking_up_before_every_charge_survives_a_power_loss(crashpoints):
    crashpoints.run(worker=charger(synchronous="NORMAL", look_up_first=True),
                    messages=[ORDER], ledger_view=orders)
