"""db.commit and db.committed around every PostgreSQL commit of psycopg 3 (sync and async),
psycopg2 and asyncpg, in real worker processes against a real PostgreSQL server: each commit
fires both points with the process's commit number, a kill before the commit leaves nothing
committed and one after it the row, and a failed commit raises the driver's own error after
rolling back."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from pytest_crashpoints._inject.failpoints import COMMIT_POINTS, Fault, Hit, Kill, Raise
from pytest_crashpoints._inject.pg_hooks import install_postgres_hooks
from pytest_crashpoints._process.outcome import Completed, Killed, Outcome
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin, postgres_server

pytestmark = pytest.mark.skipif(
    find_postgres_bin() is None,
    reason="PostgreSQL is not installed (apt-get install postgresql): no server to commit to",
)

Style = Callable[[str], object]
_names = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        running.execute("CREATE DATABASE template_t")
        running.execute("CREATE TABLE t (x integer)", database="template_t")
        yield running


@pytest.fixture
def database(server: PostgresServer) -> Iterator[tuple[str, str]]:
    """A fresh database with the empty table ``t``: its name and DSN."""
    name = f"case_{next(_names)}"
    dsn = server.create_database(name, template="template_t")
    yield name, dsn
    server.drop_database(name)


def rows(server: PostgresServer, name: str) -> list[int]:
    said = server.execute("SELECT x FROM t ORDER BY x", database=name)
    return [int(line) for line in said.split()]


def run_hooked(style: Style, dsn: str, *, faults: Sequence[Fault] = ()) -> Outcome:
    def worker() -> object:
        install_postgres_hooks()
        return style(dsn)

    return run_worker(worker, faults=faults)


def commits(hits: Sequence[Hit]) -> list[tuple[str, object, object]]:
    return [(h.point, h.context["n"], h.context["db"]) for h in hits if h.point in COMMIT_POINTS]


def pairs(*numbers: int, db: str) -> list[tuple[str, object, object]]:
    return [(point, n, db) for n in numbers for point in COMMIT_POINTS]


def asyncpg_dsn(dsn: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a libpq ``key=value`` DSN (it reads only URLs)."""
    fields = dict(part.split("=", 1) for part in dsn.split())
    return {"host": fields["host"], "port": int(fields["port"]),
            "database": fields["dbname"], "user": fields["user"]}


# -- every driver's ways to commit ------------------------------------------------------------


def psycopg_sync(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:  # leaving the block commits: 3
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()  # 1
        conn.commit()  # nothing open: nothing to commit
        with conn.transaction():  # the outermost block commits: 2
            conn.execute("INSERT INTO t VALUES (2)")
        conn.execute("SELECT * FROM t").fetchall()  # opens a transaction, writes nothing
        conn.execute("INSERT INTO t VALUES (3)")
    with psycopg.connect(dsn, autocommit=True) as auto:
        auto.execute("INSERT INTO t VALUES (4)")  # 4: commits by itself
        auto.execute("SELECT count(*) FROM t").fetchone()  # reads commit nothing
        auto.execute("BEGIN")
        auto.execute("INSERT INTO t VALUES (5)")
        auto.execute("COMMIT")  # 5


def psycopg_async(dsn: str) -> None:
    import psycopg

    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn)
        await conn.execute("INSERT INTO t VALUES (1)")
        await conn.commit()  # 1
        async with conn.transaction():  # 2
            await conn.execute("INSERT INTO t VALUES (2)")
        cursor = conn.cursor()
        await cursor.executemany("INSERT INTO t VALUES (%s)", [(3,), (4,)])
        await conn.rollback()  # rolled back: no commit
        await conn.close()
        auto = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await auto.execute("INSERT INTO t VALUES (5)")  # 3
        await auto.close()

    asyncio.run(main())


def psycopg2_style(dsn: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    cursor = conn.cursor()
    cursor.execute("INSERT INTO t VALUES (1)")
    conn.commit()  # 1
    conn.commit()  # nothing open
    with conn, conn.cursor() as inner:  # 2
        inner.execute("INSERT INTO t VALUES (2)")
    cursor.execute("SELECT * FROM t")
    conn.rollback()
    conn.autocommit = True
    cursor.execute("INSERT INTO t VALUES (3)")  # 3
    cursor.executemany("INSERT INTO t VALUES (%s)", [(4,), (5,)])  # 4: one point for all
    conn.close()


def asyncpg_style(dsn: str) -> None:
    import asyncpg

    async def main() -> None:
        conn = await asyncpg.connect(**asyncpg_dsn(dsn))
        async with conn.transaction():  # 1
            await conn.execute("INSERT INTO t VALUES (1)")
        await conn.execute("INSERT INTO t VALUES (2)")  # 2: commits by itself
        assert await conn.fetchval("INSERT INTO t VALUES (3) RETURNING x") == 3  # 3
        await conn.fetch("SELECT * FROM t")  # reads commit nothing
        tr = conn.transaction()
        await tr.start()
        await conn.execute("INSERT INTO t VALUES (4)")
        await tr.rollback()  # rolled back: no commit
        await conn.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("style", "numbers", "left"),
    [
        (psycopg_sync, (1, 2, 3, 4, 5), [1, 2, 3, 4, 5]),
        (psycopg_async, (1, 2, 3), [1, 2, 5]),
        (psycopg2_style, (1, 2, 3, 4), [1, 2, 3, 4, 5]),
        (asyncpg_style, (1, 2, 3), [1, 2, 3]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_each_commit_fires_both_points_with_the_process_commit_number(
    server: PostgresServer,
    database: tuple[str, str],
    style: Style,
    numbers: tuple[int, ...],
    left: list[int],
) -> None:
    name, dsn = database
    outcome = run_hooked(style, dsn)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == pairs(*numbers, db=name)
    assert all(
        h.context.get("sync") == "postgresql" for h in outcome.hits if h.point == "db.committed"
    )
    assert rows(server, name) == left


def test_without_the_hooks_nothing_fires(
    server: PostgresServer, database: tuple[str, str]
) -> None:
    _name, dsn = database
    outcome = run_worker(psycopg_sync, args=(dsn,), faults=[Fault("db.commit", Kill())])
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == []


# -- what a kill leaves -----------------------------------------------------------------------


def first_commit_psycopg(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()


def first_commit_psycopg_async(dsn: str) -> None:
    import psycopg

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            await conn.execute("INSERT INTO t VALUES (1)")

    asyncio.run(main())


def first_commit_psycopg2(dsn: str) -> None:
    import psycopg2

    conn = psycopg2.connect(dsn)
    with conn, conn.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (1)")


def first_commit_asyncpg(dsn: str) -> None:
    import asyncpg

    async def main() -> None:
        conn = await asyncpg.connect(**asyncpg_dsn(dsn))
        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (1)")

    asyncio.run(main())


KILLED_STYLES = [
    first_commit_psycopg, first_commit_psycopg_async, first_commit_psycopg2, first_commit_asyncpg
]


@pytest.mark.parametrize("style", KILLED_STYLES, ids=lambda v: v.__name__)
@pytest.mark.parametrize(("point", "kept"), [("db.commit", []), ("db.committed", [1])])
def test_a_kill_before_the_commit_leaves_nothing_and_after_it_the_row(
    server: PostgresServer, database: tuple[str, str], style: Style, point: str, kept: list[int]
) -> None:
    name, dsn = database
    outcome = run_hooked(style, dsn, faults=[Fault(point, Kill())])
    assert isinstance(outcome, Killed), outcome
    context: dict[str, object] = {"db": name, "n": 1}
    if point == "db.committed":
        context["sync"] = "postgresql"
    assert (outcome.point, dict(outcome.context)) == (point, context)
    # The server saw the connection close with the transaction open, and rolled it back.
    # A fresh psql session sees only what was committed (no wait: a commit is durable, an
    # open transaction is invisible to others whether or not its backend is gone yet).
    assert rows(server, name) == kept


# -- a failed commit --------------------------------------------------------------------------


def failed_psycopg(dsn: str) -> list[object]:
    import psycopg

    conn = psycopg.connect(dsn)
    conn.execute("INSERT INTO t VALUES (1)")
    try:
        conn.commit()
    except psycopg.errors.DiskFull as exc:
        said: object = [type(exc).__name__, exc.sqlstate, str(exc)]
    status = conn.info.transaction_status.name
    conn.execute("INSERT INTO t VALUES (2)")
    conn.commit()  # the connection goes on: the next commit is not failed
    conn.close()
    return [said, status]


def failed_psycopg2(dsn: str) -> list[object]:
    import psycopg2
    import psycopg2.errors

    conn = psycopg2.connect(dsn)
    cursor = conn.cursor()
    cursor.execute("INSERT INTO t VALUES (1)")
    try:
        conn.commit()
    except psycopg2.errors.DiskFull as exc:
        said: object = [type(exc).__name__, str(exc)]
    status = conn.get_transaction_status()
    cursor.execute("INSERT INTO t VALUES (2)")
    conn.commit()
    conn.close()
    return [said, status]


def failed_asyncpg(dsn: str) -> list[object]:
    import asyncpg

    async def main() -> list[object]:
        conn = await asyncpg.connect(**asyncpg_dsn(dsn))
        try:
            async with conn.transaction():
                await conn.execute("INSERT INTO t VALUES (1)")
        except asyncpg.exceptions.DiskFullError as exc:
            said: object = [type(exc).__name__, str(exc)]
        status = conn.is_in_transaction()
        async with conn.transaction():
            await conn.execute("INSERT INTO t VALUES (2)")
        await conn.close()
        return [said, status]

    return asyncio.run(main())


FULL = 'could not extend file "base/16384/16385": No space left on device'


@pytest.mark.parametrize(
    ("style", "value"),
    [
        (failed_psycopg, [["DiskFull", "53100", FULL], "IDLE"]),
        (failed_psycopg2, [["DiskFull", FULL], 0]),
        (failed_asyncpg, [["DiskFullError", FULL], False]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_a_commit_the_fault_fails_raises_the_drivers_error_and_keeps_nothing(
    server: PostgresServer, database: tuple[str, str], style: Style, value: list[object]
) -> None:
    name, dsn = database
    error = sqlite3.OperationalError("database or disk is full")
    outcome = run_hooked(style, dsn, faults=[Fault("db.commit", Raise(error), hit=1)])
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == value
    assert commits(outcome.hits) == [("db.commit", 1, name), *pairs(2, db=name)]
    assert rows(server, name) == [2]  # the failed transaction was rolled back on the server
