"""What the queue scenarios share (``celery_worker/``, ``dramatiq_worker/``,
``procrastinate_worker/``, ``rq_worker/``): each runs a real queue's worker as a command that
mails one job with ``jobs_mailer.py`` (through ``queue_task.py``), and the harness reads the
mailer's own four-column job table.

- :data:`JOB`, the job each of them mails, and :func:`jobs`, the job table as the ledger the
  invariants read;
- :func:`killed_mid_job`, the marker they run under;
- :func:`skip_without`, the skip that says what to install.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from pytest_crashpoints import Context, SQLiteLedgerView, State

JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
#: The mailer's statuses: a ``pending`` row may have gone out or not; ``review`` is parked for a
#: person.
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}


def jobs(ctx: Context) -> SQLiteLedgerView:
    """The mailer's table (``jobs.db`` in the case's run directory): a row id and a status."""
    columns = {"attempt_id": "id", "state": "status"}
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", columns=columns, states=STATES)


def killed_mid_job(*, expect: int | None = None) -> pytest.MarkDecorator:
    """Every kill of the worker's process mid-job, a real ``SIGKILL``: at A (its ``pending``
    row committed, the mail not sent: the automatic A of a Python program's commits), B (the
    mail sent, the worker not yet told) and C (told, its row not yet marked); for a worker
    that is wrong (``expect``: the invariant it must be caught by), at B, where it is. On the
    processes engine, since the queue keeps its state in its own server, outside the case's
    run directory. ``timeout=60``: a queue's worker starts slower than a function;
    ``strict_coverage=False``: the mailer's four columns cannot show request ids, owners or
    arguments (the summary lists what was not checked)."""
    return pytest.mark.crashpoints(
        points="B" if expect else "ABC", providers=["email"], mode="exhaustive", timeout=60,
        engine="processes", strict_coverage=False, expect=expect,
    )


def skip_without(scenario: str, needs: Mapping[str, object]) -> pytest.MarkDecorator:
    """Skip ``scenario`` where any of ``needs`` (what to install, and what was found of it:
    ``None`` or ``False`` where it is missing) is missing, naming each."""
    missing = [what for what, found in needs.items() if not found]
    return pytest.mark.skipif(bool(missing), reason=f"{scenario} needs {', '.join(missing)}")
