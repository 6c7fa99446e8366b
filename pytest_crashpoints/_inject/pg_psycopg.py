"""``db.commit`` and ``db.committed`` at the commits of psycopg 3 (``pg_commits.py``).

:func:`patch` hooks psycopg's classes in this process (every connection, sync and async,
made before or after, and every subclass: Django's and SQLAlchemy's cursors too). A commit is:

- a ``COMMIT`` psycopg sends itself: ``Connection.commit()`` (and ``AsyncConnection``'s),
  leaving ``with conn:`` without an exception, and leaving the outermost ``with
  conn.transaction():`` block (``async with`` too) without one, all of which run through the
  connection's internal command path (``_exec_command``, psycopg 3.0 to 3.3), seen there
  while a transaction is open;
- a statement string run by a cursor's ``execute`` or ``executemany`` (``Connection.execute``
  uses one) that commits (``pg_statements.py``): one with ``COMMIT`` or ``END`` while a
  transaction is open or psycopg opens one for it; one that writes on a connection in
  autocommit mode outside any transaction.

Not seen: commits queued in pipeline mode, two-phase commits (``tpc_commit``), ``COPY``
through ``cursor.copy()``, and server-side cursors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from types import ModuleType
from typing import Any

from .pg_commits import CommitFailed, after_commit, before_commit
from .pg_statements import commits_in_transaction, commits_outside, query_text

__all__ = ["patch"]

_HOOKED = "_crashpoints_hooked"


class _Driver:
    """What the hooks need of the psycopg module: its transaction states and errors."""

    def __init__(self, psycopg: ModuleType) -> None:
        status = psycopg.pq.TransactionStatus
        self.idle, self.in_transaction = status.IDLE, status.INTRANS
        self.errors = {"full": psycopg.errors.DiskFull, "ioerr": psycopg.errors.IoError}

    def commits(self, conn: Any, query: object) -> bool:
        """Whether a cursor of ``conn`` running ``query`` now commits."""
        if getattr(conn, "_pipeline", None):
            return False
        status = conn.pgconn.transaction_status
        if status == self.in_transaction or (status == self.idle and not conn.autocommit):
            return commits_in_transaction(query_text(query, conn))
        return status == self.idle and commits_outside(query_text(query, conn))

    def fire_before(self, conn: Any) -> tuple[str, int]:
        db = str(conn.info.dbname)
        return db, before_commit(db)


def _hook_statement(driver: _Driver, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def hooked(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        conn = self.connection
        if not driver.commits(conn, query):
            return original(self, query, *args, **kwargs)
        in_transaction = conn.pgconn.transaction_status == driver.in_transaction
        try:
            db, n = driver.fire_before(conn)
        except CommitFailed as failed:
            if in_transaction:
                original(self, "ROLLBACK")
            raise failed.error(driver.errors) from None
        result = original(self, query, *args, **kwargs)
        after_commit(db, n)
        return result

    setattr(hooked, _HOOKED, True)
    return hooked


def _hook_async_statement(driver: _Driver, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def hooked(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        conn = self.connection
        if not driver.commits(conn, query):
            return await original(self, query, *args, **kwargs)
        in_transaction = conn.pgconn.transaction_status == driver.in_transaction
        try:
            db, n = driver.fire_before(conn)
        except CommitFailed as failed:
            if in_transaction:
                await original(self, "ROLLBACK")
            raise failed.error(driver.errors) from None
        result = await original(self, query, *args, **kwargs)
        after_commit(db, n)
        return result

    setattr(hooked, _HOOKED, True)
    return hooked


def _hook_command(driver: _Driver, original: Callable[..., Any]) -> Callable[..., Any]:
    """The connection's own command path: a generator both the sync and the async
    connection drive, so one hook serves both."""

    @functools.wraps(original)
    def hooked(self: Any, command: Any, *args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        if (
            getattr(self, "_pipeline", None)
            or self.pgconn.transaction_status != driver.in_transaction
            or not commits_in_transaction(query_text(command, self))
        ):
            return (yield from original(self, command, *args, **kwargs))
        try:
            db, n = driver.fire_before(self)
        except CommitFailed as failed:
            yield from original(self, b"ROLLBACK")
            raise failed.error(driver.errors) from None
        result = yield from original(self, command, *args, **kwargs)
        after_commit(db, n)
        return result

    setattr(hooked, _HOOKED, True)
    return hooked


_Hook = Callable[[Callable[..., Any]], Callable[..., Any]]


def _replace(cls: type, name: str, hook: _Hook) -> None:
    original = vars(cls)[name]
    if not getattr(original, _HOOKED, False):
        setattr(cls, name, hook(original))


def patch(psycopg: ModuleType) -> None:
    """Hook psycopg 3's commits in this process (see the module docstring). Raises
    ``LookupError`` for a psycopg whose connections have no internal command path."""
    driver = _Driver(psycopg)
    owner = next(
        (k for k in psycopg.Connection.__mro__ if "_exec_command" in vars(k)), None
    )
    if owner is None:
        raise LookupError(f"psycopg {psycopg.__version__} has no Connection._exec_command")
    _replace(owner, "_exec_command", functools.partial(_hook_command, driver))
    for name in ("execute", "executemany"):
        _replace(psycopg.Cursor, name, functools.partial(_hook_statement, driver))
        _replace(psycopg.AsyncCursor, name, functools.partial(_hook_async_statement, driver))
