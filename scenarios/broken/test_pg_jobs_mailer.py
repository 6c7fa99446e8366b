"""The PostgreSQL job mailer that sends, then marks the row sent (``scenarios/pg_jobs/``), on
psycopg 3 and through SQLAlchemy: killed between the two (B), its job is delivered again,
still ``pending``, and sent a second time. Caught by invariant 1 from the email provider's
own journal."""

import pytest

from scenarios import test_pg_jobs_mailer as fixed
from scenarios.pg_jobs import psycopg_mailer, sqlalchemy_mailer
from scenarios.test_pg_jobs_mailer import JOB, jobs_view

pytestmark = fixed.pytestmark
jobs_db = fixed.jobs_db  # the fixture: a database per case with the mailer's table


@pytest.mark.crashpoints(points="ABC", providers=["email"], mode="exhaustive", expect=1)
def test_on_psycopg_a_job_sent_then_marked_is_sent_twice(crashpoints, jobs_db):
    def worker(job, ctx):
        return psycopg_mailer.handle_sends_then_marks(
            job, dsn=jobs_db.dsn(ctx), api_url=ctx.base_url("email"),
            api_key=ctx.api_key("email", job["task_id"]))

    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                    databases=[jobs_db])


@pytest.mark.crashpoints(points="ABC", providers=["email"], mode="exhaustive", expect=1)
def test_through_sqlalchemy_a_job_sent_then_marked_is_sent_twice(crashpoints, jobs_db):
    def worker(job, ctx):
        return sqlalchemy_mailer.handle_sends_then_marks(
            job, url=jobs_db.url(ctx), api_url=ctx.base_url("email"),
            api_key=ctx.api_key("email", job["task_id"]))

    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                    databases=[jobs_db])
