"""The fixtures ``crashpoints_redis`` (a server per test) and ``crashpoints_postgres`` (one per
session), end to end: what a test gets, and the skip where the server is not installed."""

from __future__ import annotations

import pytest

from pytest_crashpoints.servers import find_postgres_bin, find_redis_server

from .test_plugin import run

TESTS = """
import socket

SEEN = []

def _ping(path):
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(path))
        client.sendall(b"PING\\r\\n")
        return client.recv(64)

def test_redis_one(crashpoints_redis):
    assert _ping(crashpoints_redis.socket) == b"+PONG\\r\\n"
    SEEN.append(("redis", crashpoints_redis.socket))

def test_redis_two(crashpoints_redis):
    assert ("redis", crashpoints_redis.socket) not in SEEN  # a server of its own
    assert not SEEN[0][1].exists()  # the first test's is gone

def test_postgres_one(crashpoints_postgres):
    crashpoints_postgres.create_database("first")
    SEEN.append(("postgres", crashpoints_postgres.socket_dir))

def test_postgres_two(crashpoints_postgres):
    assert ("postgres", crashpoints_postgres.socket_dir) in SEEN  # the session's one
    assert "first" in crashpoints_postgres.execute("SELECT datname FROM pg_database")
"""


@pytest.mark.skipif(
    find_redis_server() is None or find_postgres_bin() is None,
    reason="needs redis-server and PostgreSQL (apt-get install redis-server postgresql)",
)
def test_a_test_gets_a_redis_of_its_own_and_the_session_one_postgresql(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(TESTS)
    result = run(pytester, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


def test_where_the_servers_are_not_installed_the_tests_are_skipped_saying_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest_crashpoints._servers.postgres_server as postgres
        import pytest_crashpoints._servers.redis_server as redis

        redis.find_redis_server = lambda: None
        postgres.find_postgres_bin = lambda: None
        """
    )
    pytester.makepyfile(TESTS)
    result = run(pytester, "-rs")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines_random([
        "SKIPPED [[]1[]] *:11: crashpoints: redis-server is not on PATH; install it (apt-get "
        "install redis-server, brew install redis).",
        "SKIPPED [[]1[]] *:19: crashpoints: PostgreSQL's initdb is neither on PATH nor in "
        "/usr/lib/postgresql; install it (apt-get install postgresql, brew install postgresql).",
    ])
