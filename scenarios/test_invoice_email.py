"""Send an invoice email (not idempotent, looked up by correlation id through a lagging search).

The reference worker records the intent, marks it DISPATCHED before the request leaves, and
confirms through the message lookup; recovery reconciles against the provider. Every single
fault at every point it reaches must leave exactly one email and a ledger that agrees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import Authority, reference_recovery, reference_worker

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture

INVOICE = {
    "task_id": "invoice-7",
    "calls": [
        {
            "tool": "send_email",
            "key": "invoice:tenant-7:inv-7:send",
            "args": {
                "to": "billing@customer.example",
                "subject": "Invoice INV-7",
                "body": "Amount due: 120.00 EUR by 2026-09-01.",
            },
        }
    ],
}


@pytest.mark.crashpoints(points="ABCDEF", providers=["email"], mode="exhaustive", max_faults=1)
def test_invoice_email_is_sent_exactly_once(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=reference_recovery,
        messages=[INVOICE],
        authorities={
            "invoice-7": Authority.of(
                tenant_id="tenant-7",
                credential_scope="email:read email:write",
                policy_version="p1",
            )
        },
    )
