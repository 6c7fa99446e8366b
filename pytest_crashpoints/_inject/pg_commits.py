"""Fail points at PostgreSQL commits: what every driver's hooks fire, and a failed commit.

The driver hooks (``pg_psycopg.py``, ``pg_psycopg2.py``, ``pg_asyncpg.py``) call
:func:`before_commit` just before a statement that commits leaves for the server, and
:func:`after_commit` once the server answered it, the same points as SQLite's commits
(``commits.py``), counted with them:

- ``crashpoint("db.commit", db=<database name>, n=k)``: a kill here leaves the transaction
  open on the server; the server rolls it back when it sees the connection close.
- ``crashpoint("db.committed", db=<database name>, n=k, sync="postgresql")``: the server
  committed. ``sync`` says a power loss of the worker's machine takes nothing from it (a
  commit the server answered is the server's, ``_harness/storage/powerloss.py``). Before it
  fires, the process is marked as having committed since its last write request to a
  provider (the wire hooks' automatic A, ``wire.py``).

A fault raised at ``db.commit`` fails the commit: the hooks roll the transaction back on the
server and raise the driver's own exception for it. The harness's failed commits raise
SQLite's error there (``disk I/O error``, ``database or disk is full``); for PostgreSQL that
becomes the driver's class for the SQLSTATE PostgreSQL reports for the same failure
(:data:`FAILURES`: ``58030`` an I/O error, ``53100`` a full disk), with PostgreSQL's wording.
Any other exception raised there is raised as it is, after the rollback.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from .commits import next_commit_number
from .failpoints import COMMIT_POINTS, crashpoint, since_last_request

__all__ = ["FAILURES", "POSTGRES_SYNC", "CommitFailed", "after_commit", "before_commit"]

_BEFORE, _AFTER = COMMIT_POINTS
#: The ``sync`` of a PostgreSQL commit's ``db.committed``: committed by the server.
POSTGRES_SYNC = "postgresql"
#: Each failure of a commit: the SQLSTATE PostgreSQL reports, and what its message says.
FAILURES: Mapping[str, tuple[str, str]] = {
    "ioerr": ("58030", 'could not write to file "pg_wal/xlogtemp.42": Input/output error'),
    "full": ("53100", 'could not extend file "base/16384/16385": No space left on device'),
}


class CommitFailed(Exception):
    """A fault raised at ``db.commit`` (``exception``); the hook rolls back, then raises
    :meth:`error` (never seen outside the hooks)."""

    def __init__(self, exception: BaseException) -> None:
        super().__init__(str(exception))
        self.exception = exception

    @property
    def kind(self) -> str | None:
        """``"full"`` or ``"ioerr"`` for the harness's failed commits; ``None`` otherwise."""
        if not isinstance(self.exception, sqlite3.OperationalError):
            return None
        return "full" if "full" in str(self.exception) else "ioerr"

    def error(self, classes: Mapping[str, type[BaseException]]) -> BaseException:
        """The exception the driver raises for this failure: ``classes[kind]`` (the driver's
        classes for :data:`FAILURES`) with PostgreSQL's message, or the fault's own."""
        kind = self.kind
        if kind is None:
            return self.exception
        return classes[kind](FAILURES[kind][1])


def before_commit(db: str) -> int:
    """Fire ``db.commit`` for a commit to the database ``db``; its number. Raises
    :class:`CommitFailed` for a fault raised there."""
    n = next_commit_number()
    try:
        crashpoint(_BEFORE, db=db, n=n)
    except Exception as exc:
        raise CommitFailed(exc) from exc
    return n


def after_commit(db: str, n: int) -> None:
    """Fire ``db.committed`` for commit ``n`` to the database ``db``, which the server
    answered."""
    since_last_request.committed = True
    crashpoint(_AFTER, db=db, n=n, sync=POSTGRES_SYNC)
