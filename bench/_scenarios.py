"""The reference scenarios the benchmarks run: the reference worker and recovery, the email
provider (not idempotent, lookup through a lagging search), one task."""

from __future__ import annotations

from pytest_crashpoints import Authority, ProviderSpec, reference_recovery, reference_worker
from pytest_crashpoints.harness import KillAt, Scenario

__all__ = ["AUTHORITY", "KillAt", "email_scenario"]

AUTHORITY = Authority.of(
    tenant_id="tenant-7", credential_scope="email:read email:write", policy_version="p1"
)


def email_scenario(*, calls: int = 1, messages: int = 1) -> Scenario:
    """``messages`` messages of one task, each making ``calls`` ``send_email`` calls."""
    return Scenario(
        worker=reference_worker,
        recover=reference_recovery,
        messages=tuple(
            {
                "task_id": "t-1",
                "calls": [
                    {
                        "tool": "send_email",
                        "key": f"invoice:tenant-7:inv-{m}-{c}:send",
                        "args": {
                            "to": "billing@example.com",
                            "subject": f"Invoice inv-{m}-{c}",
                            "body": "Due: 100 EUR",
                        },
                    }
                    for c in range(calls)
                ],
            }
            for m in range(messages)
        ),
        providers=(ProviderSpec("email"),),
        authorities={"t-1": AUTHORITY},
    )
