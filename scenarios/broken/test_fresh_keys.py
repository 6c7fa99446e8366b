"""A fresh idempotency key per try double-charges after a crash, however the key is kept.

``scenarios/order_charger.py`` charges an order with a new random key on every try: recorded
(a row per try), overwritten (one row, the key replaced) or never recorded at all. Killed
after the provider charged (B), the order is delivered again and charged a second time. The
harness counts the charges from the payments provider's journal and attributes each to the
process that made it: what the agent kept of its keys cannot hide the second one (invariant
1). The same charger with a key derived from the order passes (``test_order_charger.py``).
"""

import pytest

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import order_charger

ORDER = {"task_id": "order-7", "amount": 4200, "customer": "cus_7"}
STATES = {"pending": State.DISPATCHED, "charged": State.OUTCOME_CONFIRMED}


def charger(keys, *, log_commit_errors=False, synchronous=None):
    def worker(order, ctx):
        url, key = ctx.base_url("payments"), ctx.api_key("payments", order["task_id"])
        db = ctx.env.path / "shop.db"
        return order_charger.charge_order(order, db=db, api_url=url, api_key=key, keys=keys,
                                          log_commit_errors=log_commit_errors,
                                          synchronous=synchronous)

    return worker


def orders(ctx):
    columns = {"attempt_id": "id", "state": "status", "idempotency_key": "idem_key"}
    columns["result_ref"] = "charge_id"
    path = ctx.env.path / "shop.db"
    return SQLiteLedgerView(path, table="orders", columns=columns, states=STATES)


def attempts(ctx):
    columns = {"attempt_id": "idem_key", "task_id": "order_id", "state": "status"}
    columns.update(idempotency_key="idem_key", result_ref="charge_id")
    path = ctx.env.path / "shop.db"
    return SQLiteLedgerView(path, table="charge_attempts", columns=columns, states=STATES)


@pytest.mark.parametrize(
    ("keys", "view"),
    [("fresh-recorded", attempts), ("fresh-overwritten", orders), ("fresh-unrecorded", orders)],
)
@pytest.mark.crashpoints(
    points="BC", providers=["payments"], mode="exhaustive", expect=1, strict_coverage=False
)
def test_a_fresh_key_per_try_charges_twice(crashpoints, keys, view):
    crashpoints.run(worker=charger(keys), messages=[ORDER], ledger_view=view)


@pytest.mark.crashpoints(
    points=["db.commit"], faults=["failed_commit"], providers=["payments"], mode="exhaustive",
    expect=2, strict_coverage=False,
)
def test_a_failed_commit_logged_and_taken_for_done(crashpoints):
    # BUG: recording the charge fails, the charger logs it and reports the order charged; the
    # order stays pending for good (invariant 2).
    crashpoints.run(worker=charger("stable", log_commit_errors=True), messages=[ORDER],
                    ledger_view=orders)
