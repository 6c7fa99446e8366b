"""The two side effects the case studies' agents make, with plain httpx as an agent would:
a charge at the Stripe-style payments API (which honours an ``Idempotency-Key``) and a mail
at the SendGrid-style e-mail API (which has none). ``ctx.base_url`` and ``ctx.api_key`` are
what a crash test changes; in production they are the real API's address and key."""

from __future__ import annotations

from typing import Any

import httpx


def charge(ctx: Any, task_id: str, amount: int, *, key: str | None = None) -> dict[str, Any]:
    """Charge ``amount`` cents; ``key``, when given, is sent as the ``Idempotency-Key`` and
    kept in the charge's ``metadata[key]`` (for :func:`find_charge`)."""
    headers = {"Authorization": f"Bearer {ctx.api_key('payments', task_id)}"}
    data: dict[str, Any] = {"amount": amount, "currency": "eur", "description": task_id}
    if key is not None:
        headers["Idempotency-Key"] = key
        data["metadata[key]"] = key
    response = httpx.post(f"{ctx.base_url('payments')}/v1/charges", headers=headers, data=data)
    response.raise_for_status()
    return {"id": response.json()["id"]}


def find_charge(ctx: Any, task_id: str, key: str) -> dict[str, Any] | None:
    """The charge :func:`charge` made with ``key``, from Stripe's list of charges (read after
    write, where its search may lag); ``None`` when there is none."""
    response = httpx.get(f"{ctx.base_url('payments')}/v1/charges", params={"limit": 100},
                         headers={"Authorization": f"Bearer {ctx.api_key('payments', task_id)}"})
    response.raise_for_status()
    found = [c for c in response.json()["data"] if (c.get("metadata") or {}).get("key") == key]
    return {"id": found[0]["id"]} if found else None


def send_email(ctx: Any, task_id: str, to: str, body: str, *,
               key: str | None = None) -> dict[str, Any]:
    """Mail ``body`` to ``to``; ``key``, when given, goes in an ``X-Correlation-Id`` header
    (SendGrid keeps no idempotency key: the mail is sent again whatever it says)."""
    headers = {"Authorization": f"Bearer {ctx.api_key('email', task_id)}"}
    if key is not None:
        headers["X-Correlation-Id"] = key
    response = httpx.post(f"{ctx.base_url('email')}/v3/mail/send", headers=headers, json={
        "personalizations": [{"to": [{"email": to}]}], "from": {"email": "shop@example.com"},
        "subject": "Your order", "content": [{"type": "text/plain", "value": body}]})
    response.raise_for_status()
    return {"message_id": response.headers.get("X-Message-Id")}
