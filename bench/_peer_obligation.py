"""Item 10's peer application: the send-then-mark mailer in pytest-obligation's idiom.

Not imported by anything here, and not collected (the suite's ``testpaths`` is ``tests``):
``bench/peer.py`` copies this file into a throwaway directory as ``peer_mailer/mailer.py``
and runs it there with the throwaway virtual environment's Python, where pytest-obligation
is installed. It is the same worker as ``scenarios/jobs_mailer.handle_sends_then_marks``:
its own SQLite job table (id, recipient, body, status), an at-least-once queue of messages in
the same file (a message is acknowledged only after its job was handled, so a restart delivers
an unacknowledged one again), and the e-mail provider's mailbox, a separate SQLite file the
worker appends to (the external effect). The bug: it records the job, sends, and only then
marks it sent, so a death between the send and the mark sends the mail twice on redelivery.

pytest-obligation's real-child harness (``pytest_obligation.process_histories``) names the
death points in the program itself: the child calls ``die_here(point)`` at each, and dies
there (``os._exit(1)``) when the parent's environment asks for that point.

    python -m peer_mailer.mailer DIR     # the application: handle every unacknowledged message
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_obligation.process_histories import die_here

#: The points this program can die at, in the order it reaches them: after the job's row is
#: committed, before the send (crash point A); after the provider took the mail, before the
#: row is marked sent (C; B, inside the HTTP exchange, is not a point of the program's own).
DEATH_POINTS = ("before_send", "after_send")

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, status TEXT)",
    "CREATE TABLE IF NOT EXISTS queue (id TEXT PRIMARY KEY, payload TEXT, acked INTEGER)",
)


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in SCHEMA:
        conn.execute(statement)
    conn.commit()
    return conn


def enqueue(app: Path, job: Mapping[str, Any]) -> None:
    """The producer: put one message on the application's queue."""
    conn = _open(app / "jobs.db")
    with conn:
        conn.execute("INSERT INTO queue VALUES (?, ?, 0)", (job["task_id"], json.dumps(job)))
    conn.close()


def send_email(app: Path, job: Mapping[str, Any]) -> None:
    """The e-mail provider: the mail lands in its mailbox (not idempotent, no lookup)."""
    conn = sqlite3.connect(app / "mailbox.db", timeout=10.0)
    conn.execute("CREATE TABLE IF NOT EXISTS sent (recipient TEXT, body TEXT)")
    with conn:
        conn.execute("INSERT INTO sent VALUES (?, ?)", (job["recipient"], job["body"]))
    conn.close()


def handle_sends_then_marks(app: Path, job: Mapping[str, Any]) -> str:
    """BUG: record, send, mark. A redelivery of a job left ``pending`` sends it again."""
    conn = _open(app / "jobs.db")
    try:
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
        if row is not None and row[0] == "sent":
            return "sent"  # done before: acknowledge the redelivery
        with conn:
            conn.execute(
                "INSERT OR IGNORE INTO jobs VALUES (?, ?, ?, 'pending')",
                (job["task_id"], job["recipient"], job["body"]),
            )
        die_here("before_send")
        send_email(app, job)
        die_here("after_send")
        with conn:
            conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
        return "sent"
    finally:
        conn.close()


def run(app: Path) -> int:
    """The worker: handle each unacknowledged message, acknowledge it once handled."""
    with open(app / "starts.log", "a") as log:  # one line per start of the application
        log.write(f"{os.getpid()}\n")
    conn = _open(app / "jobs.db")
    pending = conn.execute("SELECT id, payload FROM queue WHERE acked = 0 ORDER BY id").fetchall()
    for message_id, payload in pending:
        handle_sends_then_marks(app, json.loads(payload))
        with conn:
            conn.execute("UPDATE queue SET acked = 1 WHERE id = ?", (message_id,))
    conn.close()
    return len(pending)


def command(app: Path) -> list[str]:
    """How the application is started (by its deployment, and again after any death)."""
    return [sys.executable, "-m", "peer_mailer.mailer", str(app)]


if __name__ == "__main__":
    run(Path(sys.argv[1]))
