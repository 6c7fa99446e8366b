"""A Huey worker (SQLite storage, no server), crash-tested as a command (``mailer.py``): the
harness starts the worker for a job, kills it with a real ``SIGKILL`` mid-task (at B: the mail
is sent, the task has not seen the answer), and starts it again, as your supervisor would.

Huey takes a task off its queue before it runs it and keeps no record of a task in progress:
the killed worker's task is gone, the restarted worker finds an empty queue, and the mailer's
row stays ``pending`` for good (invariant 2; the worker's output says what Huey has left:
no task, no result). The fix is the application's: at startup, enqueue again every job left
``pending`` with no result; the mailer then parks it for review. It passes.

Huey's queue is a SQLite file in the case's run directory, so these tests run on the default
engine (crash states copied, not every schedule from scratch). Skipped where Huey is missing.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_crashpoints import SQLiteLedgerView, State

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("huey") is None,
    reason="the Huey scenario needs huey (pip install huey)",
)

MAILER = str(Path(__file__).with_name("mailer.py"))
JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def jobs(ctx):
    columns = {"attempt_id": "id", "state": "status"}
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", columns=columns, states=STATES)


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", timeout=60,
                         strict_coverage=False)
def test_pending_jobs_enqueued_again_at_startup_survive_a_kill(crashpoints):
    report = crashpoints.run(command=[sys.executable, MAILER, "requeue-pending"],
                             messages=[JOB], ledger_view=jobs)
    assert report.killed["B"]


@pytest.mark.crashpoints(points="B", providers=["email"], mode="exhaustive", timeout=60,
                         strict_coverage=False, expect=2)
def test_hueys_default_loses_the_task_of_a_killed_worker(crashpoints):
    report = crashpoints.run(command=[sys.executable, MAILER, "default"], messages=[JOB],
                             ledger_view=jobs)
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
    assert "not in the queue and no result" in report.failure.timeline
