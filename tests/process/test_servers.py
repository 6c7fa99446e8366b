"""A test's private servers (``pytest_crashpoints.servers``): Redis and PostgreSQL started in
a temporary directory on a Unix socket, answering, and gone after, whatever happened; a
database cloned from a template; what is refused, in one line."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_crashpoints.errors import HarnessUsageError, ServerError
from pytest_crashpoints.servers import (
    PostgresServer,
    find_postgres_bin,
    find_redis_server,
    postgres_server,
    redis_server,
)

from .test_worker import wait_gone

needs_redis = pytest.mark.skipif(
    find_redis_server() is None,
    reason="redis-server is not installed (apt-get install redis-server)",
)
needs_postgres = pytest.mark.skipif(
    find_postgres_bin() is None, reason="PostgreSQL is not installed (apt-get install postgresql)"
)


def _redis(path: Path, command: bytes) -> bytes:
    """One command in Redis's protocol, over the Unix socket; the first line of the answer."""
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(command)
        answer = b""
        while not answer.endswith(b"\r\n"):
            answer += client.recv(1024)
    return answer


def _children() -> set[int]:
    me = os.getpid()
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                found.add(int(entry.name))
    return found


@needs_redis
def test_a_private_redis_answers_on_its_socket_and_is_gone_after() -> None:
    before = _children()
    with redis_server() as server:
        assert server.url == f"unix://{server.socket}"
        assert _redis(server.socket, b"SET k v\r\n") == b"+OK\r\n"
        assert _redis(server.socket, b"GET k\r\n").startswith(b"$1")
        [pid] = _children() - before
        folder = server.socket.parent
        assert oct(server.socket.stat().st_mode & 0o777) == "0o700"
    assert wait_gone(pid, timeout=30)
    assert _children() == before and not folder.exists()


@needs_redis
def test_a_redis_left_by_a_test_process_killed_outright_dies_with_it(tmp_path: Path) -> None:
    # Its temporary directory, which nothing removes once it is killed: one of the test's.
    own_tmp = Path(tempfile.mkdtemp(prefix="crashpoints-test-", dir="/tmp"))
    ready = tmp_path / "ready"
    script = (
        "import time\n"
        "from pytest_crashpoints.servers import redis_server\n"
        "with redis_server() as server:\n"
        f"    open({str(ready)!r}, 'w').write('ready')\n"
        "    time.sleep(600)  # killed by the test meanwhile\n"
    )
    test_process = subprocess.Popen([sys.executable, "-c", script],
                                    env={**os.environ, "TMPDIR": str(own_tmp)})
    try:
        from tests.conftest import wait_until

        wait_until(ready.exists, timeout=60, what="the test process's server")
        server = next(
            int(entry.name) for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _parent(entry) == test_process.pid
        )
    finally:
        test_process.send_signal(signal.SIGKILL)
        test_process.wait(timeout=30)
    try:
        assert wait_gone(server, timeout=30)
    finally:
        shutil.rmtree(own_tmp)


def test_a_deep_temporary_directory_does_not_make_the_socket_path_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    if find_redis_server() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with redis_server() as server:
        assert _redis(server.socket, b"PING\r\n") == b"+PONG\r\n"
        assert server.socket.parent.parent == Path("/tmp")


def _parent(entry: Path) -> int:
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_a_missing_server_is_an_error_that_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_crashpoints._servers import postgres_server as module

    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServerError) as raised, redis_server():
        pass
    assert not raised.value.installed
    assert str(raised.value) == (
        "redis-server is not on PATH; install it (apt-get install redis-server, "
        "brew install redis)."
    )
    monkeypatch.setattr(module, "find_postgres_bin", lambda: None)
    with pytest.raises(ServerError, match="PostgreSQL's initdb is neither on PATH"), (
        postgres_server()
    ):
        pass


def test_under_root_postgresql_runs_as_the_postgres_user_or_says_how(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pwd

    from pytest_crashpoints._servers import postgres_server as module

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert module._run_as() is None  # as the user the tests run as
    monkeypatch.setattr(os, "geteuid", lambda: 0)

    def no_user(name: str) -> object:
        raise KeyError(name)

    monkeypatch.setattr(pwd, "getpwnam", no_user)
    with pytest.raises(ServerError, match="refuses to run as root, and there is no postgres"):
        module._run_as()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    if find_postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    with postgres_server() as server:
        yield server


@needs_postgres
def test_a_database_cloned_from_a_template_has_its_schema(postgres: PostgresServer) -> None:
    postgres.create_database("app_template")
    postgres.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY); INSERT INTO jobs VALUES ('seed')",
                     database="app_template")
    dsn = postgres.create_database("case_1", template="app_template")
    assert dsn == f"host={postgres.socket_dir} port=5432 dbname=case_1 user=postgres"
    postgres.execute("INSERT INTO jobs VALUES ('case')", database="case_1")
    assert postgres.execute("SELECT id FROM jobs ORDER BY id", database="case_1") == "case\nseed\n"
    # The template is as it was: each clone starts from the same state.
    assert postgres.execute("SELECT count(*) FROM jobs", database="app_template") == "1\n"
    postgres.drop_database("case_1")
    assert "case_1" not in postgres.execute("SELECT datname FROM pg_database")


@needs_postgres
def test_postgresqls_refusals_and_bad_names_are_one_line(postgres: PostgresServer) -> None:
    postgres.create_database("taken")
    with pytest.raises(ServerError, match=r'PostgreSQL refused .* database "taken" already exists'):
        postgres.create_database("taken")
    for bad in ("has-dash", "1st", "x" * 64, 'quote"d'):
        with pytest.raises(HarnessUsageError, match="is not a database name this server makes"):
            postgres.create_database(bad)
    with pytest.raises(HarnessUsageError, match="template 'no;drop'"):
        postgres.create_database("fine", template="no;drop")


@needs_postgres
def test_a_url_and_a_dsn_reach_the_same_server(postgres: PostgresServer) -> None:
    psql = str(postgres.bin_dir / "psql")
    for target in (postgres.dsn(), postgres.url()):
        done = subprocess.run([psql, "-X", "-A", "-t", "-c", "SELECT 42", target],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.stdout == "42\n", done.stderr
