"""A multi-step task for several tenants: charge the month's subscription, email the receipt,
and open a ticket for the account manager; one message per tenant, several tool calls each,
over three providers.

The worker records the whole plan before acting (:mod:`scenarios.planned_worker`), so a crash
between two steps leaves the later ones to recovery rather than losing them. Every single
fault at every point, on either message, must end with each effect exactly once, each under
its own tenant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import reference_recovery
from scenarios.planned_worker import planned_worker

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture


def _month_end(tenant: str, amount: int) -> dict[str, object]:
    period = "2026-08"
    return {
        "task_id": f"close:{tenant}:{period}",
        "tenant": tenant,
        "calls": [
            {
                "tool": "charge",
                "key": f"subscription:{tenant}:{period}:charge",
                "args": {"amount": amount, "currency": "eur", "customer": f"cus_{tenant}"},
            },
            {
                "tool": "send_email",
                "key": f"subscription:{tenant}:{period}:receipt",
                "args": {
                    "to": f"billing@{tenant}.example",
                    "subject": f"Receipt {period}",
                    "body": f"We charged {amount / 100:.2f} EUR for {period}.",
                },
            },
            {
                "tool": "open_ticket",
                "key": f"subscription:{tenant}:{period}:review",
                "args": {
                    "repo": f"{tenant}/accounts",
                    "title": f"Month-end review {period}",
                    "body": "Check the charge and the receipt.",
                },
            },
        ],
    }


@pytest.mark.crashpoints(
    points="ABCDEF",
    providers=["payments", "email", "tickets"],
    mode="exhaustive",
    max_faults=1,
)
def test_month_end_close_for_two_tenants(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=planned_worker,
        recover=reference_recovery,
        messages=[_month_end("tenant-7", 4900), _month_end("tenant-8", 12900)],
    )
