"""A test with a recovery of its own gets no schedule at a point only the reference recovery
has (``recovery.claimed``, ``recovery.looked_up``): a recovery killed there, or two racing
recoveries waiting there, would test nothing. The harness learns what the recovery reaches by
running it after each kill that leaves work in flight; what it cannot place is listed as not
applicable, never counted as covered."""

from __future__ import annotations

import pytest

from tests.conftest import run_reported

AGENT = '''
import sqlite3

import httpx
import pytest
from pytest_crashpoints import SQLiteLedgerView, State

JOB = {"task_id": "job-7", "id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7"}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}
SCHEMA = "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)"


def mailer(job, ctx):
    conn = sqlite3.connect(ctx.env.path / "jobs.db")
    conn.execute(SCHEMA)
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["id"],)).fetchone()
    if row:
        return row[0]
    with conn:
        conn.execute("INSERT INTO jobs VALUES (?, 'pending')", (job["id"],))
    httpx.post(f"{ctx.base_url('email')}/v3/mail/send",
               headers={"Authorization": f"Bearer {ctx.api_key('email', job['task_id'])}"},
               json={"personalizations": [{"to": [{"email": job["recipient"]}]}],
                     "from": {"email": "billing@example.com"}, "subject": "Invoice",
                     "content": [{"type": "text/plain", "value": job["body"]}]},
               ).raise_for_status()
    with conn:
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["id"],))
    return "sent"


def park_half_done(ctx):
    # Its own recovery: a job left pending may or may not have gone out; a person decides.
    conn = sqlite3.connect(ctx.env.path / "jobs.db")
    conn.execute(SCHEMA)
    with conn:
        conn.execute("UPDATE jobs SET status = 'review' WHERE status = 'pending'")


def jobs(ctx):
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", states=STATES,
                            columns={"attempt_id": "id", "state": "status"})


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_mailer(crashpoints):
    crashpoints.run(worker=mailer, recover=park_half_done, messages=[JOB], ledger_view=jobs)
'''


def test_no_schedule_at_a_recovery_point_the_recovery_never_reaches(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_jobs=AGENT)
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=1)
    [test] = tests.values()
    texts = [run["schedule_text"] for run in test["schedules"]]
    assert not [t for t in texts if "recovery.claimed" in t or "recovery.looked_up" in t], texts
    assert set(test["not_applicable"]) == {
        "recovery killed at recovery.claimed",
        "recovery killed at recovery.looked_up",
        "two racing recoveries, the first waiting at recovery.claimed",
        "two racing recoveries, the first waiting at recovery.looked_up",
        "two racing recoveries, the first waiting at C",  # it sends nothing: no answer
    }
    # Its recovery commits: two recoveries racing at that commit is a real race, still run.
    assert any("waiting at db.committed" in t for t in texts), texts
    assert "recovery.claimed" not in test["coverage"]
    result.stdout.fnmatch_lines(
        ["NOT APPLICABLE in test_jobs.py::test_mailer (left out: a point its recovery never*"]
    )
