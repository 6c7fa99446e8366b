"""A mailer with a JSON-lines journal of its own, each line synced before it goes on
(``journal_mailer.py``): nothing of the harness in it, no fail point in its code.

Its reader cuts a torn last line off before it reads or appends: it passes every kill at B
and C, every lost answer, and a power loss between each line's ``write()`` and its
``fsync()`` (the line torn: ``file.sync``). The reader that refuses a torn line is caught in
``broken/test_journal_mailer.py``. A journal of three states cannot show request ids, owners
or arguments' hashes: those checks are listed as not checked (``strict_coverage=False``).
"""

import pytest

from pytest_crashpoints import JSONLinesLedgerView, State
from scenarios import journal_mailer

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
STATES = {"sending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def journal(ctx):
    return JSONLinesLedgerView(ctx.env.path / "journal.jsonl", states=STATES,
                               fields={"attempt_id": "job"})


def worker(job, ctx):
    url, key = ctx.base_url("email"), ctx.api_key("email", job["task_id"])
    return journal_mailer.handle(job, journal=ctx.env.path / "journal.jsonl", api_url=url,
                                 api_key=key, repair=True)


@pytest.mark.crashpoints(points="BC", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_line_torn_by_the_power_is_cut_and_the_job_mailed_once(crashpoints):
    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=journal)
    # The power went between the write of each line and its sync, once for each of the two.
    assert report.reached["torn write"] == 2
