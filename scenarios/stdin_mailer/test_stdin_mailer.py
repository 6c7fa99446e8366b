"""A mail agent that is a program (``mailer.py``: jobs as JSON lines on standard input,
``ack`` or ``nack`` on standard output, its own SQLite table in WAL with
``synchronous=NORMAL``), crash-tested as it is deployed: ``python mailer.py``, unchanged.

Run as a command, the program gets what a Python worker gets in its own process: every
SQLite commit is a fail point (killed there, or failed: a full disk, an I/O error), the
automatic A after its intent, and a power loss that takes what its database did not sync.
The fix passes every one of them, and a failed commit combined with a kill; each bug is one
flag away and caught.
"""

import sys
from pathlib import Path

import pytest

from pytest_crashpoints.harness import CommandWorker
from scenarios.queue_scenarios import JOB, jobs

MAILER = str(Path(__file__).with_name("mailer.py"))
#: The program's own settings, from what the harness gives each process.
ENV = {"MAILER_DB": "${CRASHPOINTS_RUN_DIR}/jobs.db",
       "MAILER_API_URL": "${CRASHPOINTS_EMAIL_URL}", "MAILER_API_KEY": "${CRASHPOINTS_EMAIL_KEY}"}


def mailer(*flags: str) -> CommandWorker:
    return CommandWorker([sys.executable, MAILER, *flags], env=ENV)


@pytest.mark.crashpoints(points=["A", "B", "C", "db.commit", "db.committed"],
                         providers=["email"], mode="exhaustive", strict_coverage=False)
def test_a_job_survives_kills_power_loss_and_failed_commits(crashpoints):
    report = crashpoints.run(worker=mailer(), messages=[JOB], ledger_view=jobs)
    assert report.killed["A"] and report.reached["power lost"] and report.reached["failed commit"]


@pytest.mark.crashpoints(points=["C", "db.commit"], faults=["failed_commit", "kill"],
                         max_faults=2, providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_failed_commit_then_a_kill_is_survived_too(crashpoints):
    crashpoints.run(worker=mailer(), messages=[JOB], ledger_view=jobs)


@pytest.mark.crashpoints(points="B", faults=["power_loss"], providers=["email"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_pending_row_not_synced_is_lost_with_the_power_and_sent_again(crashpoints):
    report = crashpoints.run(worker=mailer("--skip-intent-sync"), messages=[JOB], ledger_view=jobs)
    assert "power lost at B" in str(report.failure.schedule)


@pytest.mark.crashpoints(points=["C", "db.commit"], faults=["failed_commit", "kill"],
                         max_faults=2, providers=["email"], mode="exhaustive", expect=1,
                         strict_coverage=False)
def test_a_failed_commit_logged_then_sent_and_killed_is_sent_twice(crashpoints):
    report = crashpoints.run(worker=mailer("--log-commit-errors"), messages=[JOB],
                             ledger_view=jobs)
    assert "commit fails" in str(report.failure.schedule)
