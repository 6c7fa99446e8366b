"""Helpers shared by the crash-case tests."""

from __future__ import annotations

from typing import Any

from pytest_crashpoints import Authority, ProviderSpec
from pytest_crashpoints.harness import Scenario

#: A message for the reference worker: task ``t-1`` sends one e-mail.
INVOICE_EMAIL: dict[str, Any] = {
    "task_id": "t-1",
    "calls": [
        {
            "tool": "send_email",
            "key": "invoice:t-1:send",
            "args": {"to": "ada@example.com", "subject": "Invoice", "body": "100 EUR"},
        }
    ],
}


def email_task_scenario(worker: Any, message: dict[str, Any]) -> Scenario:
    """``message`` (of task ``t-1``, which acts for ``tenant-1`` and may read and write
    e-mail) delivered to ``worker``, with the email provider and no recovery."""
    return Scenario(
        worker=worker,
        recover=None,
        messages=(message,),
        providers=(ProviderSpec("email"),),
        authorities={
            "t-1": Authority.of(
                tenant_id="tenant-1",
                credential_scope="email:read email:write",
                policy_version="p1",
            )
        },
    )
