"""RedisLedgerView: a ledger kept in Redis hashes read as the harness reads any ledger, on a
real redis-server; each value it cannot read refused in one line that names where it is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_crashpoints import State
from pytest_crashpoints.errors import LedgerError
from pytest_crashpoints.ledger import RedisLedgerView
from pytest_crashpoints.servers import RedisServer, find_redis_server, redis_server

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")

STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED}


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


@pytest.fixture
def store(server: RedisServer) -> Iterator[object]:
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()


def by_keys(server: RedisServer) -> RedisLedgerView:
    return RedisLedgerView(server.url, keys="job:*", columns={"state": "status"}, states=STATES)


def test_a_hash_per_attempt_is_read_with_its_key_as_the_id(server: RedisServer, store) -> None:
    store.hset("job:2", mapping={"status": "sent", "created_at": "5", "task": "t-2"})
    store.hset("job:1", mapping={"status": "pending", "created_at": "3", "task": "t-1"})
    store.set("other", "not a job")
    view = RedisLedgerView(server.url, keys="job:*", states=STATES,
                           columns={"state": "status", "task_id": "task"})
    attempts = view.attempts()
    assert [(a.attempt_id, a.task_id, a.state, a.created_at) for a in attempts] == [
        ("job:1", "t-1", State.DISPATCHED, 3.0),
        ("job:2", "t-2", State.OUTCOME_CONFIRMED, 5.0),
    ]
    assert [entry.attempt_id for entry in view.queue()] == ["job:1"]
    assert {"attempt_id", "state", "task_id", "created_at"} <= view.provides


def test_one_hash_of_states_or_of_json_records_is_read_field_by_field(
    server: RedisServer, store
) -> None:
    store.hset("jobs", mapping={"job-1": "pending", "job-2": "sent"})
    states = RedisLedgerView(server.url, hash="jobs", states=STATES).attempts()
    assert [(a.attempt_id, a.state) for a in states] == [
        ("job-1", State.DISPATCHED), ("job-2", State.OUTCOME_CONFIRMED)]
    store.hset("records", "job-3", '{"status": "sent", "key": "k-3"}')
    view = RedisLedgerView(server.url, hash="records", states=STATES,
                           columns={"state": "status", "idempotency_key": "key"})
    assert [(a.attempt_id, a.state, a.idempotency_key) for a in view.attempts()] == [
        ("job-3", State.OUTCOME_CONFIRMED, "k-3")]


def test_no_key_yet_is_an_empty_ledger(server: RedisServer) -> None:
    assert by_keys(server).attempts() == []
    assert RedisLedgerView(server.url, hash="jobs").attempts() == []


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        ({"status": "queued"}, r"state 'queued' in redis .* key 'job:1' .*map it with states="),
        ({"status": b"\xff\xfe"},
         r"key 'job:1' field 'status' holds b'\\xff\\xfe', which is not UTF-8 text; store"),
        ({"state": "sent"}, r"has the field\(s\) status; map your names with columns="),
    ],
    ids=["unmapped-state", "not-utf8", "missing-field"],
)
def test_a_value_the_view_cannot_read_is_refused_naming_the_key_the_value_and_the_fix(
    server: RedisServer, store, stored: dict[str, object], words: str
) -> None:
    store.hset("job:1", mapping=stored)
    with pytest.raises(LedgerError, match=words) as caught:
        by_keys(server).attempts()
    assert "\n" not in str(caught.value)


def test_a_key_that_is_not_a_hash_is_refused_saying_to_narrow_the_pattern(
    server: RedisServer, store
) -> None:
    store.hset("job:1", "status", "sent")
    store.rpush("job:queue", "job:1")
    with pytest.raises(LedgerError, match=r"key 'job:queue' is a list, not a hash; .*narrow"):
        by_keys(server).attempts()


def test_a_time_that_is_not_a_number_is_refused_naming_the_key(
    server: RedisServer, store
) -> None:
    store.hset("job:1", mapping={"status": "sent", "at": "yesterday"})
    view = RedisLedgerView(server.url, keys="job:*", states=STATES,
                           columns={"state": "status", "created_at": "at"})
    with pytest.raises(LedgerError, match=r"key 'job:1'.*holds 'yesterday', not a number"):
        view.attempts()


def test_a_hash_value_that_looks_like_json_and_is_not_is_refused(
    server: RedisServer, store
) -> None:
    store.hset("jobs", "job-1", "{status: sent")
    with pytest.raises(LedgerError, match=r"field 'job-1' holds '\{status: sent', which is not"):
        RedisLedgerView(server.url, hash="jobs", states=STATES).attempts()


def test_the_hash_layout_on_a_key_of_another_type_is_refused(server: RedisServer, store) -> None:
    store.set("jobs", "x")
    with pytest.raises(LedgerError, match=r"hash 'jobs'.*WRONGTYPE.*hash= names a hash"):
        RedisLedgerView(server.url, hash="jobs").attempts()


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({}, "needs one of keys="),
        ({"keys": "job:*", "hash": "jobs"}, "needs one of keys="),
        ({"keys": "job:*", "columns": {"status": "status"}}, "status is not a seed name"),
    ],
)
def test_a_view_set_up_wrong_is_refused(arguments: dict[str, object], words: str) -> None:
    with pytest.raises(LedgerError, match=words):
        RedisLedgerView("redis://localhost:6379/0", **arguments)  # type: ignore[arg-type]


def test_a_server_that_does_not_answer_is_a_ledger_error(tmp_path) -> None:
    view = RedisLedgerView(f"unix://{tmp_path / 'none.sock'}", keys="job:*")
    with pytest.raises(LedgerError, match="the server did not answer"):
        view.attempts()


def test_without_redis_py_the_view_says_what_to_install(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "redis", None)  # import redis raises ImportError
    with pytest.raises(LedgerError, match=r"pip install 'pytest-crashpoints\[redis\]'"):
        by_keys(server).attempts()
