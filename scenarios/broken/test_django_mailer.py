"""The Django job mailer that sends, then marks the job sent (``django_mailer/mailer.py``):
killed after the relay took the mail and before the reply reached it (B), its job is still
``queued``, delivered again, and mailed a second time. Caught by invariant 1 from the relay's
own journal: the mailer stores nothing that names the mail; the harness needs none of it."""

import pytest

from scenarios.test_django_mailer import JOB, jobs, migrated, pytestmark, queued  # noqa: F401


def worker(job, ctx):
    from scenarios.django_mailer.mailer import send_then_mark

    return send_then_mark(job["task_id"])


def table(ctx):
    return jobs(ctx, message_ids=False)  # it stores no Message-ID


@pytest.mark.crashpoints(points="ABC", providers=["smtp"], mode="exhaustive", expect=1,
                         strict_coverage=False)
def test_a_job_sent_then_marked_is_sent_twice(crashpoints, migrated):  # noqa: F811
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=table,
                    setup=queued(migrated, [JOB]))
