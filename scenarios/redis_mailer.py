"""A mailer that keeps its jobs in Redis, as many teams write one: nothing of the harness in it.

Each job is a Redis hash (``job:<id>``: recipient, status) written with redis-py; the mail goes
out through a SendGrid-style v3 API with plain httpx. The fix of "send, then mark sent" is in:
the job is marked ``pending`` before the mail goes out, and a job found ``pending`` (a worker
died between the send and the mark) is parked for a person (``review``), not sent again.

That survives every kill of the worker: Redis keeps the hash. It does not survive the machine
going down when Redis runs as it does out of the box (RDB snapshots, ``save 3600 1 ...``): the
``pending`` mark is in Redis's memory, not yet in a snapshot, when the mail goes out. Restarted
on its last snapshot, Redis has no such job, the message comes back, and the mail goes out
again. The fix is durability before the tool call: Redis with ``appendonly yes`` and
``appendfsync always`` (each write synced to the append-only file before Redis answers it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import redis


def _send(job: Mapping[str, Any], *, api_url: str, api_key: str) -> None:
    response = httpx.post(
        f"{api_url}/v3/mail/send",
        headers={"Authorization": f"Bearer {api_key}"},
        json={
            "personalizations": [{"to": [{"email": job["recipient"]}]}],
            "from": {"email": "billing@example.com"},
            "subject": "Your invoice",
            "content": [{"type": "text/plain", "value": job["body"]}],
        },
        timeout=10.0,
    )
    response.raise_for_status()


def handle(job: Mapping[str, Any], *, redis_url: str, api_url: str, api_key: str) -> str:
    """Claim the job ``pending``, send its mail, mark it ``sent``; a job found ``pending`` is
    parked (``review``), one found ``sent`` or ``review`` is done."""
    store = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        key = f"job:{job['task_id']}"
        # Claimed in one write (HSETNX), not read and then written: two deliveries at once
        # cannot both find the job new.
        if not store.hsetnx(key, "status", "pending"):
            status = store.hget(key, "status")
            if status == "pending":  # died after the send, maybe: a person decides
                store.hset(key, "status", "review")
                return "review"
            return str(status)
        store.hset(key, "recipient", job["recipient"])
        _send(job, api_url=api_url, api_key=api_key)
        store.hset(key, "status", "sent")
        return "sent"
    finally:
        store.close()
