"""An RQ worker, crash-tested as a command (``mailer.py``): the harness starts the worker for
a job, kills it with a real ``SIGKILL`` mid-job (at B: the mail is sent and the job has not
seen the answer), and starts it again, as your supervisor would. What happens to the job then
is RQ's decision, observed: its maintenance finds the job abandoned in the
``StartedJobRegistry`` and requeues it if it has retries left, or fails it for good.

- RQ's default, no ``Retry``: the abandoned job is moved to the ``FailedJobRegistry`` and never
  runs again; the mailer's row stays ``pending``, a job stuck half done (invariant 2). The
  worker's output shows RQ's own record of it (``AbandonedJobError``).
- ``Retry(max=3)``: RQ runs the job again; the mailer finds its ``pending`` row and parks the
  job for review instead of mailing twice. It passes.

The worker is a Python program, so its commits are fail points (as a Python worker's are):
the fix is also killed at A (its ``pending`` row committed, the mail not sent) and at C (the
answer in, the row not yet marked).

The broker's state lives in ``redis-server``, outside the case's run directory: these tests
run on the processes engine (every schedule from scratch, every kill real). Skipped where
``redis-server`` or RQ is missing (CI installs both).
"""

import importlib.util
import sys
from pathlib import Path

import pytest

from pytest_crashpoints.servers import RedisServer, find_redis_server
from scenarios.queue_scenarios import JOB, jobs, killed_mid_job, skip_without

pytestmark = skip_without("the RQ scenario", {
    "redis-server (apt-get install redis-server)": find_redis_server(),
    "rq (pip install rq)": importlib.util.find_spec("rq"),
})

MAILER = str(Path(__file__).with_name("mailer.py"))


@pytest.fixture
def broker(crashpoints_redis: RedisServer) -> str:
    """A private ``redis-server`` for one test (the plugin's fixture), as RQ's URL."""
    return crashpoints_redis.url


@killed_mid_job()
def test_a_job_with_retries_is_run_again_by_rq_and_parked(crashpoints, broker):
    report = crashpoints.run(command=[sys.executable, MAILER, "3", broker], messages=[JOB],
                             ledger_view=jobs)
    assert report.killed["A"] and report.killed["B"] and report.killed["C"]


@killed_mid_job(expect=2)
def test_rqs_default_fails_an_abandoned_job_for_good(crashpoints, broker):
    report = crashpoints.run(command=[sys.executable, MAILER, "0", broker], messages=[JOB],
                             ledger_view=jobs)
    assert str(report.failure.schedule) == "deliver message 0, kill at B (hit 1)"
    assert "AbandonedJobError" in report.failure.timeline
