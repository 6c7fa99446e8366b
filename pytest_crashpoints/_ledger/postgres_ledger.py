"""The reference interruption ledger on PostgreSQL: the same rows, events and rules as the
SQLite ledger (:mod:`.sqlite`), for an agent whose state lives in PostgreSQL.

:class:`PostgresLedger` is :class:`~pytest_crashpoints.ledger.Ledger` with its tables in a
PostgreSQL database (psycopg 3): ``attempts`` and ``events`` in the connection's schema
(``public``, or the first of ``search_path``: put ``options=-csearch_path=ledger`` in the
connection string to keep them apart from your tables), and ``ledger_schema`` holding the
schema version. Every write is one transaction, as in SQLite, and its ``COMMIT`` is a crash
point (``db.commit``/``db.committed``) like any commit of the agent's. What differs, and why:

- a write transaction is PostgreSQL's ``READ COMMITTED`` one: every compare-and-set is the
  ``UPDATE``'s own ``WHERE`` (PostgreSQL re-checks it once a concurrent writer is done), the
  intent's insert is ``ON CONFLICT DO NOTHING``, and a claim locks the row it reads
  (``FOR UPDATE``), so two processes never both win a move or a lease;
- attempts made at the same clock time keep their insertion order by an identity column
  (``seq``: PostgreSQL has no ``rowid``);
- the event log is append-only by a trigger, as in SQLite;
- :meth:`PostgresLedger.backup` is PostgreSQL's own business (``pg_dump``): it raises.

A process's connection is opened when first used and never crosses a fork (a child opens its
own; psycopg leaves a parent's connection alone in a child).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import LedgerError, SchemaVersionError
from .sqlite import _STATE_CHECK, _TABLES, SCHEMA_VERSION, Ledger

__all__ = ["PostgresLedger"]

_SCHEMA: tuple[str, ...] = (
    f"""
CREATE TABLE attempts (
    attempt_id          TEXT PRIMARY KEY,
    seq                 BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
    task_id             TEXT NOT NULL,
    tool_name           TEXT NOT NULL,
    args_hash           TEXT NOT NULL,
    args_json           TEXT NOT NULL,
    idempotency_key     TEXT NOT NULL UNIQUE,
    state               TEXT NOT NULL CHECK (state IN ({_STATE_CHECK})),
    provider_request_id TEXT,
    result_ref          TEXT,
    tenant_id           TEXT NOT NULL,
    credential_scope    TEXT NOT NULL,
    policy_version      TEXT NOT NULL,
    owner               TEXT,
    lease_expires_at    DOUBLE PRECISION,
    next_attempt_at     DOUBLE PRECISION,
    dispatched_at       DOUBLE PRECISION,
    attempt_count       INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    parent_attempt_id   TEXT REFERENCES attempts (attempt_id),
    created_at          DOUBLE PRECISION NOT NULL,
    updated_at          DOUBLE PRECISION NOT NULL
)
""",
    "CREATE INDEX attempts_by_state ON attempts (state)",
    "CREATE INDEX attempts_by_task ON attempts (task_id)",
    """
CREATE TABLE events (
    event_id    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id  TEXT NOT NULL REFERENCES attempts (attempt_id),
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    actor       TEXT NOT NULL,
    reason      TEXT NOT NULL
)
""",
    "CREATE INDEX events_by_attempt ON events (attempt_id)",
    """
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'the event log is append-only'; END $$
""",
    """
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION events_append_only()
""",
    "CREATE TABLE ledger_schema (version INTEGER NOT NULL)",
    f"INSERT INTO ledger_schema VALUES ({SCHEMA_VERSION})",
)

#: The advisory lock two processes creating the schema at once serialize on.
_SCHEMA_LOCK = 0x63726173  # "cras"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError(
            "PostgresLedger keeps the ledger in PostgreSQL with psycopg 3, which is not "
            "installed: pip install 'pytest-crashpoints[postgres]'."
        ) from None
    return psycopg


class _Row(tuple[Any, ...]):
    """A row read by name (``row["state"]``) and by position (``row[0]``, unpacking), as
    SQLite's ``sqlite3.Row``: what the ledger's shared code reads."""

    names: dict[str, int]

    def __new__(cls, values: Sequence[Any], names: dict[str, int]) -> _Row:
        row = super().__new__(cls, values)
        row.names = names
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return super().__getitem__(self.names[key])
        return super().__getitem__(key)


def _rows(cursor: Any) -> Callable[[Sequence[Any]], _Row]:
    """psycopg's row factory for :class:`_Row`."""
    names = {column.name: i for i, column in enumerate(cursor.description or ())}
    return functools.partial(_Row, names=names)


@functools.lru_cache(maxsize=64)
def _dialect(sql: str) -> str:
    """The ledger's SQL (SQLite's ``?`` parameters) as psycopg takes it (``%s``)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Connection:
    """A psycopg connection that runs the ledger's SQL as ``sqlite3`` does (``?``
    parameters, rows read by name and position)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # Always with parameters (maybe none), so psycopg reads every ``%%`` as ``%``.
        return self.conn.execute(_dialect(sql), tuple(params))

    def close(self) -> None:
        self.conn.close()


class PostgresLedger(Ledger):
    """The reference ledger in the PostgreSQL database ``dsn`` names (a libpq connection
    string or a ``postgresql://`` URL; in a crash test, ``db.dsn(ctx)`` of a case database).

    The API is :class:`~pytest_crashpoints.ledger.Ledger`'s. Its tables are made on first use
    (an empty database, or one without them); a database whose ledger has another schema
    version raises :class:`SchemaVersionError`, and one that cannot be reached a
    :class:`LedgerError`; nothing is changed then. ``read_only`` opens it in read-only
    transactions and refuses a database without the ledger's tables.
    """

    #: The SQL that makes the ledger's tables (what :meth:`_ensure_schema` runs in an empty
    #: database): ``case_database(schema=PostgresLedger.SCHEMA)`` makes a template with them.
    SCHEMA = ";\n".join(statement.strip() for statement in _SCHEMA) + ";\n"

    _BEGIN = "BEGIN"
    _LOCK_ROW = " FOR UPDATE"
    _ROW_ORDER = "seq"

    def __init__(
        self,
        dsn: str,
        *,
        clock: Callable[[], float] = time.time,
        connect_timeout: float = 30.0,
        read_only: bool = False,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise LedgerError(
                f"dsn={dsn!r} is not a PostgreSQL connection string; pass one such as "
                "'host=/tmp/pg dbname=app user=postgres' or a postgresql:// URL."
            )
        super().__init__(dsn, clock=clock, read_only=read_only)
        self.dsn = dsn
        self.path = Path(self._database())
        self._connect_timeout = connect_timeout

    def _database(self) -> str:
        psycopg = _psycopg()
        try:
            return str(psycopg.conninfo.conninfo_to_dict(self.dsn).get("dbname") or "?")
        except psycopg.ProgrammingError as exc:
            raise LedgerError(
                f"dsn={self.dsn!r} is not a PostgreSQL connection string ({exc}); pass one "
                "such as 'host=/tmp/pg dbname=app user=postgres' or a postgresql:// URL."
            ) from None

    @property
    def where(self) -> str:
        return f"in PostgreSQL database {self.path.name!r}"

    def _connection(self) -> Any:
        pid = os.getpid()
        if self._conn is not None and self._pid == pid:
            return self._conn
        psycopg = _psycopg()
        try:
            conn = psycopg.connect(
                self.dsn, autocommit=True, row_factory=_rows,
                connect_timeout=max(1, round(self._connect_timeout)),
            )
        except psycopg.Error as exc:
            raise LedgerError(
                f"cannot open the ledger {self.where} ({str(exc).strip()}); check the dsn and "
                "that the database exists."
            ) from None
        wrapped = _Connection(conn)
        try:
            if self.read_only:
                conn.read_only = True
                if not self._has_ledger(wrapped):
                    raise LedgerError(
                        f"the database {self.path.name!r} holds no pytest-crashpoints ledger (it "
                        "has no attempts, events or ledger_schema table); check the dsn. "
                        "Nothing was changed."
                    )
            else:
                self._ensure_schema(wrapped)
        except psycopg.Error as exc:
            conn.close()
            raise LedgerError(
                f"cannot open the ledger {self.where}: PostgreSQL refused "
                f"({str(exc).strip().splitlines()[0]}). Nothing was changed."
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = wrapped, pid  # type: ignore[assignment]
        return wrapped

    @staticmethod
    def _has_ledger(conn: _Connection) -> bool:
        """Whether the connection's schema holds every table of the ledger."""
        found = {
            row[0] for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )
        }
        return {*_TABLES, "ledger_schema"} <= found

    def _ensure_schema(self, conn: Any) -> None:
        conn.execute("BEGIN")
        try:
            # Two processes opening a new ledger at once: one makes it, the other finds it.
            conn.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            if self._has_ledger(conn):
                (version,) = conn.execute("SELECT version FROM ledger_schema").fetchone()
                if version != SCHEMA_VERSION:
                    raise SchemaVersionError(
                        f"the ledger {self.where} has schema version {version}, but this "
                        f"version of pytest-crashpoints reads version {SCHEMA_VERSION}; "
                        "nothing was changed. Open it with the release that wrote it, or "
                        "use another database."
                    )
            else:
                clashing = [
                    row[0] for row in conn.execute(
                        "SELECT table_name FROM information_schema.tables WHERE "
                        "table_schema = current_schema() AND table_name IN "
                        "('attempts', 'events', 'ledger_schema')"
                    )
                ]
                if clashing:
                    raise LedgerError(
                        f"the database {self.path.name!r} has table(s) "
                        f"{', '.join(sorted(clashing))} that are not a pytest-crashpoints "
                        "ledger's; give the ledger a schema of its own "
                        "(options=-csearch_path=ledger in the dsn). Nothing was changed."
                    )
                for statement in _SCHEMA:
                    conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def backup(self, path: str | os.PathLike[str]) -> Path:
        """Not for PostgreSQL: back the database up with PostgreSQL's own tools."""
        raise LedgerError(
            f"backup() copies a SQLite ledger; back up the ledger {self.where} with pg_dump "
            "(or the server's backups). Nothing was written."
        )
