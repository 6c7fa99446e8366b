"""db.commit and db.committed around every durable SQLite commit, in real worker processes."""

from __future__ import annotations

import sqlite3
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from pytest_crashpoints._inject.failpoints import COMMIT_POINTS, Fault, Hit, Kill
from pytest_crashpoints._process.outcome import Completed, Killed, Outcome
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.harness import install_commit_hooks

Style = Callable[[str], object]


def make_database(path: Path) -> str:
    """The database the styles write to, made here (not in the worker: that would commit)."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    db.close()
    return str(path)


def rows(path: str | Path) -> list[int]:
    db = sqlite3.connect(path)
    try:
        return [x for (x,) in db.execute("SELECT x FROM t ORDER BY x")]
    finally:
        db.close()


def run_hooked(
    style: Style, path: str, *, faults: Sequence[Fault] = (), **hooks: object
) -> Outcome:
    def worker() -> object:
        install_commit_hooks(**hooks)  # type: ignore[arg-type]
        return style(path)

    return run_worker(worker, faults=faults)


def commits(hits: Sequence[Hit]) -> list[tuple[str, object, object]]:
    return [(h.point, h.context["n"], h.context["db"]) for h in hits if h.point in COMMIT_POINTS]


def pairs(*numbers: int, db: str = "app.sqlite3") -> list[tuple[str, object, object]]:
    return [(point, n, db) for n in numbers for point in COMMIT_POINTS]


# -- every way Python code commits -------------------------------------------------------------


def commit_method(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("INSERT INTO t VALUES (1)")  # the default mode opens a transaction
    db.commit()
    db.commit()  # no transaction open: nothing to commit


def with_block(path: str) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("INSERT INTO t VALUES (1)")
    with db:
        db.execute("SELECT * FROM t").fetchall()  # nothing written: no commit


def commit_statements(path: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for n, statement in enumerate(["COMMIT", "commit transaction", "  End", "END TRANSACTION;"]):
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?)", (n,))
        db.execute(statement)


def cursor_statements(path: str) -> None:
    db = sqlite3.connect(path)
    cursor = db.cursor()
    cursor.execute("INSERT INTO t VALUES (1)")
    cursor.execute("COMMIT")


def autocommit_writes(path: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for statement in [
        "INSERT INTO t VALUES (1)",
        "UPDATE t SET x = 2",
        "REPLACE INTO t VALUES (3)",
        "DELETE FROM t WHERE x = 3",
        "CREATE TABLE u (y)",
        "ALTER TABLE u ADD COLUMN z",
        "DROP TABLE u",
        "WITH v AS (SELECT 4) INSERT INTO t SELECT * FROM v",
    ]:
        db.execute(statement)
    db.execute("SELECT * FROM t").fetchall()  # reads commit nothing


def default_mode_ddl(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE u (y)")  # no transaction is opened for it: SQLite commits it
    db.execute("INSERT INTO u VALUES (1)")  # a transaction is opened...
    db.rollback()  # ... and rolled back: no commit


def autocommit_executemany(path: str) -> int:
    db = sqlite3.connect(path, isolation_level=None)
    cursor = db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    db.executemany("INSERT INTO t VALUES (?)", [])
    return cursor.rowcount


def transaction_executemany(path: str) -> None:
    db = sqlite3.connect(path)
    db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])  # in one transaction
    db.commit()


def executescripts(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("INSERT INTO t VALUES (1)")
    db.executescript("SELECT 1;")  # commits the open transaction first
    db.executescript(
        "INSERT INTO t VALUES (2); -- a comment; with a semicolon\nUPDATE t SET x = 3;"
    )
    db.executescript("BEGIN; INSERT INTO t VALUES (4); INSERT INTO t VALUES (5); COMMIT;")
    db.executescript("CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET x = x WHERE 0; END;")


def isolation_level_none(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("INSERT INTO t VALUES (1)")
    db.isolation_level = None  # commits the open transaction


def no_commit(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("SELECT * FROM t").fetchall()
    db.commit()
    db.execute("INSERT INTO t VALUES (1)")
    db.rollback()
    db.execute("BEGIN")
    db.execute("INSERT INTO t VALUES (1)")
    db.execute("ROLLBACK")
    db.close()


@pytest.mark.parametrize(
    ("style", "expected", "value", "left"),
    [
        (commit_method, pairs(1), None, [1]),
        (with_block, pairs(1), None, [1]),
        (commit_statements, pairs(1, 2, 3, 4), None, [0, 1, 2, 3]),
        (cursor_statements, pairs(1), None, [1]),
        (autocommit_writes, pairs(1, 2, 3, 4, 5, 6, 7, 8), None, [2, 4]),
        (default_mode_ddl, pairs(1), None, []),
        (autocommit_executemany, pairs(1, 2, 3), 3, [1, 2, 3]),
        (transaction_executemany, pairs(1), None, [1, 2]),
        (executescripts, pairs(1, 2, 3, 4, 5), None, [3, 3, 4, 5]),
        (isolation_level_none, pairs(1), None, [1]),
        (no_commit, [], None, []),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_each_commit_fires_both_points_with_the_process_commit_number(
    tmp_path: Path,
    style: Style,
    expected: list[tuple[str, int, str]],
    value: object,
    left: list[int],
) -> None:
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(style, path)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == expected
    assert outcome.value == value
    assert rows(path) == left


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sqlite3's autocommit is Python 3.12+")
def test_python_312_autocommit_attribute(tmp_path: Path) -> None:
    def style(path: str) -> None:
        on = sqlite3.connect(path, autocommit=True)  # type: ignore[call-overload,unused-ignore]
        on.execute("INSERT INTO t VALUES (1)")  # 1: committed by itself
        on.commit()  # does nothing with autocommit=True
        off = sqlite3.connect(path, autocommit=False)  # type: ignore[call-overload,unused-ignore]
        off.execute("INSERT INTO t VALUES (2)")
        off.commit()  # 2
        off.execute("INSERT INTO t VALUES (3)")
        off.autocommit = True  # 3: commits the transaction

    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(style, path)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == pairs(1, 2, 3)
    assert rows(path) == [1, 2, 3]


def failing_commit(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("PRAGMA foreign_keys = ON")
    db.execute("CREATE TABLE child (p REFERENCES t (x) DEFERRABLE INITIALLY DEFERRED)")  # commit 1
    db.execute("INSERT INTO child VALUES (42)")  # no such parent: COMMIT will fail
    db.commit()  # commit 2, which raises


def test_a_commit_that_fails_gets_no_committed_point(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x PRIMARY KEY)")
    db.close()
    outcome = run_hooked(failing_commit, str(path))
    assert outcome.kind == "raised" and "FOREIGN KEY" in outcome.message, outcome
    assert commits(outcome.hits) == [*pairs(1), ("db.commit", 2, "app.sqlite3")]


# -- what a kill leaves ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("style", "first_commit"),
    [(commit_method, [1]), (autocommit_executemany, [1]), (commit_statements, [0])],
    ids=["commit()", "executemany", "COMMIT"],
)
@pytest.mark.parametrize(("point", "kept"), [("db.commit", False), ("db.committed", True)])
def test_a_kill_before_the_commit_leaves_nothing_and_after_it_the_row(
    tmp_path: Path, style: Style, first_commit: list[int], point: str, kept: bool
) -> None:
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(style, path, faults=[Fault(point, Kill())])
    assert isinstance(outcome, Killed), outcome
    context = {"db": "app.sqlite3", "n": 1}
    if point == "db.committed":  # what a power loss would take: the mode and sync level
        context["sync"] = "delete/2"
    assert (outcome.point, outcome.context) == (point, context)
    assert rows(path) == (first_commit if kept else [])  # SQLite rolled the transaction back


# -- what fires nothing ------------------------------------------------------------------------


def everywhere(path: str) -> None:
    base = Path(path).parent
    databases: list[str | Path] = [
        ":memory:",
        "",
        base / "harness" / "journal.sqlite3",
        base / "authority.sqlite3",
        f"file:{base / 'shared'}?mode=memory&cache=shared",
        path,
    ]
    for database in databases:
        db = sqlite3.connect(database, uri=str(database).startswith("file:"))
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS w (x)")
            db.execute("INSERT INTO w VALUES (1)")


def test_in_memory_and_excluded_databases_fire_nothing(tmp_path: Path) -> None:
    (tmp_path / "harness").mkdir()
    path = str(tmp_path / "app.sqlite3")
    outcome = run_hooked(
        everywhere, path, exclude=[tmp_path / "harness", str(tmp_path / "authority.sqlite3")]
    )
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == pairs(1, 2)  # the CREATE, then the INSERT: app.sqlite3 only


def two_databases(path: str) -> None:
    other = str(Path(path).with_name("other.sqlite3"))
    for database in (path, other, path):
        with sqlite3.connect(database) as db:
            db.execute("CREATE TABLE IF NOT EXISTS w (x)")


def test_commits_are_numbered_across_the_process(tmp_path: Path) -> None:
    outcome = run_hooked(two_databases, str(tmp_path / "app.sqlite3"))
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == [
        *pairs(1),
        *pairs(2, db="other.sqlite3"),
        *pairs(3),
    ]


def test_without_the_hooks_nothing_fires(tmp_path: Path) -> None:
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_worker(commit_method, args=(path,), faults=[Fault("db.commit", Kill())])
    assert isinstance(outcome, Completed), outcome
    assert outcome.hits == ()
    assert rows(path) == [1]
    assert sqlite3.connect.__module__ == "_sqlite3"  # nothing patched in this process


# -- a connection or cursor class of the user's ------------------------------------------------


class Audited(sqlite3.Connection):
    def audit(self) -> str:
        return "audited"


class Counting(sqlite3.Cursor):
    def count(self) -> int:
        return int(self.execute("SELECT count(*) FROM t").fetchone()[0])


class Logged(sqlite3.Connection):
    """Defines execute itself: the hooks go beneath it, and it keeps its meaning."""

    statements: ClassVar[list[str]] = []

    def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:
        self.statements.append(sql)
        return super().execute(sql, parameters)  # type: ignore[arg-type]


def user_factories(path: str) -> tuple[str, int, list[str]]:
    db = sqlite3.connect(path, factory=Audited)
    cursor = db.cursor(Counting)
    cursor.execute("INSERT INTO t VALUES (1)")
    cursor.execute("COMMIT")  # commit 1, through the user's cursor class
    assert isinstance(db, Audited) and isinstance(cursor, Counting)

    def plain(*args: object, **kwargs: object) -> sqlite3.Connection:
        return sqlite3.Connection(*args, **kwargs)  # type: ignore[arg-type]

    # A factory function (here in its positional place): that connection is left alone.
    # Python 3.13 deprecates that place: the warning points at this line, as without hooks.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        unhooked = sqlite3.connect(path, 5.0, 0, "DEFERRED", True, plain)  # type: ignore[call-overload]
    deprecated = [(DeprecationWarning, __file__)] if sys.version_info >= (3, 13) else []
    assert [(w.category, w.filename) for w in said] == deprecated, [str(w) for w in said]
    unhooked.execute("INSERT INTO t VALUES (2)")
    unhooked.commit()
    logged = sqlite3.connect(path, factory=Logged)
    logged.execute("INSERT INTO t VALUES (3)")
    logged.commit()  # commit 2: the hooks are beneath its own execute
    with db:
        db.execute("INSERT INTO t VALUES (4)")  # commit 3
    assert isinstance(logged, Logged)
    return db.audit(), cursor.count(), logged.statements


def test_a_users_connection_and_cursor_classes_keep_working_with_the_hooks(
    tmp_path: Path,
) -> None:
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(user_factories, path)
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == ("audited", 4, ["INSERT INTO t VALUES (3)"])
    assert commits(outcome.hits) == pairs(1, 2, 3)


# -- SQLAlchemy --------------------------------------------------------------------------------


def with_sqlalchemy(path: str) -> None:
    import sqlalchemy  # type: ignore[import-not-found,unused-ignore]

    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("INSERT INTO t VALUES (1)"))
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("INSERT INTO t VALUES (2)"))
        conn.commit()
    engine.dispose()


def test_sqlalchemy_commits_fire_the_points(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy", reason="SQLAlchemy is not installed (it is not a dependency)")
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(with_sqlalchemy, path)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == pairs(1, 2)
    assert rows(path) == [1, 2]


# -- Django ------------------------------------------------------------------------------------


def with_django(path: str) -> None:
    import django
    from django.conf import settings

    # In the worker, never in the test process: a forked worker inherits what it set up.
    settings.configure(DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                                              "NAME": path}})
    django.setup()
    from django.db import connection, transaction

    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (%s)", [1])  # autocommit: SQLite commits it
        with transaction.atomic():
            cursor.execute("INSERT INTO t VALUES (%s)", [2])
        cursor.executemany("INSERT INTO t VALUES (%s)", [[3], [4]])  # a commit per row
    connection.close()


def test_djangos_commits_fire_the_points(tmp_path: Path) -> None:
    # Django's SQLite cursor defines execute and executemany (its %s placeholders become ?):
    # the hooks go beneath them, so its autocommitted statements fire the points too.
    pytest.importorskip("django", reason="Django is not installed (it is not a dependency)")
    path = make_database(tmp_path / "app.sqlite3")
    outcome = run_hooked(with_django, path)
    assert isinstance(outcome, Completed), outcome
    assert commits(outcome.hits) == pairs(1, 2, 3, 4)
    assert rows(path) == [1, 2, 3, 4]


def _catch_a_failed_commit(path: str) -> object:
    """Insert 1 and commit (the fault makes it fail); then insert 2 and commit: only 2 is
    kept, because the failed commit left nothing of its transaction open."""
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute("INSERT INTO t VALUES (1)")
    except sqlite3.OperationalError as exc:
        said = str(exc)
    in_transaction = db.in_transaction
    with db:
        db.execute("INSERT INTO t VALUES (2)")
    db.close()
    return [said, in_transaction]


def test_a_commit_the_fault_fails_raises_sqlites_error_and_keeps_nothing(
    tmp_path: Path,
) -> None:
    from pytest_crashpoints._inject.failpoints import Raise

    path = make_database(tmp_path / "app.sqlite3")
    error = sqlite3.OperationalError("database or disk is full")
    outcome = run_hooked(
        _catch_a_failed_commit, path, faults=[Fault("db.commit", Raise(error), hit=1)]
    )
    assert outcome.kind == "completed", outcome
    assert outcome.value == ["database or disk is full", False]
    assert rows(path) == [2]
