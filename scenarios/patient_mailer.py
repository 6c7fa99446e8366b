"""A mailer that waits out the e-mail search's lag before it believes it.

The e-mail API (SendGrid's v3, the fake ``email`` provider) has no idempotency key. A message
is found by its custom argument through the message search, and the search lags 30 seconds
behind the send (in a crash test, every provider's search does unless its ``ProviderSpec``
says otherwise). So the mailer asks the search before it sends, and after a send whose answer
was lost (a reset connection, a timeout, a 502 from a gateway: the mail may have gone) it
waits 31 seconds, longer than the lag, and asks again: found, it is done; not found, the mail
never went, and it sends it.

``handle`` waits with ``time.sleep``, ``handle_async`` (httpx's ``AsyncClient``) with
``asyncio.sleep``. ``look_after=0`` is the broken twin: it asks at once, the search does not
show a mail sent a second ago, and it sends it twice (``broken/test_patient_mailer.py``).
Nothing of the harness is in it but the API's address and key.

In a crash test the wait costs no real time: nothing else of the case can act while the
worker sleeps, so the harness skips the sleep and moves the case's clock (the provider's
too) by 31 seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import httpx

from pytest_crashpoints import Context

#: Longer than the search's lag (30 s).
LOOK_AFTER = 31.0


def _mail(job: Mapping[str, Any]) -> dict[str, Any]:
    return {"personalizations": [{"to": [{"email": job["to"]}]}],
            "from": {"email": "billing@example.com"}, "subject": job["subject"],
            "content": [{"type": "text/plain", "value": job["body"]}],
            "custom_args": {"job": job["task_id"]}}


def _query(job: Mapping[str, Any]) -> dict[str, str]:
    return {"query": f"unique_args['job']=\"{job['task_id']}\""}


def _headers(job: Mapping[str, Any], ctx: Context) -> dict[str, str]:
    return {"Authorization": f"Bearer {ctx.api_key('email', str(job['task_id']))}",
            "X-Correlation-Id": f"mail:{job['task_id']}"}


def _lost(response: httpx.Response | None) -> bool:
    """Whether a send's answer says nothing of the mail (none came, or a gateway's 5xx)."""
    return response is None or response.status_code >= 500


def handle(job: Mapping[str, Any], ctx: Context, *, look_after: float = LOOK_AFTER) -> str:
    """Send the job's mail once: look first; after a lost answer, wait and look again."""
    with httpx.Client(base_url=ctx.base_url("email"), headers=_headers(job, ctx),
                      timeout=10) as client:

        def found() -> bool:
            answer = client.get("/v3/messages", params=_query(job))
            answer.raise_for_status()
            return bool(answer.json()["messages"])

        def send() -> httpx.Response | None:
            try:
                return client.post("/v3/mail/send", json=_mail(job))
            except httpx.TransportError:
                return None

        if found():
            return "sent before"
        if not _lost(answer := send()):
            assert answer is not None
            answer.raise_for_status()
            return "sent"
        time.sleep(look_after)  # longer than the search lags: a mail that went shows now
        if found():
            return "sent (its answer was lost)"
        again = send()
        if again is None or again.is_error:
            raise RuntimeError("the mail could not be sent: the job comes back")
        return "sent again (the first never went)"


async def handle_async(
    job: Mapping[str, Any], ctx: Context, *, look_after: float = LOOK_AFTER
) -> str:
    """:func:`handle` with httpx's ``AsyncClient`` and ``asyncio.sleep``."""
    async with httpx.AsyncClient(base_url=ctx.base_url("email"), headers=_headers(job, ctx),
                                 timeout=10) as client:

        async def found() -> bool:
            answer = await client.get("/v3/messages", params=_query(job))
            answer.raise_for_status()
            return bool(answer.json()["messages"])

        async def send() -> httpx.Response | None:
            try:
                return await client.post("/v3/mail/send", json=_mail(job))
            except httpx.TransportError:
                return None

        if await found():
            return "sent before"
        if not _lost(answer := await send()):
            assert answer is not None
            answer.raise_for_status()
            return "sent"
        await asyncio.sleep(look_after)
        if await found():
            return "sent (its answer was lost)"
        again = await send()
        if again is None or again.is_error:
            raise RuntimeError("the mail could not be sent: the job comes back")
        return "sent again (the first never went)"
