"""``db.commit`` and ``db.committed`` at the commits of psycopg2 (``pg_commits.py``).

psycopg2's connection and cursor are C types, which cannot take hooks; :func:`patch`
replaces ``psycopg2.connect`` (looked up at call time: Django's and SQLAlchemy's psycopg2
backends call it so) with one that makes its connections of a subclass of the class asked
for (``connection_factory=``, default ``psycopg2.extensions.connection``), and their cursors
of a subclass of theirs (``cursor_factory=``, the connection's ``cursor_factory``, or the
plain cursor: ``DictCursor`` and the like keep their meaning). A commit is:

- ``connection.commit()`` while a transaction is open, and leaving ``with conn:`` without
  an exception (which calls it);
- a statement string a cursor's ``execute`` or ``executemany`` runs that commits
  (``pg_statements.py``): one with ``COMMIT`` or ``END`` while a transaction is open or
  psycopg2 opens one for it; one that writes on a connection in autocommit mode.

Not seen: connections made before the hooks or through a ``connect`` imported before them
(``from psycopg2 import connect``), ``psycopg2._psycopg`` used directly, asynchronous
connections, ``copy_from``/``copy_expert``, two-phase commits, and a factory that is not a
subclass of psycopg2's (that connection or cursor is left as it is).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .commits import hooked_subclass
from .pg_commits import CommitFailed, after_commit, before_commit
from .pg_statements import commits_in_transaction, commits_outside, query_text

__all__ = ["patch"]

# psycopg2.extensions' transaction states (libpq's PGTransactionStatusType).
_IDLE, _IN_TRANSACTION = 0, 2
# psycopg2's connection.cursor() parameters, in their positional order.
_CURSOR_PARAMETERS = ("name", "cursor_factory", "withhold", "scrollable")


def _commits(cursor: Any, query: object) -> bool:
    """Whether ``cursor`` running ``query`` now commits."""
    conn = cursor.connection
    status = conn.get_transaction_status()
    if status == _IN_TRANSACTION or (status == _IDLE and not conn.autocommit):
        return commits_in_transaction(query_text(query, cursor))
    return status == _IDLE and commits_outside(query_text(query, cursor))


@functools.cache
def _classes(psycopg2: ModuleType) -> tuple[type, type]:
    """The hooked connection and cursor classes for this psycopg2 module."""
    extensions = psycopg2.extensions
    errors = {"full": psycopg2.errors.DiskFull, "ioerr": psycopg2.errors.IoError}

    class HookedCursor(extensions.cursor):  # type: ignore[misc, name-defined]
        def _run(self, run: Callable[[], Any], query: object) -> Any:
            if not _commits(self, query):
                return run()
            conn = self.connection
            in_transaction = conn.get_transaction_status() == _IN_TRANSACTION
            db = str(conn.info.dbname)
            try:
                n = before_commit(db)
            except CommitFailed as failed:
                if in_transaction:
                    conn.rollback()
                raise failed.error(errors) from None
            result = run()
            after_commit(db, n)
            return result

        def execute(self, query: Any, vars: Any = None) -> Any:
            return self._run(lambda: super(HookedCursor, self).execute(query, vars), query)

        def executemany(self, query: Any, vars_list: Any) -> Any:
            return self._run(
                lambda: super(HookedCursor, self).executemany(query, vars_list), query
            )

    class HookedConnection(extensions.connection):  # type: ignore[misc, name-defined]
        def commit(self) -> None:
            if self.get_transaction_status() != _IN_TRANSACTION:
                return super().commit()  # type: ignore[no-any-return]
            db = str(self.info.dbname)
            try:
                n = before_commit(db)
            except CommitFailed as failed:
                super().rollback()
                raise failed.error(errors) from None
            super().commit()
            after_commit(db, n)
            return None

        def cursor(self, *args: Any, **kwargs: Any) -> Any:
            named = dict(zip(_CURSOR_PARAMETERS, args, strict=False))
            if len(args) > len(_CURSOR_PARAMETERS) or named.keys() & kwargs.keys():
                return super().cursor(*args, **kwargs)  # psycopg2 raises its TypeError
            named.update(kwargs)
            factory = named.get("cursor_factory") or self.cursor_factory or extensions.cursor
            if isinstance(factory, type) and issubclass(factory, extensions.cursor):
                named["cursor_factory"] = _hooked(factory, HookedCursor) or factory
            return super().cursor(**named)

    return HookedConnection, HookedCursor


def _hooked(base: type, hooks: type) -> type | None:
    return hooked_subclass(base, hooks, replaced=("execute", "executemany", "commit", "cursor"))


def patch(psycopg2: ModuleType) -> None:
    """Hook psycopg2's commits in this process (see the module docstring)."""
    original = psycopg2.connect
    if getattr(original, "_crashpoints_hooked", False):
        return
    hooked_connection, _cursor = _classes(psycopg2)
    extensions = psycopg2.extensions

    @functools.wraps(original)
    def connect(
        dsn: Any = None, connection_factory: Any = None, cursor_factory: Any = None, **kwargs: Any
    ) -> Any:
        factory = connection_factory or extensions.connection
        if isinstance(factory, type) and issubclass(factory, extensions.connection):
            factory = _hooked(factory, hooked_connection) or factory
        return original(
            dsn, connection_factory=factory, cursor_factory=cursor_factory, **kwargs
        )

    connect._crashpoints_hooked = True  # type: ignore[attr-defined]
    psycopg2.connect = connect  # type: ignore[attr-defined]
