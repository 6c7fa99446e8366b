"""The journal mailer whose reader refuses a line that is not JSON (see
``scenarios/journal_mailer.py``). It syncs every line before it goes on, so a kill never tears
one, and neither does a power loss anywhere but between a line's ``write()`` and its
``fsync()``: there (``file.sync``) the journal keeps the lines synced before and half of that
one. The next delivery finds the torn line, refuses to start, and so does every one after it:
the job is never mailed. Caught by invariant 2 (a delivered message silently dropped), from
the email provider's own journal."""

import pytest

from scenarios import journal_mailer
from scenarios.test_journal_mailer import JOB, journal


def worker(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return journal_mailer.handle(job, journal=ctx.env.path / "journal.jsonl", api_url=url,
                                 api_key=key, repair=False)


@pytest.mark.crashpoints(points="BC", providers=["email"], mode="exhaustive", expect=2,
                         strict_coverage=False)
def test_a_reader_that_refuses_a_torn_line_never_starts_again(crashpoints):
    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=journal)
    assert "power lost between a write and its sync" in str(report.failure.schedule)
