"""The four-column job mailer with its jobs in PostgreSQL (``pg_jobs/``), on psycopg 3 and
through SQLAlchemy, tested as it is: each case gets a database of its own, cloned from a
template with the mailer's table (``crashpoints_postgres.case_database``), and the harness
reads the jobs with ``PostgresLedgerView``. A kill at a commit (``db.commit``) leaves the
transaction rolled back, as PostgreSQL does for a connection whose process died.

The fix parks a job it finds half done for review and passes every default fault; the
send-then-mark twins are caught in ``broken/test_pg_jobs_mailer.py``.
"""

import importlib.util

import pytest

from pytest_crashpoints import State
from pytest_crashpoints.ledger import PostgresLedgerView
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin
from scenarios.pg_jobs import SCHEMA, psycopg_mailer, sqlalchemy_mailer
from scenarios.queue_scenarios import skip_without

pytestmark = skip_without("the PostgreSQL job mailer", {
    "PostgreSQL (apt-get install postgresql)": find_postgres_bin(),
    "psycopg 3 (pip install 'psycopg[binary]')": importlib.util.find_spec("psycopg"),
    "SQLAlchemy (pip install sqlalchemy)": importlib.util.find_spec("sqlalchemy"),
})

STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}
JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}


@pytest.fixture
def jobs_db(crashpoints_postgres: PostgresServer):
    """A database per case with the mailer's table, in the session's private PostgreSQL."""
    return crashpoints_postgres.case_database(schema=SCHEMA)


def jobs_view(db):
    def view(ctx):
        return PostgresLedgerView(db.dsn(ctx), table="jobs", states=STATES,
                                  columns={"attempt_id": "id", "state": "status"})
    return view


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_on_psycopg_a_half_done_job_is_parked_not_sent_again(crashpoints, jobs_db):
    def worker(job, ctx):
        return psycopg_mailer.handle_parks_the_ambiguous(
            job, dsn=jobs_db.dsn(ctx), api_url=ctx.base_url("email"),
            api_key=ctx.api_key("email", job["task_id"]))

    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                             databases=[jobs_db])
    assert report.killed["A"] and report.killed["B"]


@pytest.mark.crashpoints(points="ABCD", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_through_sqlalchemy_a_half_done_job_is_parked_not_sent_again(crashpoints, jobs_db):
    def worker(job, ctx):
        return sqlalchemy_mailer.handle_parks_the_ambiguous(
            job, url=jobs_db.url(ctx), api_url=ctx.base_url("email"),
            api_key=ctx.api_key("email", job["task_id"]))

    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                             databases=[jobs_db])
    assert report.killed["A"] and report.killed["B"]


@pytest.mark.crashpoints(points="B", faults=["kill", "power_loss"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_a_power_loss_of_the_workers_machine_is_a_kill(crashpoints, jobs_db):
    # A commit PostgreSQL answered is the server's: the worker's machine losing its power
    # takes nothing from it (the summary says a power loss is not applicable). What the
    # server's own power loss would do with synchronous_commit=off is not modelled.
    def worker(job, ctx):
        return psycopg_mailer.handle_parks_the_ambiguous(
            job, dsn=jobs_db.dsn(ctx), api_url=ctx.base_url("email"),
            api_key=ctx.api_key("email", job["task_id"]))

    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                             databases=[jobs_db])
    assert any("a PostgreSQL commit is the server's" in why for why in report.not_applicable)
