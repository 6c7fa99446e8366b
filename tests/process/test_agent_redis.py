"""The agent's Redis (``storage/agent_redis.py``): what a restart keeps, by persistence, on a
real redis-server killed with SIGKILL and started again on its files; and the declared
configuration's errors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from pytest_crashpoints._harness.storage.agent_redis import AgentRedis, RedisConfig
from pytest_crashpoints.errors import CrashpointsError
from pytest_crashpoints.servers import find_redis_server

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")

RDB: Mapping[str, str] = {}  # Redis's defaults
EVERYSEC = {"appendonly": "yes", "appendfsync": "everysec"}
ALWAYS = {"appendonly": "yes", "appendfsync": "always"}
NOTHING = {"save": ""}


@pytest.fixture
def agent_redis(request: pytest.FixtureRequest) -> Iterator[AgentRedis]:
    config = RedisConfig.of(dict(request.param) or True)
    assert config is not None
    server = AgentRedis(config).start()
    try:
        yield server
    finally:
        server.close()


def keys(server: AgentRedis) -> list[str]:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        return sorted(client.keys())
    finally:
        client.close()


def write(server: AgentRedis, *names: str) -> None:
    client = redis.Redis.from_url(server.url)
    try:
        for name in names:
            client.hset(name, "status", "pending")
    finally:
        client.close()


@pytest.mark.parametrize("agent_redis", [RDB, EVERYSEC], indirect=True, ids=["rdb", "everysec"])
def test_a_restart_loses_the_writes_since_the_sync_point_and_keeps_those_before(
    agent_redis: AgentRedis,
) -> None:
    write(agent_redis, "job:1")
    agent_redis.sync_point("message 0 was about to be delivered")
    write(agent_redis, "job:2")
    assert agent_redis.keeps_everything() is None
    said = agent_redis.restart()
    assert keys(agent_redis) == ["job:1"]
    assert "it holds 1 key(s) now" in said


@pytest.mark.parametrize("agent_redis", [RDB], indirect=True, ids=["rdb"])
def test_a_snapshot_the_agent_takes_itself_is_what_a_restart_loads(
    agent_redis: AgentRedis,
) -> None:
    agent_redis.sync_point("message 0 was about to be delivered")
    write(agent_redis, "job:1")
    agent_redis.server.call("SAVE")  # the agent's own, after the harness's
    write(agent_redis, "job:2")
    said = agent_redis.restart()
    assert keys(agent_redis) == ["job:1"]
    assert "the 1 change(s) made after it are gone" in said


@pytest.mark.parametrize("agent_redis", [EVERYSEC], indirect=True, ids=["everysec"])
def test_the_append_only_file_is_cut_back_to_its_sync_point_and_says_what_it_lost(
    agent_redis: AgentRedis,
) -> None:
    agent_redis.sync_point("message 0 was about to be delivered")
    write(agent_redis, "job:1", "job:2")
    said = agent_redis.restart()
    assert keys(agent_redis) == []
    assert "2 command(s): HSET, HSET" in said
    # Restarted again with nothing written since: nothing more to lose.
    agent_redis.sync_point("message 1 was about to be delivered")
    write(agent_redis, "job:3")
    agent_redis.sync_point("message 2 was about to be delivered")
    assert "nothing written since" in agent_redis.restart()
    assert keys(agent_redis) == ["job:3"]


@pytest.mark.parametrize("agent_redis", [ALWAYS], indirect=True, ids=["always"])
def test_appendfsync_always_keeps_everything(agent_redis: AgentRedis) -> None:
    reason = agent_redis.keeps_everything()
    assert reason is not None and "appendfsync always" in reason


@pytest.mark.parametrize("agent_redis", [NOTHING], indirect=True, ids=["no-persistence"])
def test_without_persistence_a_restart_keeps_nothing(agent_redis: AgentRedis) -> None:
    write(agent_redis, "job:1")
    agent_redis.sync_point("message 0 was about to be delivered")
    assert "every key it held is gone" in agent_redis.restart()
    assert keys(agent_redis) == []


@pytest.mark.parametrize("agent_redis", [EVERYSEC], indirect=True, ids=["everysec"])
def test_a_clone_holds_what_the_server_holds_and_is_a_server_of_its_own(
    agent_redis: AgentRedis,
) -> None:
    write(agent_redis, "job:1")
    copy = agent_redis.clone()
    try:
        assert copy.url != agent_redis.url
        assert keys(copy) == ["job:1"]
        write(copy, "job:2")
        assert keys(agent_redis) == ["job:1"]
    finally:
        copy.close()


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("yes", "is not a Redis configuration"),
        ({"appendfsync": ["always"]}, "a directive is a name and its value"),
        ({"dir": "/var/lib/redis"}, "the harness sets 'dir' itself"),
        ({"PORT": 6379}, "the harness sets 'PORT' itself"),
    ],
)
def test_a_configuration_the_harness_cannot_run_is_refused_saying_why(
    value: object, words: str
) -> None:
    with pytest.raises(CrashpointsError, match=words):
        RedisConfig.of(value)


def test_the_declared_persistence_is_described_in_redis_words() -> None:
    assert RedisConfig.of(None) is None and RedisConfig.of(False) is None
    default = RedisConfig.of(True)
    assert default is not None and default.describe().startswith("RDB snapshots (save 3600")
    aof = RedisConfig.of({"appendonly": "yes"})
    assert aof is not None and aof.describe() == "appendonly yes, appendfsync everysec"
    # The harness takes the snapshots: the server runs without its save rules.
    assert ("save", "") in default.server_directives()


def test_ctx_redis_url_without_a_redis_says_how_to_ask_for_one(tmp_path) -> None:
    from pytest_crashpoints._harness.case.context import CaseEnv, Context

    ctx = Context(CaseEnv(str(tmp_path), ()), "worker-1")
    with pytest.raises(CrashpointsError, match=r"pass redis=True .* to crashpoints.run"):
        ctx.redis_url  # noqa: B018 - the property raises
    given = Context(CaseEnv(str(tmp_path), (), redis_url="unix:///x/redis.sock"), "worker-1")
    assert given.redis_url == "unix:///x/redis.sock"
    assert given.sdk_env()["CRASHPOINTS_REDIS_URL"] == "unix:///x/redis.sock"
    assert "CRASHPOINTS_REDIS_URL" not in ctx.sdk_env()


@pytest.mark.parametrize("agent_redis", [NOTHING, EVERYSEC], indirect=True,
                         ids=["no-persistence", "everysec"])
def test_a_backup_is_put_back_and_leaves_no_snapshot_behind(agent_redis: AgentRedis) -> None:
    write(agent_redis, "job:1")
    backup = agent_redis.backup()
    write(agent_redis, "job:2")
    assert not (agent_redis.server.folder / "dump.rdb").exists() or agent_redis.config.appendonly
    said = agent_redis.restore(backup, "message 1 was about to be delivered")
    assert keys(agent_redis) == ["job:1"]
    assert said.endswith("it holds 1 key(s)")
