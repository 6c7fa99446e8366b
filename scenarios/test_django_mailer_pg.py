"""The Django job mailer of ``django_mailer/`` on PostgreSQL: the same app, its settings on
Django's PostgreSQL backend (psycopg 3, ``settings_postgres.py``), each case in a database of
its own cloned from a template the app's migrations were run into once
(``crashpoints_postgres.case_database(template=...)``); the harness reads the job table with
``PostgresLedgerView``.

The fix claims the job under a row lock taken without waiting (``select_for_update(nowait=True)``
in ``transaction.atomic()``): on PostgreSQL two deliveries at once could otherwise both read
``queued`` and both send; the second fails at once and its message comes back. It passes
every default fault; the send-then-mark twin is caught in ``broken/test_django_mailer_pg.py``.
"""

import importlib.util

import pytest

from pytest_crashpoints.ledger import PostgresLedgerView
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin
from scenarios.queue_scenarios import skip_without
from scenarios.test_django_mailer import JOB, STATES

pytestmark = skip_without("the Django mailer on PostgreSQL", {
    "PostgreSQL (apt-get install postgresql)": find_postgres_bin(),
    "psycopg 3 (pip install 'psycopg[binary]')": importlib.util.find_spec("psycopg"),
    "Django": importlib.util.find_spec("django"),
    "aiosmtpd": importlib.util.find_spec("aiosmtpd"),
})


@pytest.fixture
def jobs_db(crashpoints_postgres: PostgresServer):
    """A database per case, cloned from the template the app's migrations were run into."""
    from scenarios.django_mailer import migrated_template

    return migrated_template(crashpoints_postgres)


def queued(db, jobs):
    """What the producer left before the case: the jobs queued in the case's database."""
    from scenarios.django_mailer import add_jobs_postgres

    return lambda ctx: add_jobs_postgres(db.dsn(ctx), jobs)


def jobs_view(db, *, message_ids=True):
    """The job table as the ledger: a row per job, its status, and the Message-ID it sent."""
    columns = {"attempt_id": "id", "state": "status"}
    if message_ids:
        columns["result_ref"] = "message_id"

    def view(ctx):
        return PostgresLedgerView(db.dsn(ctx), table="jobs_job", columns=columns, states=STATES)
    return view


@pytest.mark.crashpoints(providers=["smtp"], mode="exhaustive", strict_coverage=False)
def test_on_postgres_a_claimed_job_is_parked_never_sent_twice(crashpoints, jobs_db):
    def worker(job, ctx):
        from scenarios.django_mailer import use_postgres

        use_postgres(jobs_db.dsn(ctx))
        from scenarios.django_mailer.mailer import claim_then_send

        return claim_then_send(job["task_id"])

    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs_view(jobs_db),
                    setup=queued(jobs_db, [JOB]), databases=[jobs_db])
