"""A Django app's job mailer over SMTP (``django_mailer/``): the ORM on SQLite, Django's mail
API with its SMTP backend against the harness's relay, nothing of the harness in its code.

The fix of "send, then mark the job sent" claims the job before it sends and parks a job it
finds claimed for review; it passes every default fault. The buggy version is in
``broken/test_django_mailer.py``. The job table is the ledger the invariants read; the
``Message-ID`` the fix stores before it sends ties each row to the mail the relay took.
"""

import importlib.util

import pytest

from pytest_crashpoints import SQLiteLedgerView, State
from scenarios.queue_scenarios import skip_without

pytestmark = skip_without(
    "the Django mailer", {"Django": importlib.util.find_spec("django"),
                          "aiosmtpd": importlib.util.find_spec("aiosmtpd")}
)

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "subject": "Invoice 7",
       "body": "120 EUR, due on the 30th."}
STATES = {"queued": State.INTENT_RECORDED, "sending": State.DISPATCHED,
          "sent": State.OUTCOME_CONFIRMED, "review": State.MANUAL_REVIEW,
          "failed": State.FAILED}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    from scenarios.django_mailer import migrated_database

    return migrated_database(tmp_path_factory.mktemp("django"))


def queued(template, jobs):
    """What the producer left before the case: the table migrated, the jobs queued."""
    from scenarios.django_mailer import add_jobs

    return lambda ctx: add_jobs(template, ctx.env.path, jobs)


def jobs(ctx, *, message_ids=True):
    """The job table as the ledger: a row per job, its status, and the Message-ID it sent."""
    from scenarios.django_mailer import DATABASE

    columns = {"attempt_id": "id", "state": "status"}
    if message_ids:
        columns["result_ref"] = "message_id"
    return SQLiteLedgerView(ctx.env.path / DATABASE, table="jobs_job", columns=columns,
                            states=STATES)


def worker(job, ctx):
    from scenarios.django_mailer.mailer import claim_then_send

    return claim_then_send(job["task_id"])


@pytest.mark.crashpoints(providers=["smtp"], mode="exhaustive", strict_coverage=False)
def test_a_claimed_job_is_parked_never_sent_twice(crashpoints, migrated):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs,
                    setup=queued(migrated, [JOB]))
