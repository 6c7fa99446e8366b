"""A mailer with its own four-column job table, tested as it is: no ledger of ours, no harness
field in its mail, no fail point in its code. Only its API URL, key and database path change.

The fix of the classic bug ("send, then mark the row sent") parks a job it finds half done for
review; it passes every single fault. The buggy version is in ``broken/test_jobs_mailer.py``.
Its four columns cannot show request ids, owners or arguments' hashes, so the checks that
need them are skipped and listed in the summary (``strict_coverage=False`` accepts that).
"""

import pytest

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios import jobs_mailer

STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED}
STATES["review"] = State.MANUAL_REVIEW
JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}


def worker(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    db = ctx.env.path / "jobs.db"
    return jobs_mailer.handle_parks_the_ambiguous(job, db=db, api_url=url, api_key=key)


def jobs(ctx):
    columns = {"attempt_id": "id", "state": "status"}
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", columns=columns, states=STATES)


@pytest.mark.crashpoints(
    points="ABCD", providers=["email"], mode="exhaustive", strict_coverage=False
)
def test_a_half_done_job_is_parked_not_sent_again(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)


@pytest.mark.crashpoints(
    points="B", faults=["kill", "power_loss"], providers=["email"], mode="exhaustive",
    strict_coverage=False,
)
def test_with_sqlites_default_sync_a_power_loss_is_a_kill(crashpoints):
    # SQLite's default, synchronous=FULL, syncs each commit: the pending row survives the
    # power as it survives a kill, and the summary says a power loss is not applicable.
    # Its twin with synchronous=NORMAL is caught (broken/test_jobs_mailer.py).
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)


@pytest.mark.crashpoints(points=["C", "db.commit"], faults=["failed_commit", "kill"],
                         max_faults=2, providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_failed_commit_raises_and_the_job_comes_back(crashpoints):
    # Each commit failing, alone and with a kill after it in the same delivery: the error
    # raises, the message comes back, and a job found half done is parked. Its twin that logs
    # the error and sends anyway is caught in broken/test_jobs_mailer.py.
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)
