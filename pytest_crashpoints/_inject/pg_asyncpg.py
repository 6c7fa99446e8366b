"""``db.commit`` and ``db.committed`` at the commits of asyncpg (``pg_commits.py``).

:func:`patch` hooks ``asyncpg.Connection`` in this process (every connection, those of a pool
too). asyncpg runs every statement outside a transaction in autocommit mode, and a transaction
block commits with a ``COMMIT`` sent through ``Connection.execute`` (``async with
conn.transaction():`` left without an exception, ``await tr.commit()``; SQLAlchemy's asyncpg
dialect commits so). A commit is a statement string run by ``execute``, ``executemany``,
``fetch``, ``fetchrow``, ``fetchval`` or ``fetchmany`` that commits (``pg_statements.py``):
one with ``COMMIT`` or ``END`` inside a transaction; one that writes outside one (an
``INSERT ... RETURNING`` fetched too).

Not seen: prepared statements run from their own object (``await conn.prepare(...)``, which
SQLAlchemy's asyncpg dialect uses for its statements in ``AUTOCOMMIT`` isolation), the
``copy_*`` methods, and cursors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .pg_commits import CommitFailed, after_commit, before_commit
from .pg_statements import commits_in_transaction, commits_outside

__all__ = ["patch"]

_HOOKED = "_crashpoints_hooked"
#: The methods that run a statement string given as their first argument.
_METHODS = ("execute", "executemany", "fetch", "fetchrow", "fetchval", "fetchmany")


def _database(conn: Any) -> str:
    """The connection's database (asyncpg keeps what it connected with)."""
    return str(getattr(getattr(conn, "_params", None), "database", "") or "")


def _hook(errors: dict[str, type[BaseException]], execute: Callable[..., Any],
          original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def hooked(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else ""
        in_transaction = self.is_in_transaction()
        commits = commits_in_transaction(text) if in_transaction else commits_outside(text)
        if not commits:
            return await original(self, query, *args, **kwargs)
        db = _database(self)
        try:
            n = before_commit(db)
        except CommitFailed as failed:
            if in_transaction:
                await execute(self, "ROLLBACK")
            raise failed.error(errors) from None
        result = await original(self, query, *args, **kwargs)
        after_commit(db, n)
        return result

    setattr(hooked, _HOOKED, True)
    return hooked


def patch(asyncpg: ModuleType) -> None:
    """Hook asyncpg's commits in this process (see the module docstring)."""
    connection = asyncpg.connection.Connection
    exceptions = asyncpg.exceptions
    errors = {"full": exceptions.DiskFullError, "ioerr": exceptions.PostgresIOError}
    execute = vars(connection)["execute"]
    if getattr(execute, _HOOKED, False):
        return
    for name in _METHODS:
        setattr(connection, name, _hook(errors, execute, vars(connection)[name]))
