"""A ledger view over a PostgreSQL table or query: an agent that keeps its jobs in PostgreSQL.

:class:`PostgresLedgerView` reads the rows of a table (``table=``, optionally
schema-qualified: ``"app.jobs"``) or of a query (``query=``) in the database a libpq
connection string or ``postgresql://`` URL names, with the same ``columns=``, ``states=`` and
other arguments as :class:`~pytest_crashpoints.SQLiteLedgerView` (the mapping and its checks
are shared: ``views.py``)::

    PostgresLedgerView(
        dsn,
        table="jobs",
        columns={"attempt_id": "id", "state": "status", "provider_request_id": "message_id"},
        states={"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED},
    )

Each read is one read-only transaction (psycopg 3), rolled back after: the view sees what was
committed, which is what a crash leaves. Outside a crash case each read connects and closes
its connection. Inside one, the harness holds the connection between reads
(:func:`holding_connections`: a case reads its ledger some fifteen times, and a connection
costs PostgreSQL a server process) and closes it before it copies or drops the case's
database, and when the case ends; an idle connection holds no lock, so the case's processes
never wait for it. Rows come ordered by the
``attempt_id`` column (PostgreSQL has no row order of its own); a table that does not exist
yet reads as empty. A ``jsonb`` or ``json`` column reads as its JSON text (``args_json``).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..errors import LedgerError
from .authority import Authority
from .states import State
from .views import MappedLedgerView

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresLedgerView", "holding_connections", "release_connections"]

_INSTALL = "pip install 'pytest-crashpoints[postgres]' (psycopg 3)"


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LedgerError(
            f"PostgresLedgerView reads PostgreSQL with psycopg 3, which is not installed: "
            f"{_INSTALL}."
        ) from None
    return psycopg


class PostgresLedgerView(MappedLedgerView):
    """Read a user's ledger table or query in PostgreSQL (read-only) as the harness needs it.

    ``dsn`` is a libpq connection string or a ``postgresql://`` URL (in a crash test with a
    database per case: ``crashpoints_postgres.case_database(...).dsn(ctx)``). ``table``,
    ``query``, ``columns``, ``states``, ``constants``, ``args_columns``, ``events_table``,
    ``event_columns``, ``queue_sql`` and ``authority_of`` are those of
    :class:`~pytest_crashpoints.SQLiteLedgerView`; PostgreSQL has no ``rowid``, so
    ``attempt_id`` must name a column. A table not created yet reads as empty. A database
    that cannot be reached, a query PostgreSQL refuses, a missing required column or a state
    value not mapped raise :class:`LedgerError` saying what to do.
    """

    row_id = None

    def __init__(
        self,
        dsn: str,
        *,
        table: str | None = None,
        query: str | None = None,
        columns: Mapping[str, str] | None = None,
        states: Mapping[Any, State] | None = None,
        constants: Mapping[str, object] | None = None,
        args_columns: Sequence[str] = (),
        events_table: str | None = None,
        event_columns: Mapping[str, str] | None = None,
        queue_sql: str | None = None,
        authority_of: Callable[[str, float], Authority | None] | None = None,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise LedgerError(
                f"dsn={dsn!r} is not a PostgreSQL connection string; pass one such as "
                "'host=/tmp/pg dbname=app user=postgres' or a postgresql:// URL."
            )
        if (columns or {}).get("attempt_id") == "rowid":
            raise LedgerError(
                "columns={'attempt_id': 'rowid'}: PostgreSQL tables have no row ids; map "
                "attempt_id to a column of the table (its primary key)."
            )
        self.dsn = dsn
        super().__init__(
            table=table, query=query, columns=columns, states=states, constants=constants,
            args_columns=args_columns, events_table=events_table, event_columns=event_columns,
            queue_sql=queue_sql, authority_of=authority_of,
        )

    # -- connecting ------------------------------------------------------------------------------

    @property
    def database(self) -> str:
        """The database's name, as the connection string gives it."""
        psycopg = _psycopg()
        try:
            return str(psycopg.conninfo.conninfo_to_dict(self.dsn).get("dbname") or "?")
        except psycopg.ProgrammingError:
            return "?"

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        """A read-only transaction, rolled back after, on the connection held for the view's
        database (:func:`holding_connections`) or on a new one, closed after."""
        psycopg = _psycopg()
        held = _HELD.connections if _HELD.depth else None
        conn = held.get(self.dsn) if held is not None else None
        if conn is None or conn.closed or conn.broken:
            conn = self._connect()
            if held is not None:
                held[self.dsn] = conn
        try:
            yield conn
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            if held is None:
                conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        driver = _psycopg()
        try:
            conn = driver.connect(self.dsn, connect_timeout=30)
        except driver.Error as exc:
            raise LedgerError(
                f"could not connect to PostgreSQL database {self.database!r} to read the "
                f"ledger ({str(exc).strip()}); check the view's dsn= and that the database "
                "exists while the test runs."
            ) from None
        conn.read_only = True
        return cast("psycopg.Connection[Any]", conn)

    @property
    def _source(self) -> str:
        where = f"PostgreSQL database {self.database!r}"
        return f"{where} (query=)" if self.query is not None else f"{where}, table {self.table}"

    def _from(self, table: str) -> Any:
        """The ``FROM`` target of ``table`` (or of ``query=``), quoted."""
        sql = _psycopg().sql
        if self.query is not None and table == self.table:
            return sql.SQL("({}) AS crashpoints_query").format(sql.SQL(self.query))
        return sql.Identifier(*table.split("."))

    def _select(
        self,
        conn: psycopg.Connection[Any],
        table: str,
        *,
        limit: int | None,
        order: Sequence[str] = (),
    ) -> tuple[set[str], list[dict[str, Any]]]:
        """The columns and rows of ``table`` (none if it does not exist yet)."""
        psycopg = _psycopg()
        sql = psycopg.sql
        statement = sql.SQL("SELECT * FROM {}").format(self._from(table))
        if order:
            statement += sql.SQL(" ORDER BY {}").format(
                sql.SQL(", ").join(sql.Identifier(column) for column in order)
            )
        if limit is not None:
            statement += sql.SQL(" LIMIT {}").format(limit)
        try:
            with conn.cursor(row_factory=psycopg.rows.dict_row) as cursor:
                cursor.execute(statement)
                present = {column.name for column in cursor.description or ()}
                rows = [_json_as_text(row) for row in cursor.fetchall()]
        except psycopg.errors.UndefinedTable:
            conn.rollback()
            return set(), []
        except psycopg.Error as exc:
            conn.rollback()
            said = str(exc).strip().splitlines()[0]
            if self.query is not None and table == self.table:
                raise LedgerError(
                    f"query= failed on {self._source} ({said}); it must be one SELECT whose "
                    "rows are the attempts, with a column for each seed name you map."
                ) from None
            raise LedgerError(
                f"reading {table} in PostgreSQL database {self.database!r} failed ({said})."
            ) from None
        return present, rows

    # -- reading -------------------------------------------------------------------------------

    def _table_columns(self) -> frozenset[str] | None:
        with self._reading() as conn:
            present, _rows = self._select(conn, self.table, limit=0)
        return frozenset(present) if present else None

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        by_query = self.query is not None and table == self.table
        with self._reading() as conn:
            present, _none = self._select(conn, table, limit=0)
            if not present:
                return set(), []
            where = self._source if by_query else (
                f"PostgreSQL database {self.database!r}, table {table}"
            )
            self._check_required(present, required, mapping, by_query=by_query, where=where)
            # PostgreSQL has no row order: the attempts by id, the events by time, then id.
            names = ("attempt_id",) if table == self.table else ("at", "attempt_id")
            order = [mapping.get(name, name) for name in names]
            order = [column for column in order if column in present]
            return present, self._select(conn, table, limit=None, order=order)[1]

    def _queue_ids(self) -> set[str]:
        assert self.queue_sql is not None
        psycopg = _psycopg()
        with self._reading() as conn:
            try:
                return {str(row[0]) for row in conn.execute(self.queue_sql)}
            except psycopg.Error as exc:
                raise LedgerError(
                    f"queue_sql= failed on PostgreSQL database {self.database!r} "
                    f"({str(exc).strip().splitlines()[0]}); it must be a query whose first "
                    "column lists the attempt ids your operators' queue shows."
                ) from None


class _Held(threading.local):
    """The connections held for the views' reads in this thread, and how many
    :func:`holding_connections` scopes are open in it."""

    def __init__(self) -> None:
        self.depth = 0
        self.connections: dict[str, Any] = {}


_HELD = _Held()


@contextlib.contextmanager
def holding_connections() -> Iterator[None]:
    """Inside, the views of this thread keep their connection between reads (one per
    connection string); they are closed when the outermost scope ends."""
    _HELD.depth += 1
    try:
        yield
    finally:
        _HELD.depth -= 1
        if not _HELD.depth:
            release_connections()


def release_connections() -> None:
    """Close the connections the views of this thread hold (before a database they read is
    copied or dropped: PostgreSQL copies or drops a database nobody is connected to)."""
    connections = list(_HELD.connections.values())
    _HELD.connections.clear()
    for conn in connections:
        with contextlib.suppress(Exception):
            conn.close()


def _json_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its ``json``/``jsonb`` values (dicts and lists) as JSON text, as SQLite
    stores them: the shared mapping reads ``args_json`` as text."""
    return {
        name: json.dumps(value) if isinstance(value, dict | list) else value
        for name, value in row.items()
    }
