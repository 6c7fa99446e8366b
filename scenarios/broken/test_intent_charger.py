"""Broken on purpose: the PaymentIntent charger in WAL with ``synchronous=NORMAL``, no
idempotency key and no look-up for an order it takes for new. Killed after Stripe made the
PaymentIntent (B) and the power lost, the ``pending`` row was never synced: delivered again,
the order looks new and is charged a second time (invariant 1). Its three fixes pass in
``scenarios/test_intent_charger.py``."""

from __future__ import annotations

import pytest

from scenarios.test_intent_charger import ORDER, charger, orders


@pytest.mark.crashpoints(providers=["payments"], mode="exhaustive", strict_coverage=False,
                         expect=1)
def test_an_unsynced_pending_row_lost_to_a_power_loss_charges_twice(crashpoints):
    report = crashpoints.run(worker=charger(synchronous="NORMAL"), messages=[ORDER],
                             ledger_view=orders)
    assert "power" in str(report.failure.schedule)
