"""Open a support ticket (GitHub-like issues: not idempotent; the repository owner is the
tenant; the created issue is a durable receipt; looked up by a correlation label)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import Authority, reference_recovery, reference_worker

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture

TICKET = {
    "task_id": "ticket-7",
    "calls": [
        {
            "tool": "open_ticket",
            "key": "payment-failed:tenant-7:order-7:ticket",
            "args": {
                "repo": "tenant-7/billing",
                "title": "Payment for order 7 failed",
                "body": "The card was declined twice; please contact the customer.",
                "labels": ["billing", "payment-failed"],
            },
        }
    ],
}


@pytest.mark.crashpoints(points="ABCDEF", providers=["tickets"], mode="exhaustive", max_faults=1)
def test_ticket_is_opened_exactly_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=reference_recovery,
        messages=[TICKET],
        authorities={
            "ticket-7": Authority.of(
                tenant_id="tenant-7",
                credential_scope="tickets:read tickets:write",
                policy_version="p1",
            )
        },
    )
