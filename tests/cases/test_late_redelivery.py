"""A message whose worker keeps refusing it is delivered again at the quiet phase's horizon.

An agent that claims a key with a lease in its own clock (justonce's ``expires_at``, an
outbox's ``updated_at``) refuses the key while the lease of a dead holder runs, and takes it
over once it has run out: a queue that keeps delivering the unacknowledged message then gets
the work done. The harness cannot read such a lease, so the queue it models delivers once
more at the horizon (two hours of harness time) before it takes a refused message for
dead-lettered: a correct agent is not reported as dropping work, and a lease longer than
the horizon is still reported.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx

from pytest_crashpoints import Context, SQLiteLedgerView, State
from pytest_crashpoints.harness import Deliver, KillAt, Schedule, run_case

from .conftest import email_task_scenario

STATES = {"in_progress": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED}


def leased_mailer(lease: float) -> Any:
    """A mailer that claims its job for ``lease`` seconds of wall time before it sends, and
    refuses a job another worker claimed until that claim's lease has run out."""

    def handle(message: dict[str, Any], ctx: Context) -> str:
        db = sqlite3.connect(ctx.env.path / "claims.db", isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, state TEXT, "
                   "expires_at REAL)")
        key, now = message["task_id"], time.time()
        row = db.execute("SELECT state, expires_at FROM claims WHERE key = ?", (key,)).fetchone()
        if row is not None and (row[0] == "sent" or row[1] > now):
            if row[0] == "sent":
                return "sent"
            raise RuntimeError(f"{key} is claimed until {row[1]} (now {now})")
        db.execute("INSERT OR REPLACE INTO claims VALUES (?, 'in_progress', ?)", (key, now + lease))
        httpx.post(f"{ctx.base_url('email')}/v3/mail/send",
                   headers={"Authorization": f"Bearer {ctx.api_key('email', key)}"},
                   json={"personalizations": [{"to": [{"email": "ada@example.com"}]}],
                         "from": {"email": "billing@example.com"}, "subject": "Invoice",
                         "content": [{"type": "text/plain", "value": "100 EUR"}]},
                   ).raise_for_status()
        db.execute("UPDATE claims SET state = 'sent' WHERE key = ?", (key,))
        return "sent"

    return handle


def claims(ctx: Context) -> SQLiteLedgerView:
    return SQLiteLedgerView(ctx.env.path / "claims.db", table="claims", states=STATES,
                            columns={"attempt_id": "key", "state": "state"})


def killed_at_a(lease: float, tmp_path: Path) -> Any:
    scenario = dataclasses.replace(
        email_task_scenario(leased_mailer(lease), {"task_id": "t-1"}), ledger_view=claims)
    return run_case(scenario, Schedule((Deliver(0, KillAt("A")),)), base_dir=tmp_path)


def sent(result: Any) -> list[str]:
    return [line for line in result.state if line.startswith("effect email")]


def test_a_claim_whose_lease_runs_out_within_the_horizon_is_taken_over(tmp_path: Path) -> None:
    # Fifteen minutes: longer than the first redelivery (400 s), within the horizon (2 h).
    result = killed_at_a(15 * 60, tmp_path)
    assert result.errors == ()
    assert result.passed, [v.message for v in result.violations]
    assert len(sent(result)) == 1
    assert "claimed until" in result.timeline  # refused at the first redelivery


def test_a_lease_longer_than_the_horizon_is_work_dropped(tmp_path: Path) -> None:
    result = killed_at_a(3 * 3600, tmp_path)
    assert sent(result) == []
    assert {v.invariant for v in result.violations} == {2}
