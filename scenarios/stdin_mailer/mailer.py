"""A mail agent as teams deploy one: a program, not a function. Nothing of the harness in it.

    python mailer.py [--skip-intent-sync] [--log-commit-errors]

It reads jobs as JSON lines on its standard input (``{"task_id": ..., "recipient": ...,
"body": ...}``), mails each through a SendGrid-style v3 API with the standard library, and
answers its supervisor on its standard output, one line per job: ``ack <task_id>`` when the job
is done (or parked for a person), ``nack <task_id>`` when it is not and must come again. Its
settings are in its environment: ``MAILER_DB`` (its SQLite file), ``MAILER_API_URL`` and
``MAILER_API_KEY``.

Each job is one row (id, recipient, body, status) in its own table. The safe order:

1. record the job ``pending`` (one committed transaction), and make that row durable: the
   database is in WAL with ``synchronous=NORMAL`` (fast: a commit syncs nothing), so the row is
   synced by a checkpoint before the mail goes out;
2. send the mail;
3. mark the row ``sent``, and ``ack``.

A job found ``pending`` may have gone out or not, and a mail API without idempotency cannot
say: it is parked for review (``review``), never sent again. A job whose commit failed (a
full disk, an I/O error) or whose answer was lost is ``nack``ed: it comes again, and finds
its row.

Two bugs, each one flag away:

- ``--skip-intent-sync``: the ``pending`` row is committed, not synced, when the mail goes
  out. A power loss after the send takes it: the job comes back as new and is sent again.
- ``--log-commit-errors``: a ``pending`` row that failed to commit is logged as a warning
  and the mail sent anyway. Killed before the mark, the job comes back with no row and is
  sent again.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import os
import sqlite3
import sys
import urllib.request
from typing import Any

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, status TEXT)"
)


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10.0)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(SCHEMA)
    db.commit()
    return db


def send(job: dict[str, Any]) -> None:
    mail = {
        "personalizations": [{"to": [{"email": job["recipient"]}]}],
        "from": {"email": "billing@example.com"},
        "subject": "Your invoice",
        "content": [{"type": "text/plain", "value": job["body"]}],
    }
    request = urllib.request.Request(
        os.environ["MAILER_API_URL"] + "/v3/mail/send",
        data=json.dumps(mail).encode(),
        headers={"Authorization": f"Bearer {os.environ['MAILER_API_KEY']}",
                 "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def record_pending(db: sqlite3.Connection, job: dict[str, Any], flags: argparse.Namespace) -> None:
    try:
        with db:
            db.execute("INSERT INTO jobs VALUES (?, ?, ?, 'pending')",
                       (job["task_id"], job["recipient"], job["body"]))
    except sqlite3.OperationalError as exc:
        if not flags.log_commit_errors:
            raise
        logging.warning("job %s: could not record it (%s); sending anyway", job["task_id"], exc)
    if not flags.skip_intent_sync:
        db.execute("PRAGMA wal_checkpoint(FULL)")  # the pending row on disk before the send


def handle(db: sqlite3.Connection, job: dict[str, Any], flags: argparse.Namespace) -> str:
    """Do one job; its status (``sent``, ``review``). Raises what stops it (``sqlite3.Error``,
    ``OSError`` for a lost answer): the job is not done."""
    row = db.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
    if row is not None:
        if row[0] == "pending":  # it may have gone out: a person decides
            with db:
                db.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
            return "review"
        return str(row[0])
    record_pending(db, job, flags)
    send(job)
    with db:
        db.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
    return "sent"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mail each job read from standard input.")
    parser.add_argument("--skip-intent-sync", action="store_true")
    parser.add_argument("--log-commit-errors", action="store_true")
    flags = parser.parse_args(argv)
    db = open_db(os.environ["MAILER_DB"])
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            status = handle(db, job, flags)
        except (sqlite3.Error, OSError, http.client.HTTPException) as exc:
            print(f"nack {job['task_id']} ({type(exc).__name__}: {exc})", flush=True)
            continue
        print(f"ack {job['task_id']} {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
