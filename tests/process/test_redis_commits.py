"""db.commit and db.committed around every write to Redis through redis-py, in real worker
processes against a real redis-server."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence

import pytest

from pytest_crashpoints._inject.failpoints import COMMIT_POINTS, Fault, Hit, Kill, Raise
from pytest_crashpoints._inject.redis_commits import install_redis_hooks, is_write
from pytest_crashpoints._process.outcome import Completed, Killed, Outcome, Raised
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.servers import RedisServer, find_redis_server, redis_server

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with redis_server() as running:
        yield running


def run_hooked(
    style: Callable[[str], object], server: RedisServer, *, faults: Sequence[Fault] = ()
) -> Outcome:
    def worker() -> object:
        install_redis_hooks()
        return style(server.url)

    return run_worker(worker, faults=faults)


def commits(outcome: Outcome) -> list[tuple[str, object, object]]:
    hits: Sequence[Hit] = getattr(outcome, "hits", ())
    return [
        (hit.point, hit.context["db"], hit.context["command"])
        for hit in hits
        if hit.point in COMMIT_POINTS
    ]


def pairs(*commands: str, db: str = "redis:0") -> list[tuple[str, object, object]]:
    return [(point, db, command) for command in commands for point in COMMIT_POINTS]


def client(url: str) -> object:
    return redis.Redis.from_url(url)


def keys(server: RedisServer) -> dict[str, object]:
    r = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        return {key: r.dump(key) is not None for key in sorted(r.keys())}
    finally:
        r.close()


# -- what fires -------------------------------------------------------------------------------


def writes_and_reads(url: str) -> str:
    r = redis.Redis.from_url(url)
    r.set("a", "1")
    r.get("a")  # a read: nothing
    r.hset("job:7", mapping={"status": "pending", "to": "ada@example.com"})
    r.hgetall("job:7")
    r.eval("return redis.call('INCR', KEYS[1])", 1, "counter")
    r.execute_command("FUNCTION LIST")  # a read subcommand
    with r.pipeline() as pipe:  # MULTI/EXEC: one commit
        pipe.hset("job:7", "status", "sent").expire("job:7", 3600).execute()
    with r.pipeline(transaction=False) as pipe:  # sent at once: one commit
        pipe.incr("counter").get("counter").execute()
    with r.pipeline() as pipe:  # reads only: nothing
        pipe.get("a").hget("job:7", "status").execute()
    redis.Redis.from_url(url, db=2).delete("a")
    return "done"


def test_each_write_fires_both_points_and_reads_fire_nothing(server: RedisServer) -> None:
    outcome = run_hooked(writes_and_reads, server)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome) == [
        *pairs("SET", "HSET", "EVAL", "MULTI/EXEC", "PIPELINE"),
        *pairs("DEL", db="redis:2"),
    ]
    hit = next(h for h in outcome.hits if h.point == "db.commit")
    assert hit.context["server"] == server.url
    numbers = [h.context["n"] for h in outcome.hits if h.point == "db.committed"]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


async def async_writes(url: str) -> None:
    from redis.asyncio import Redis

    r = Redis.from_url(url)
    try:
        await r.set("a", "1")
        await r.get("a")
        async with r.pipeline() as pipe:
            await pipe.hset("job:7", "status", "sent").incr("n").execute()
        await r.evalsha(await r.script_load("return 1"), 0)
    finally:
        await r.aclose()


def test_the_asyncio_client_fires_them_too(server: RedisServer) -> None:
    outcome = run_hooked(lambda url: asyncio.run(async_writes(url)), server)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome) == pairs("SET", "MULTI/EXEC", "EVALSHA")


def watched_transaction(url: str) -> None:
    r = redis.Redis.from_url(url)

    def claim(pipe: object) -> None:
        status = pipe.hget("job:7", "status")  # type: ignore[attr-defined]
        pipe.multi()  # type: ignore[attr-defined]
        if status is None:
            pipe.hset("job:7", "status", "pending")  # type: ignore[attr-defined]

    r.transaction(claim, "job:7")


def test_a_watched_transaction_is_one_commit(server: RedisServer) -> None:
    outcome = run_hooked(watched_transaction, server)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome) == pairs("MULTI/EXEC")


# -- kills and failures -----------------------------------------------------------------------


def two_writes(url: str) -> None:
    r = redis.Redis.from_url(url)
    r.set("first", "1")
    r.set("second", "2")


@pytest.mark.parametrize(
    ("point", "kept"), [("db.commit", ["first"]), ("db.committed", ["first", "second"])]
)
def test_a_kill_before_the_write_leaves_nothing_and_after_it_the_write(
    server: RedisServer, point: str, kept: list[str]
) -> None:
    outcome = run_hooked(two_writes, server, faults=[Fault(point, Kill(), hit=2)])
    assert isinstance(outcome, Killed)
    assert list(keys(server)) == kept


def refused_write(url: str) -> str:
    r = redis.Redis.from_url(url)
    r.set("first", "1")
    try:
        with r.pipeline() as pipe:
            pipe.set("second", "2").set("third", "3").execute()
    except redis.exceptions.RedisError as exc:
        return f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    return "applied"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ("disk I/O error", "redis.exceptions.ResponseError: MISCONF Redis is configured to save"),
        ("database or disk is full", "redis.exceptions.OutOfMemoryError: command not allowed"),
    ],
)
def test_a_failed_commit_is_redis_refusing_it_with_nothing_applied(
    server: RedisServer, error: str, said: str
) -> None:
    fault = Fault("db.commit", Raise(sqlite3.OperationalError(error)), hit=2)
    outcome = run_hooked(refused_write, server, faults=[fault])
    assert isinstance(outcome, Completed), outcome
    assert str(outcome.value).startswith(said)
    assert list(keys(server)) == ["first"]
    assert [h.point for h in outcome.hits] == ["db.commit", "db.committed", "db.commit"]


def test_an_unhandled_refusal_raises_redis_s_error(server: RedisServer) -> None:
    fault = Fault("db.commit", Raise(sqlite3.OperationalError("disk I/O error")), hit=1)
    outcome = run_hooked(two_writes, server, faults=[fault])
    assert isinstance(outcome, Raised)
    assert outcome.exc_type == "redis.exceptions.ResponseError"
    assert keys(server) == {}


# -- installing -------------------------------------------------------------------------------


def test_without_the_hooks_nothing_fires(server: RedisServer) -> None:
    outcome = run_worker(lambda: two_writes(server.url))
    assert isinstance(outcome, Completed)
    assert commits(outcome) == []


def test_installing_imports_nothing_and_hooks_redis_when_it_is_imported() -> None:
    code = (
        "import sys\n"
        "from pytest_crashpoints._inject.redis_commits import install_redis_hooks\n"
        "install_redis_hooks(); install_redis_hooks()\n"
        "print('redis' in sys.modules)\n"
        "import redis, redis.asyncio\n"
        "print(redis.Redis.execute_command._crashpoints_hooked,"
        " redis.asyncio.client.Pipeline.execute._crashpoints_hooked)\n"
        "print(redis.Redis.execute_command.__wrapped__.__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split("\n")
    assert out[:3] == ["False", "True True", "execute_command"]


@pytest.mark.parametrize(
    ("args", "writes"),
    [
        (("SET", "k", "v"), True),
        ((b"hset", "k", "f", "v"), True),
        (("EVAL_RO", "return 1", 0), False),
        (("FCALL", "f", 0), True),
        (("FUNCTION LOAD", "code"), True),
        (("FUNCTION", "list"), False),
        (("XGROUP", "CREATE", "s", "g", "$"), True),
        (("GET", "k"), False),
        (("WAIT", 1, 0), False),
        ((), False),
    ],
)
def test_what_is_a_write(args: tuple[object, ...], writes: bool) -> None:
    assert is_write(args) is writes
