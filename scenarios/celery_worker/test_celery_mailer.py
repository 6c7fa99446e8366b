"""A Celery worker, crash-tested as a command (``mailer.py``): the harness starts the worker
for a job, kills it with a real ``SIGKILL`` mid-task (at B, at the relay in front of the email
provider: the mail is sent and the task has not seen the answer), and starts it again, as your
supervisor would; the task runs again because the broker (Redis, ``acks_late``) redelivers it,
not because the harness says so. The timeline shows the worker's own line: ``redelivered by
the broker``.

The task that sends, then marks its row sent is not idempotent: redelivered after a kill at
B, it sends the mail again, caught by invariant 1 from the email provider's own journal. The
task that parks a job it finds half done passes every kill and every lost answer.

The worker is a Python program, so its commits are fail points (as a Python worker's are):
the fix is also killed at A (its ``pending`` row committed, the mail not sent) and at C (the
answer in, the row not yet marked).

The broker's state lives in ``redis-server``, outside the case's run directory: these tests
run on the processes engine (every schedule from scratch, every kill real). Skipped where
``redis-server`` or Celery is missing (CI installs both).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_crashpoints.servers import RedisServer, find_redis_server
from scenarios.queue_scenarios import JOB, jobs, killed_mid_job, skip_without

pytestmark = skip_without("the Celery scenario", {
    "redis-server (apt-get install redis-server)": find_redis_server(),
    "celery[redis] (pip install 'celery[redis]')": importlib.util.find_spec("celery"),
    "redis (pip install redis)": importlib.util.find_spec("redis"),
})

MAILER = str(Path(__file__).with_name("mailer.py"))


@pytest.fixture
def broker(crashpoints_redis: RedisServer) -> str:
    """A private ``redis-server`` for one test (the plugin's fixture), as kombu's URL."""
    return f"redis+socket://{crashpoints_redis.socket}"


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
