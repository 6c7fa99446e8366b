"""A Celery worker, crash-tested as a command (``mailer.py``): the harness starts the worker
for a job, kills it with a real ``SIGKILL`` mid-task (at B, at the relay in front of the email
provider: the mail is sent and the task has not seen the answer), and starts it again, as your
supervisor would; the task runs again because the broker (Redis, ``acks_late``) redelivers it,
not because the harness says so. The timeline shows the worker's own line: ``redelivered by
the broker``.

The task that sends, then marks its row sent is not idempotent: redelivered after a kill at
B, it sends the mail again, caught by invariant 1 from the email provider's own journal. The
task that parks a job it finds half done passes every kill and every lost answer.

The broker's state lives in ``redis-server``, outside the case's run directory: these tests
run on the processes engine (every schedule from scratch, every kill real). Skipped where
``redis-server`` or Celery is missing (CI installs both).
"""

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scenarios.queue_scenarios import JOB, jobs, killed_mid_job, skip_without
from scenarios.redis_server import REDIS, redis_server

pytestmark = skip_without("the Celery scenario", {
    "redis-server (apt-get install redis-server)": REDIS,
    "celery[redis] (pip install 'celery[redis]')": importlib.util.find_spec("celery"),
    "redis (pip install redis)": importlib.util.find_spec("redis"),
})

MAILER = str(Path(__file__).with_name("mailer.py"))


@pytest.fixture
def broker() -> Iterator[str]:
    """A private ``redis-server`` on a Unix socket for one test, stopped and reaped after."""
    with redis_server() as socket:
        yield f"redis+socket://{socket}"


@killed_mid_job()
def test_a_task_that_parks_a_half_done_job_survives_redelivery(crashpoints, broker):
    report = crashpoints.run(
        command=[sys.executable, MAILER, "parks-the-ambiguous", broker],
        messages=[JOB],
        ledger_view=jobs,
    )
    assert report.killed["A"] and report.killed["B"] and report.killed["C"]


@killed_mid_job(expect=1)
def test_a_task_that_is_not_idempotent_mails_twice_on_redelivery(crashpoints, broker):
    report = crashpoints.run(
        command=[sys.executable, MAILER, "sends-then-marks", broker],
        messages=[JOB],
        ledger_view=jobs,
    )
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
    assert "redelivered by the broker" in report.failure.timeline
