"""An incident responder that opens one GitHub issue per incident with PyGithub, and keeps its
own SQLite table of incidents. Nothing of the harness is in this code: a crash test changes
only the API URL, the token and the database path.

It marks each issue with a label naming the incident (``incident-<id>``), so that a retry can
ask GitHub whether the issue is already open (the repository's issue list is consistent; its
search is not). Creating an issue twice opens two issues: GitHub has no idempotency key.

Two switches put back two classic bugs:

- ``sdk_retries=True`` keeps PyGithub's default ``GithubRetry``, which re-POSTs on a 5xx or a
  dropped connection. When GitHub opened the issue but the answer was lost (a 502 from a
  gateway, a reset), the retry opens a second one.
- ``claims_first=False`` is check-then-act: "is the issue open already? no: open it". Two
  deliveries of one incident at once (a queue's redelivery while the first is still running)
  both see "no" and both open it.

The fix of both (the defaults): no SDK retry of a POST, and a claim (a row with an owner and
a lease, written in one transaction) before the check; a delivery that finds a live claim
backs off, and one that finds a dead claim (its lease ran out) checks the list before
opening anything.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from github import Auth, Github

#: Seconds a claim holds an incident before another delivery may take it over.
LEASE = 60.0

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS incidents (id TEXT PRIMARY KEY, status TEXT NOT NULL, "
    "owner TEXT, lease_until REAL, issue_number INTEGER)"
)


class Busy(RuntimeError):
    """Another live delivery holds the incident: the message stays unacknowledged."""


def _open(db: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=10.0, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(SCHEMA)
    return conn


def _claim(conn: sqlite3.Connection, incident_id: str, me: str) -> bool:
    """Take the incident for ``me`` in one transaction; False when it is already open."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute(
            "SELECT status, owner, lease_until FROM incidents WHERE id = ?", (incident_id,)
        ).fetchone()
        if row is not None and row[0] == "open":
            conn.execute("COMMIT")
            return False
        if row is not None and row[2] is not None and row[2] > time.time():
            raise Busy(f"incident {incident_id} is being handled by {row[1]}")
        conn.execute(
            "INSERT INTO incidents (id, status, owner, lease_until) VALUES (?, 'opening', ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
            "lease_until = excluded.lease_until",
            (incident_id, me, time.time() + LEASE),
        )
        conn.execute("COMMIT")
        return True
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def open_ticket(
    incident: Mapping[str, Any],
    *,
    db: str | Path,
    api_url: str,
    token: str,
    sdk_retries: bool = False,
    claims_first: bool = True,
) -> int:
    """Open the issue of ``incident`` (``task_id``, ``tenant``, ``title``, ``body``) once;
    return its number."""
    incident_id = str(incident["task_id"])
    marker = f"incident-{incident_id}"
    conn = _open(db)
    options: dict[str, Any] = {} if sdk_retries else {"retry": None}
    gh = Github(
        auth=Auth.Token(token),
        base_url=api_url,
        timeout=10,
        seconds_between_requests=None,
        seconds_between_writes=None,
        **options,
    )
    try:
        if claims_first:
            if not _claim(conn, incident_id, f"delivery-{uuid.uuid4().hex[:8]}"):
                return int(_number(conn, incident_id))
        else:
            row = conn.execute(
                "SELECT status, issue_number FROM incidents WHERE id = ?", (incident_id,)
            ).fetchone()
            if row is not None and row[0] == "open":
                return int(row[1])
            conn.execute(
                "INSERT OR IGNORE INTO incidents (id, status) VALUES (?, 'opening')",
                (incident_id,),
            )
        repo = gh.get_repo(f"{incident['tenant']}/incidents")
        existing = list(repo.get_issues(labels=[marker], state="all"))
        if existing:
            number = existing[0].number
        else:
            number = repo.create_issue(
                title=str(incident["title"]), body=str(incident["body"]), labels=[marker]
            ).number
        conn.execute(
            "UPDATE incidents SET status = 'open', issue_number = ?, owner = NULL, "
            "lease_until = NULL WHERE id = ?",
            (number, incident_id),
        )
        return int(number)
    finally:
        gh.close()
        conn.close()


def _number(conn: sqlite3.Connection, incident_id: str) -> int:
    row = conn.execute("SELECT issue_number FROM incidents WHERE id = ?", (incident_id,)).fetchone()
    return int(row[0])
