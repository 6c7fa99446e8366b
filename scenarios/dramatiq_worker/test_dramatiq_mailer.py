"""A Dramatiq worker (Redis broker), crash-tested as a command (``mailer.py``): the harness
starts the worker for a job, kills it with a real ``SIGKILL`` mid-message (at B: the mail is
sent, the actor has not seen the answer), and starts it again, as your supervisor would. The
message runs again because Dramatiq's broker puts a dead worker's unacknowledged messages back
on the queue (its heartbeat ran out), not because the harness says so: at least once.

The actor that sends, then marks its row sent is not idempotent: run again after a kill at B,
it mails twice (invariant 1). The actor that parks a job it finds half done passes.

The worker is a Python program, so its commits are fail points (as a Python worker's are):
the fix is also killed at A (its ``pending`` row committed, the mail not sent) and at C (the
answer in, the row not yet marked).

The broker's state lives in ``redis-server``: these tests run on the processes engine. Skipped
where ``redis-server`` or Dramatiq is missing (CI installs both).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_crashpoints.servers import RedisServer, find_redis_server
from scenarios.queue_scenarios import JOB, jobs, killed_mid_job, skip_without

pytestmark = skip_without("the Dramatiq scenario", {
    "redis-server (apt-get install redis-server)": find_redis_server(),
    "dramatiq[redis] (pip install 'dramatiq[redis]')": importlib.util.find_spec("dramatiq"),
})

MAILER = str(Path(__file__).with_name("mailer.py"))


@pytest.fixture
def broker(crashpoints_redis: RedisServer) -> str:
    """A private ``redis-server`` for one test (the plugin's fixture), as Dramatiq's URL."""
    return crashpoints_redis.url


@killed_mid_job()
def test_an_actor_that_parks_a_half_done_job_survives_redelivery(crashpoints, broker):
    report = crashpoints.run(command=[sys.executable, MAILER, "parks-the-ambiguous", broker],
                             messages=[JOB], ledger_view=jobs)
    assert report.killed["A"] and report.killed["B"] and report.killed["C"]


@killed_mid_job(expect=1)
def test_an_actor_that_is_not_idempotent_mails_twice_on_redelivery(crashpoints, broker):
    report = crashpoints.run(command=[sys.executable, MAILER, "sends-then-marks", broker],
                             messages=[JOB], ledger_view=jobs)
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
