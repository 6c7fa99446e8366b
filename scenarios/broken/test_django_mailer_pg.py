"""The Django job mailer that sends, then marks the job sent, on PostgreSQL (the app of
``django_mailer/`` with ``settings_postgres.py``): killed after the relay took the mail and
before the reply reached it (B), its job is still ``queued``, delivered again, and mailed a
second time. Caught by invariant 1 from the relay's own journal, as on SQLite."""

import pytest

from scenarios import test_django_mailer_pg as fixed
from scenarios.test_django_mailer_pg import JOB, jobs_view, queued

pytestmark = fixed.pytestmark
jobs_db = fixed.jobs_db  # the fixture: a database per case, cloned from the migrated template


@pytest.mark.crashpoints(points="ABC", providers=["smtp"], mode="exhaustive", expect=1,
                         strict_coverage=False)
def test_on_postgres_a_job_sent_then_marked_is_sent_twice(crashpoints, jobs_db):
    def worker(job, ctx):
        from scenarios.django_mailer import use_postgres

        use_postgres(jobs_db.dsn(ctx))
        from scenarios.django_mailer.mailer import send_then_mark

        return send_then_mark(job["task_id"])

    table = jobs_view(jobs_db, message_ids=False)  # it stores no Message-ID
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=table,
                    setup=queued(jobs_db, [JOB]), databases=[jobs_db])
