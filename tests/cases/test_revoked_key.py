"""A task's authority revoked (E) while its work is in flight: the key a process asks for then
is the one a real provider refuses (401), not an exception in the test's own glue.

In production a job worker's credentials are a string in its environment; a revoked key shows
as a 401 from the provider. A test's worker function that asks for the key before it calls the
agent (``api_key=ctx.api_key("email", task)``, as the docs write it) must give the agent that
world: an agent that parks a job it finds in flight, sending nothing, passes; one that sends
again is refused, applies nothing, breaks no authority (invariant 4), and is caught because it
leaves the job stuck (invariant 2)."""

from __future__ import annotations

import pytest

from tests.conftest import run_reported

AGENT = '''\
import sqlite3

import httpx

JOB = {"task_id": "job-42", "to": "ada@example.com"}


def handle(job, *, db, api_url, api_key, resend_pending=False):
    """Record the job pending, mail it, record it sent; a job found pending (died after the
    send, maybe) is parked for review, unless ``resend_pending`` (the bug)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, status TEXT)")
        row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job["task_id"],)).fetchone()
        if row is not None and row[0] != "pending":
            return row[0]
        if row is not None and not resend_pending:
            conn.execute("UPDATE jobs SET status = 'review' WHERE id = ?", (job["task_id"],))
            return "review"
        if row is None:
            conn.execute("INSERT INTO jobs VALUES (?, 'pending')", (job["task_id"],))
        httpx.post(f"{api_url}/v3/mail/send", headers={"Authorization": f"Bearer {api_key}"},
                   json={"personalizations": [{"to": [{"email": job["to"]}]}],
                         "from": {"email": "billing@example.com"}, "subject": "Invoice",
                         "content": [{"type": "text/plain", "value": "Due."}]},
                   ).raise_for_status()
        conn.execute("UPDATE jobs SET status = 'sent' WHERE id = ?", (job["task_id"],))
        return "sent"
    finally:
        conn.close()
'''

TEST = '''\
import pytest

from pytest_crashpoints import SQLiteLedgerView, State

import agent_rv

STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def worker(job, ctx):  # the test's glue: the key asked for before the agent runs
    return agent_rv.handle(job, db=ctx.env.path / "jobs.db", api_url=ctx.base_url("email"),
                           api_key=ctx.api_key("email", job["task_id"]))


def jobs(ctx):
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", states=STATES,
                            columns={"attempt_id": "id", "task_id": "id", "state": "status"})


@pytest.mark.crashpoints(points="ABCE", providers=["email"], mode="exhaustive")
def test_revoked_while_in_flight(crashpoints):
    crashpoints.run(worker=worker, messages=[agent_rv.JOB], ledger_view=jobs)


def resending_worker(job, ctx):
    return agent_rv.handle(job, db=ctx.env.path / "jobs.db", api_url=ctx.base_url("email"),
                           api_key=ctx.api_key("email", job["task_id"]), resend_pending=True)


@pytest.mark.crashpoints(points="BE", providers=["email"], mode="exhaustive",
                         faults=["authority_change"])
def test_resent_after_revocation(crashpoints):
    crashpoints.run(worker=resending_worker, messages=[agent_rv.JOB], ledger_view=jobs)
'''


def test_a_key_asked_for_after_a_revocation_is_refused_by_the_provider(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(agent_rv=AGENT, test_rv=TEST)
    result, tests = run_reported(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert tests["test_revoked_while_in_flight"]["verdict"] == "passed"
    resent = tests["test_resent_after_revocation"]
    assert resent["verdict"] == "failed"
    failure = resent["failure"]
    assert failure["invariants"] == [2]
    assert "E: revoke for the task of message 0" in failure["schedule_text"]
    assert "mail.send key=None status=401 no effect" in failure["timeline"]
    # Sent again, refused: nothing crossed the task's authority, whatever else it broke.
    also = [n for found in failure.get("also", []) for n in found["invariants"]]
    assert 4 not in failure["invariants"] + also
