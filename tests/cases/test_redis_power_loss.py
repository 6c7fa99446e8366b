"""A power loss of a case whose agent keeps its state in Redis (``crashpoints.run(redis=...)``):
the case's redis-server is restarted on what its files keep, from a sync point just before the
delivery the power goes in; a plain kill keeps every write."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints._harness.storage.agent_redis import RedisConfig
from pytest_crashpoints.harness import Deliver, KillAt, Schedule, run_case
from pytest_crashpoints.servers import find_redis_server

from .conftest import email_task_scenario
from .test_power_loss import send_email

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")

MESSAGES = ({"task_id": "t-1", "to": "ada@example.com", "n": 0},
            {"task_id": "t-1", "to": "ada@example.com", "n": 1})


def worker(message: dict[str, Any], ctx: Any) -> str:
    """One key per message (``sent:<n>``), written before its e-mail (B): a redelivered message
    whose key survived is not sent again."""
    store = redis.Redis.from_url(ctx.redis_url)
    try:
        key = f"sent:{message['n']}"
        if store.exists(key):
            return "seen"
        store.set(key, "pending")
        send_email(message, ctx)
        return "sent"
    finally:
        store.close()


def scenario(config: dict[str, str]) -> Any:
    base = email_task_scenario(worker, MESSAGES[0])
    return dataclasses.replace(base, messages=MESSAGES, redis=RedisConfig.of(config or True))


@pytest.mark.parametrize(
    ("config", "said", "sent"),
    [
        ({}, "it loaded its last snapshot, dump.rdb", 3),
        ({"appendonly": "yes"}, "lost its last", 3),
        ({"appendonly": "yes", "appendfsync": "always"}, "Redis not restarted", 2),
    ],
    ids=["rdb", "everysec", "always"],
)
def test_a_power_loss_restarts_redis_on_what_it_kept_before_the_delivery(
    tmp_path: Path, config: dict[str, str], said: str, sent: int
) -> None:
    schedule = Schedule((Deliver(0), Deliver(1, KillAt("B", 1), power_loss=True)))
    result = run_case(scenario(config), schedule, base_dir=tmp_path)
    assert said in result.timeline, result.timeline
    if sent == 3:  # message 0's key, written before the sync point, is kept; message 1's not
        assert "it holds 1 key(s) now" in result.timeline
    assert len(result.expected_effects) == sent


def test_a_plain_kill_keeps_every_write_to_redis(tmp_path: Path) -> None:
    schedule = Schedule((Deliver(0), Deliver(1, KillAt("B", 1))))
    result = run_case(scenario({}), schedule, base_dir=tmp_path)
    assert "Redis restarted" not in result.timeline
    assert len(result.expected_effects) == 2


def parks(message: dict[str, Any], ctx: Any) -> str:
    """``job:<task>`` pending, the e-mail (B), then sent; one found pending is left alone
    (recovery parks it)."""
    store = redis.Redis.from_url(ctx.redis_url)
    try:
        key = f"job:{message['task_id']}"
        if store.hsetnx(key, "status", "pending") == 0:
            return "seen"
        send_email(message, ctx)
        store.hset(key, "status", "sent")
        return "sent"
    finally:
        store.close()


def recover(ctx: Any) -> None:
    from pytest_crashpoints import crashpoint

    store = redis.Redis.from_url(ctx.redis_url, decode_responses=True)
    try:
        for key in sorted(store.keys("job:*")):
            if store.hget(key, "status") == "pending":
                crashpoint("recovery.claimed", attempt_id=key)
                store.hset(key, "status", "review")
    finally:
        store.close()


def test_the_killed_recovery_replay_runs_on_a_copy_of_the_agents_redis(tmp_path: Path) -> None:
    from pytest_crashpoints import State
    from pytest_crashpoints.ledger import RedisLedgerView

    def view(ctx: Any) -> RedisLedgerView:
        states = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
                  "review": State.MANUAL_REVIEW}
        return RedisLedgerView(ctx.redis_url, keys="job:*", columns={"state": "status"},
                               states=states)

    base = email_task_scenario(parks, MESSAGES[0])
    case = dataclasses.replace(base, recover=recover, ledger_view=view, redis=RedisConfig())
    result = run_case(case, Schedule((Deliver(0, KillAt("B", 1)),)), base_dir=tmp_path)
    assert "recovery.claimed" in result.recovery_points
    # Killed at its claim and run again on the copy, recovery ends where it did on the case's
    # own Redis: nothing differs (on an empty Redis, the job's row would be missing).
    assert result.passed, (result.violations, result.errors, result.timeline)


def test_a_write_to_redis_places_the_automatic_a_before_the_next_tool_call(
    tmp_path: Path,
) -> None:
    result = run_case(scenario({}), Schedule((Deliver(0), Deliver(1))), base_dir=tmp_path)
    assert result.delivery_hits[0].get("A") == 1  # the pending key, then the e-mail: A
    assert result.delivery_hits[0].get("db.committed") == 1


@pytest.mark.parametrize("config", [{}, {"appendonly": "yes", "appendfsync": "always"}],
                         ids=["rdb", "always"])
def test_a_restored_backup_puts_redis_back_as_it_was_before_the_delivery(
    tmp_path: Path, config: dict[str, str]
) -> None:
    schedule = Schedule((Deliver(0), Deliver(1, KillAt("B", 1), backup_restore=True)))
    result = run_case(scenario(config), schedule, base_dir=tmp_path)
    said = "Redis restored from a backup taken when message 1 was about to be delivered"
    assert f"{said}: it holds 1 key(s)" in result.timeline, result.timeline
    assert len(result.expected_effects) == 3  # even a Redis that syncs every write forgets


def saves(message: dict[str, Any], ctx: Any) -> str:
    """``worker``, with a snapshot of its own (``SAVE``) between its key and its e-mail."""
    store = redis.Redis.from_url(ctx.redis_url)
    try:
        key = f"sent:{message['n']}"
        if store.exists(key):
            return "seen"
        store.set(key, "pending")
        store.save()
        send_email(message, ctx)
        return "sent"
    finally:
        store.close()


def test_a_snapshot_the_agent_takes_before_its_tool_call_survives_the_power_loss(
    tmp_path: Path,
) -> None:
    case = dataclasses.replace(scenario({}), worker=saves)
    schedule = Schedule((Deliver(0), Deliver(1, KillAt("B", 1), power_loss=True)))
    result = run_case(case, schedule, base_dir=tmp_path)
    assert "the 0 change(s) made after it are gone; it holds 2 key(s) now" in result.timeline
    assert len(result.expected_effects) == 2


#: A Python program run as a command: its Redis from CRASHPOINTS_REDIS_URL, its mail over
#: the email provider's URL and key the harness gives every command.
PROGRAM = """
import json, os, sys
import httpx, redis
job = json.loads(sys.stdin.readline())
store = redis.Redis.from_url(os.environ["CRASHPOINTS_REDIS_URL"])
if store.set(f"job:{job['task_id']}", "pending", nx=True):
    httpx.post(os.environ["CRASHPOINTS_EMAIL_URL"] + "/v3/mail/send",
               headers={"Authorization": "Bearer " + os.environ["CRASHPOINTS_EMAIL_KEY"]},
               json={"personalizations": [{"to": [{"email": "ada@example.com"}]}],
                     "from": {"email": "a@example.com"}, "subject": "s",
                     "content": [{"type": "text/plain", "value": "b"}]},
               timeout=30).raise_for_status()
"""


def test_a_python_program_run_as_a_command_writes_to_the_case_s_redis_as_a_commit(
    tmp_path: Path,
) -> None:
    import sys

    from pytest_crashpoints.harness import CommandWorker

    worker = CommandWorker([sys.executable, "-c", PROGRAM])
    case = dataclasses.replace(email_task_scenario(worker, MESSAGES[0]),
                               redis=RedisConfig.of(True))
    clean = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert clean.passed, clean.timeline
    assert clean.hits.get("db.committed") == 1 and clean.hits.get("A") == 1
    lost = run_case(case, Schedule((Deliver(0, KillAt("B", 1), power_loss=True),)),
                    base_dir=tmp_path, expected=clean.expected_effects)
    assert "Redis restarted" in lost.timeline
    assert len(lost.expected_effects) == 2  # its key lost with the power: mailed again
