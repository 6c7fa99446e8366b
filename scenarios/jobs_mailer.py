"""A mailer with a four-column job table, as many teams write one: nothing of the harness in it.

Each job is one row (id, recipient, body, status) in the worker's own SQLite file; the mail
goes out through a SendGrid-style v3 API with plain httpx. The only things a crash test
changes are where the API is and the key (``api_url``, ``api_key``), and where the database
file is.

Two versions of the same worker:

- :func:`handle_sends_then_marks` records the job, sends, and only then marks the row
  ``sent``. A redelivered job whose row is still ``pending`` is sent again: after a crash
  between the send and the mark, the customer gets the mail twice.
- :func:`handle_parks_the_ambiguous` is the fix: a job found ``pending`` may or may not have
  been sent, and a mail API without idempotency cannot say, so it is parked for a person
  (``review``) instead of sent again.

``synchronous="NORMAL"`` (what many frameworks set with WAL, for speed) breaks the fix on a
power loss: its ``pending`` row is committed but not synced when the mail goes out, so a power
loss after the send takes the row with it, the job comes back as new, and it is sent again.
SQLite's default (``FULL``) syncs each commit: a power loss is then a kill.

``log_commit_errors=True`` (on the fix) is the bug of a worker that takes a failed commit for a
warning: its ``pending`` row could not be written (a full disk), it sends anyway, and a crash
before the mark leaves no row at all: the job comes back as new and is sent again.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, status TEXT)"
)


def _open(db: str | Path, synchronous: str | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    if synchronous is not None:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(SCHEMA)
    conn.commit()
    return conn


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


def _record_send_mark(
    conn: sqlite3.Connection, job: Mapping[str, Any], *, on_conflict: Literal["IGNORE", "REPLACE"],
    api_url: str, api_key: str, log_commit_errors: bool = False,
) -> str:
    """Record the job ``pending`` (``INSERT OR <on_conflict>``: a row the job has already is
    kept as it is, or replaced), send its mail, then mark its row ``sent``. A crash between the
    send and the mark leaves the row ``pending`` with the mail gone out. ``log_commit_errors``:
    a ``pending`` row that failed to commit is logged, and the mail sent anyway (the bug)."""
    try:
        with conn:
            conn.execute(
                f"INSERT OR {on_conflict} INTO jobs VALUES (?, ?, ?, 'pending')",
                (job["task_id"], job["recipient"], job["body"]),
            )
    except sqlite3.OperationalError:
        if not log_commit_errors:
            raise
        logging.getLogger(__name__).exception("could not record job %s", job["task_id"])
    _send(job, api_url=api_url, api_key=api_key)
    with conn:
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def record_queued(job: Mapping[str, Any], *, db: str | Path) -> None:
    """What a producer does before it enqueues a job: record it ``queued`` (nothing if the job
    has a row already), so a job a queue loses before it starts can be found again."""
    conn = _open(db)
    try:
        with conn:
            conn.execute(
                "INSERT OR IGNORE INTO jobs VALUES (?, ?, ?, 'queued')",
                (job["task_id"], job["recipient"], job["body"]),
            )
    finally:
        conn.close()


def handle_sends_then_marks(
    job: Mapping[str, Any], *, db: str | Path, api_url: str, api_key: str
) -> str:
    """BUG: record, send, mark. A redelivery of a job left ``pending`` sends it again."""
    conn = _open(db)
    try:
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
        if row is not None and row[0] == "sent":
            return "sent"  # done before: acknowledge the redelivery
        return _record_send_mark(
            conn, job, on_conflict="IGNORE", api_url=api_url, api_key=api_key
        )
    finally:
        conn.close()


def handle_parks_the_ambiguous(
    job: Mapping[str, Any], *, db: str | Path, api_url: str, api_key: str,
    synchronous: str | None = None, log_commit_errors: bool = False,
) -> str:
    """The fix: a job found ``pending`` may have been sent; park it for review. (A job found
    ``queued``, recorded by its producer before it was enqueued, was never started.)
    ``log_commit_errors=True`` puts another bug in: a ``pending`` row that could not be
    committed (a full disk, an I/O error) is logged and the mail sent anyway."""
    conn = _open(db, synchronous)
    try:
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
        if row is not None and row[0] in ("sent", "review"):
            return str(row[0])
        if row is not None and row[0] != "queued":  # pending: died between send and mark
            with conn:
                conn.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
            return "review"
        return _record_send_mark(
            conn, job, on_conflict="REPLACE", api_url=api_url, api_key=api_key,
            log_commit_errors=log_commit_errors,
        )
    finally:
        conn.close()
