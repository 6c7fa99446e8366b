"""An asyncio agent: it e-mails a shipping notice with httpx.AsyncClient, keeps its own job
table, and waits for a rate-limit window on the real clock (a monotonic deadline).

A job found half done (recorded, answer never seen) is parked for review, never sent again:
the e-mail API has no idempotency key and no way to tell.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import httpx

from pytest_crashpoints import Context

SCHEMA = "CREATE TABLE IF NOT EXISTS notices (id TEXT PRIMARY KEY, status TEXT)"


async def notify(job: dict[str, Any], ctx: Context) -> str:
    conn = sqlite3.connect(ctx.env.path / "notices.db")
    conn.execute(SCHEMA)
    row = conn.execute("SELECT status FROM notices WHERE id = ?", (job["task_id"],)).fetchone()
    if row:
        if row[0] == "pending":  # a worker died after recording it: maybe sent, maybe not
            with conn:
                conn.execute("UPDATE notices SET status = 'review' WHERE id = ?",
                             (job["task_id"],))
            return "review"
        return str(row[0])
    with conn:
        conn.execute("INSERT INTO notices VALUES (?, 'pending')", (job["task_id"],))
    window = time.monotonic() + 0.05  # the API's rate-limit window, on the real clock
    while time.monotonic() < window:
        await asyncio.sleep(0.01)
    async with httpx.AsyncClient(base_url=ctx.base_url("email"), timeout=5) as client:
        response = await client.post(
            "/v3/mail/send",
            headers={"Authorization": f"Bearer {ctx.api_key('email', job['task_id'])}"},
            json={"personalizations": [{"to": [{"email": job["to"]}]}],
                  "from": {"email": "shipping@example.com"}, "subject": "Shipped",
                  "content": [{"type": "text/plain", "value": job["text"]}]},
        )
        response.raise_for_status()
    with conn:
        conn.execute("UPDATE notices SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"
