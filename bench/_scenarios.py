"""The reference scenarios the benchmarks run: the reference worker and recovery, the email
provider (not idempotent, lookup through a lagging search), one task."""

from __future__ import annotations

from pytest_crashpoints import Authority
from pytest_crashpoints._case import Scenario
from pytest_crashpoints._context import ProviderSpec
from pytest_crashpoints._reference import reference_recovery, reference_worker

try:
    from pytest_crashpoints._schedule import KillAt
except ImportError:  # before the rename of the schedule's Kill (the fail point's is Kill too)
    from pytest_crashpoints._schedule import Kill as KillAt  # type: ignore[attr-defined,no-redef]

__all__ = ["AUTHORITY", "KillAt", "email_scenario", "warm_parent"]

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


def warm_parent() -> None:
    """What recommendation R1 (docs/performance.md) asks the harness to do once per process,
    done here from the outside: import what every worker imports, and let freezegun build its
    module cache in the parent, so each forked worker inherits both instead of redoing them."""
    import datetime

    import freezegun
    import httpx  # noqa: F401

    import fake_providers  # noqa: F401
    import pytest_crashpoints._adapters
    import pytest_crashpoints._recovery
    import pytest_crashpoints._transport  # noqa: F401

    freezer = freezegun.freeze_time(datetime.datetime(2026, 1, 1))
    freezer.start()
    freezer.stop()
