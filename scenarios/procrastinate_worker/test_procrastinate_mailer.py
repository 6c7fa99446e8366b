"""A procrastinate worker (PostgreSQL), crash-tested as a command (``mailer.py``): the harness
starts the worker for a job, kills it with a real ``SIGKILL`` mid-job (at B: the mail is sent,
the job has not seen the answer), and starts it again, as your supervisor would.

Procrastinate leaves a killed worker's job ``doing`` and does not take it back by itself: the
restarted worker finds nothing to do, and the mailer's row stays ``pending`` for good
(invariant 2; the worker's output shows the job's status, ``doing``). The fix is a periodic
task that retries stalled jobs (procrastinate's ``get_stalled_jobs`` and ``retry_job``): the
job runs again, finds its row and is parked. It passes.

The worker is a Python program, so its commits are fail points (as a Python worker's are):
the fix is also killed at A (its ``pending`` row committed, the mail not sent) and at C (the
answer in, the row not yet marked).

The jobs live in a private PostgreSQL server (one for the module, on a Unix socket), outside
the case's run directory: these tests run on the processes engine, each case's queue named
for its run directory. Skipped where PostgreSQL or procrastinate is missing (CI installs both).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_crashpoints.servers import PostgresServer, find_postgres_bin
from scenarios.queue_scenarios import JOB, jobs, killed_mid_job, skip_without

pytestmark = skip_without("the procrastinate scenario", {
    "PostgreSQL (apt-get install postgresql)": find_postgres_bin(),
    "procrastinate (pip install procrastinate)": importlib.util.find_spec("procrastinate"),
})

MAILER = str(Path(__file__).with_name("mailer.py"))


@pytest.fixture(scope="module")
def database(crashpoints_postgres: PostgresServer) -> str:
    """A database with procrastinate's schema in the session's private PostgreSQL (the
    plugin's fixture), for the tests of this module."""
    import procrastinate

    dsn = crashpoints_postgres.create_database("procrastinate_mailer")
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    with app.open():
        app.schema_manager.apply_schema()
    return dsn


@killed_mid_job()
def test_stalled_jobs_retried_by_a_periodic_task_survive_a_kill(crashpoints, database):
    report = crashpoints.run(command=[sys.executable, MAILER, "retry-stalled", database],
                             messages=[JOB], ledger_view=jobs)
    assert report.killed["A"] and report.killed["B"] and report.killed["C"]


@killed_mid_job(expect=2)
def test_procrastinates_default_leaves_a_killed_workers_job_doing(crashpoints, database):
    report = crashpoints.run(command=[sys.executable, MAILER, "default", database],
                             messages=[JOB], ledger_view=jobs)
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
    assert "job-7: doing" in report.failure.timeline
