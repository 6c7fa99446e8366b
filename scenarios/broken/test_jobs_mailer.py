"""The mailer that sends, then marks the row sent (see ``scenarios/jobs_mailer.py``): killed
between the two (B), its job is delivered again, still ``pending``, and sent a second time.
Caught by invariant 1 from the email provider's own journal: the mailer records no key, no
request id, nothing that would link its row to the mail; the harness needs none of it."""

import pytest

from scenarios import jobs_mailer
from scenarios.test_jobs_mailer import JOB, jobs


def worker(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    db = ctx.env.path / "jobs.db"
    return jobs_mailer.handle_sends_then_marks(job, db=db, api_url=url, api_key=key)


@pytest.mark.crashpoints(points="ABC", providers=["email"], mode="exhaustive", expect=1)
def test_a_job_sent_then_marked_is_sent_twice(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs)


def worker_parks(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return jobs_mailer.handle_parks_the_ambiguous(
        job, db=ctx.env.path / "jobs.db", api_url=url, api_key=key)


def parks_unsynced(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return jobs_mailer.handle_parks_the_ambiguous(
        job, db=ctx.env.path / "jobs.db", api_url=url, api_key=key, synchronous="NORMAL")


@pytest.mark.crashpoints(points="B", faults=["power_loss"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_pending_row_lost_with_the_power_is_sent_again(crashpoints):
    # The fix of the test above, in WAL with synchronous=NORMAL: the pending row is not
    # synced when the mail goes out; the power goes at B and takes it; the job comes back
    # as new and is sent again. With SQLite's default (FULL) it passes.
    crashpoints.run(worker=parks_unsynced, messages=[JOB], ledger_view=jobs)


@pytest.mark.crashpoints(points="B", faults=["backup_restore"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_job_forgotten_by_a_restored_backup_is_sent_again(crashpoints):
    # The machine is lost after the send (B) and the job table comes back from the backup
    # taken before the job: the row that parks it is gone, the job comes back as new, and
    # the mail API has nothing to look it up by. Every write synced does not help here.
    crashpoints.run(worker=worker_parks, messages=[JOB], ledger_view=jobs)


def logs_and_sends(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return jobs_mailer.handle_parks_the_ambiguous(
        job, db=ctx.env.path / "jobs.db", api_url=url, api_key=key, log_commit_errors=True)


@pytest.mark.crashpoints(points=["C", "db.commit"], faults=["failed_commit", "kill"],
                         max_faults=2, providers=["email"], mode="exhaustive", expect=1,
                         strict_coverage=False)
def test_a_failed_commit_logged_then_sent_and_killed_is_sent_twice(crashpoints):
    # The parking mailer that logs a failed commit and sends anyway: its pending row could
    # not be written; killed after the send (C, before the mark), the job comes back with no
    # row and is sent again. One failed commit alone, or one kill alone, shows nothing: the
    # two faults together, in one delivery, do.
    report = crashpoints.run(worker=logs_and_sends, messages=[JOB], ledger_view=jobs)
    assert "commit fails" in str(report.failure.schedule)
    assert "kill at C" in str(report.failure.schedule)
