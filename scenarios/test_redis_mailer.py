"""A mailer with its jobs in Redis (``scenarios/redis_mailer.py``), on a Redis that syncs each
write before it answers (``appendonly yes``, ``appendfsync always``): the ``pending`` mark is on
disk before the mail goes out, and a power loss (Redis restarted on its files) keeps it. It
passes every default fault. Its twin on Redis's default persistence (RDB snapshots) is caught
in ``broken/test_redis_mailer.py``."""

import pytest

from pytest_crashpoints import State
from pytest_crashpoints.ledger import RedisLedgerView
from pytest_crashpoints.servers import find_redis_server
from scenarios import redis_mailer
from scenarios.queue_scenarios import skip_without

STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}
JOB = {"task_id": "job-7", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
SYNCED = {"appendonly": "yes", "appendfsync": "always"}

needs_redis = skip_without("the Redis mailer", {"redis-server": find_redis_server()})


def worker(job, ctx):
    return redis_mailer.handle(job, redis_url=ctx.redis_url, api_url=ctx.base_url("email"),
                               api_key=ctx.api_key("email", job["task_id"]))


def jobs(ctx):
    return RedisLedgerView(ctx.redis_url, keys="job:*", columns={"state": "status"},
                           states=STATES)


@needs_redis
@pytest.mark.crashpoints(points="ABC", providers=["email"], mode="exhaustive",
                         strict_coverage=False)
def test_a_pending_mark_synced_before_the_send_survives_a_power_loss(crashpoints):
    crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs, redis=SYNCED)


@needs_redis
@pytest.mark.crashpoints(points="ABC", faults=["power_loss"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_on_a_redis_that_syncs_each_write_a_power_loss_is_not_applicable(crashpoints):
    report = crashpoints.run(worker=worker, messages=[JOB], ledger_view=jobs, redis=SYNCED)
    assert any("appendfsync always" in reason for reason in report.not_applicable)
