"""Charge a payment: with the provider's idempotency keys, and without them.

With idempotency (Stripe-like), recovery may retry a charge it cannot find with the *same*
key: the provider replays the first answer instead of charging again. Without it, the charge
is only looked up (by id, or by a metadata search that lags), never retried blindly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import ProviderSpec, reference_recovery, reference_worker

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


def _order(task_id: str, tenant: str, amount: int) -> dict[str, object]:
    return {
        "task_id": task_id,
        "tenant": tenant,
        "calls": [
            {
                "tool": "charge",
                "key": f"order:{tenant}:{task_id}:charge",
                "args": {
                    "amount": amount,
                    "currency": "eur",
                    "customer": f"cus_{tenant}",
                    "description": f"Order {task_id}",
                },
            }
        ],
    }


@pytest.mark.crashpoints(points="ABCDEF", providers=["payments"], mode="exhaustive", max_faults=1)
def test_charge_with_idempotency_keys_happens_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=reference_recovery,
        messages=[_order("order-7", "tenant-7", 4200)],
    )


@pytest.mark.crashpoints(
    points="ABCDEF",
    providers=[ProviderSpec("payments", idempotency=False)],
    mode="exhaustive",
    max_faults=1,
)
def test_charge_without_idempotency_is_never_retried_blindly(
    crashpoints: CrashpointsFixture,
) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=reference_recovery,
        messages=[_order("order-8", "tenant-8", 990)],
    )


@pytest.mark.crashpoints(
    points="ABCDEF", providers=["payments"], mode="hypothesis", max_examples=12, max_faults=2
)
def test_two_orders_survive_generated_schedules(crashpoints: CrashpointsFixture) -> None:
    # Hypothesis draws up to two faults at once over both messages and shrinks a failure.
    crashpoints.run(
        worker=reference_worker,
        recover=reference_recovery,
        messages=[_order("order-21", "tenant-2", 1500), _order("order-31", "tenant-3", 2500)],
    )
