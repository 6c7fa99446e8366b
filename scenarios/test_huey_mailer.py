"""A Huey worker on its SQLite queue (``huey_mailer.py``), crash-tested: the worker process
runs Huey's own loop (dequeue, execute), is killed at each of its commits (Huey's own
``DELETE`` of the task included) and around the e-mail, and is started again with the job's
message, as your supervisor would. Huey takes a task off its queue before it runs it, so a
killed worker's task is gone; the fix (the producer records the job first, a startup hook
enqueues lost jobs again) passes every kill. Huey's default is caught in
``broken/test_huey_mailer.py``. Huey's queue is a file of the run directory: the default engine
copies it with the rest of each crash state."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("huey", reason="the Huey scenario needs huey (pip install huey)")

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import huey_mailer

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
STATES = {"queued": State.INTENT_RECORDED, "pending": State.DISPATCHED,
          "sent": State.OUTCOME_CONFIRMED, "review": State.MANUAL_REVIEW}


def worker(job, ctx, *, requeue_lost=True):
    return huey_mailer.handle(job, run_dir=ctx.env.path, api_url=ctx.base_url("email"),
                              api_key=ctx.api_key("email", job["task_id"]),
                              requeue_lost=requeue_lost)


def jobs(ctx):
    columns = {"attempt_id": "id", "state": "status"}
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", columns=columns, states=STATES)


@pytest.mark.crashpoints(points=["B", "C", "db.committed"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_lost_jobs_enqueued_again_at_startup_survive_every_kill(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)


default_worker = functools.partial(worker, requeue_lost=False)
