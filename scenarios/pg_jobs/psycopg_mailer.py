"""The job mailer on psycopg 3: each job one row of ``jobs`` (id, recipient, body, status).

- :func:`handle_sends_then_marks` (the bug): record the job ``pending``, send, then mark it
  ``sent``; a redelivered job whose row is still ``pending`` is sent again, so a kill between
  the send and the mark mails the customer twice.
- :func:`handle_parks_the_ambiguous` (the fix): a job found ``pending`` may have been sent,
  and the mail API cannot say, so it is parked for a person (``review``). A delivery that
  finds the row locked by another one still at work (two deliveries at once) fails at once
  (``FOR UPDATE NOWAIT``) and its message comes back, instead of waiting on the lock.

Every ``with conn.transaction():`` block is one commit PostgreSQL makes durable when it
answers: a kill before it (``db.commit``) leaves nothing of the block.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from scenarios.jobs_mailer import _send


def _status(conn: psycopg.Connection[Any], job_id: str) -> str | None:
    row = conn.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def _record_send_mark(
    conn: psycopg.Connection[Any], job: Mapping[str, Any], *, api_url: str, api_key: str
) -> str:
    with conn.transaction():
        conn.execute(
            "INSERT INTO jobs VALUES (%s, %s, %s, 'pending') ON CONFLICT (id) DO NOTHING",
            (job["task_id"], job["recipient"], job["body"]),
        )
    _send(job, api_url=api_url, api_key=api_key)
    with conn.transaction():
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = %s", (job["task_id"],))
    return "sent"


def handle_sends_then_marks(
    job: Mapping[str, Any], *, dsn: str, api_url: str, api_key: str
) -> str:
    """BUG: record, send, mark. A redelivery of a job left ``pending`` sends it again."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if _status(conn, job["task_id"]) == "sent":
            return "sent"
        return _record_send_mark(conn, job, api_url=api_url, api_key=api_key)


def handle_parks_the_ambiguous(
    job: Mapping[str, Any], *, dsn: str, api_url: str, api_key: str
) -> str:
    """The fix: a job found ``pending`` may have been sent; park it for review."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        status = _status(conn, job["task_id"])
        if status in ("sent", "review"):
            return str(status)
        if status == "pending":  # died between the send and the mark, or is at it now
            with conn.transaction():
                # A delivery still at work holds the row until it commits its mark: fail at
                # once (the message comes back) instead of waiting on it for good.
                conn.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE NOWAIT",
                             (job["task_id"],))
                conn.execute("UPDATE jobs SET status = 'review' WHERE id = %s "
                             "AND status = 'pending'", (job["task_id"],))
            return "review"
        return _record_send_mark(conn, job, api_url=api_url, api_key=api_key)
