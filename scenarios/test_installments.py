"""An installment charger that asks for its credentials before each charge: revoked, narrowed
or moved between the deposit and the balance, it parks the balance for review. No fail point
in its code: the harness waits between its two charges at the answer to the first. (Its twin
that reads its key once per order is in ``broken/test_installments.py``.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.installments import Ask, charge_installments

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pytest_crashpoints import Context, CrashpointsFixture

ORDER = {"task_id": "order-12", "deposit": 3000, "balance": 9000, "customer": "cus_12"}
STATES = {
    "pending": State.DISPATCHED,
    "charged": State.OUTCOME_CONFIRMED,
    "review": State.MANUAL_REVIEW,
}


def installments(ask: Ask) -> Callable[[Mapping[str, Any], Context], str]:
    def worker(order: Mapping[str, Any], ctx: Context) -> str:
        task = str(order["task_id"])

        def credentials(provider: str) -> tuple[str, str] | None:
            # What the integration's store says now: nothing once it was revoked.
            authority = ctx.authority(task)
            if authority is None:
                return None
            return authority.tenant_id, ctx.api_key(provider, task)

        return charge_installments(
            order, db=ctx.env.path / "shop.db", api_url=ctx.base_url("payments"),
            credentials=credentials, ask=ask,
        )

    return worker


def charges(ctx: Context) -> SQLiteLedgerView:
    columns = {"attempt_id": "id", "task_id": "order_id", "state": "status",
               "idempotency_key": "idem_key", "result_ref": "charge_id", "tenant_id": "account"}
    return SQLiteLedgerView(ctx.env.path / "shop.db", table="charges", columns=columns,
                            states=STATES)


@pytest.mark.crashpoints(
    points="ABCDE", providers=["payments"], mode="exhaustive", strict_coverage=False
)
def test_credentials_asked_before_each_charge(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(worker=installments("each"), messages=[ORDER], ledger_view=charges)
