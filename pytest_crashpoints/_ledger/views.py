"""Ledger views: how the harness reads a ledger that is not the reference one.

The invariants are checked through the :class:`~pytest_crashpoints.LedgerView` protocol
(``attempts()``, ``queue()``, ``events()``). The reference :class:`Ledger` is one;
:class:`SQLiteLedgerView` reads any SQLite table with a row id and a state, and whatever
more of the seed names' columns it has (docs/howto-own-ledger.md), with configurable table,
column and state names::

    SQLiteLedgerView(
        "agent.db",
        table="tool_calls",
        columns={"attempt_id": "id", "idempotency_key": "idem_key", "state": "status"},
        states={"sent": State.DISPATCHED, "done": State.OUTCOME_CONFIRMED, ...},
    )

Columns beyond the seed schema (arguments, tenant, scope, policy version, owner, lease,
backoff, parent) are read when the table has them; when the tenant, scope and policy are
not stored, ``authority_of(task_id, created_at)`` supplies the authority the attempt was
created under (in a crash test: ``ctx.authority_at``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..errors import LedgerError
from .args import args_hash, normalize_args
from .authority import Authority, parse_scope
from .records import Attempt, Event, QueueEntry
from .states import IN_FLIGHT_STATES, State

__all__ = [
    "REQUIRED_COLUMNS", "SEED_COLUMNS", "LedgerView", "MappedLedgerView", "SQLiteLedgerView"
]



class LedgerView(Protocol):
    """How the harness reads a ledger: the reference :class:`Ledger` is one.

    ``attempts()`` returns every attempt with the columns of :class:`Attempt` (see
    docs/howto-own-ledger.md); ``queue()`` what the operator's queue shows (in-flight work);
    ``events()`` the transition log, or an empty list if the ledger keeps none.

    A view that cannot read every column may also have a ``provides`` attribute: the seed
    names it can read (:class:`SQLiteLedgerView` has one). The invariants that need a column
    it lacks are not checked, and the report says which. Without it, every column is read.
    """

    def attempts(self) -> Sequence[Attempt]: ...

    def queue(self) -> Sequence[QueueEntry]: ...

    def events(self) -> Sequence[Event]: ...


#: The seed schema's columns. Only ``attempt_id`` and ``state`` are required of a view; the
#: invariants that need a missing one say so (``LedgerView.provides``).
SEED_COLUMNS = (
    "attempt_id",
    "task_id",
    "tool_name",
    "args_hash",
    "idempotency_key",
    "state",
    "provider_request_id",
    "result_ref",
    "created_at",
    "updated_at",
)
OPTIONAL_COLUMNS = (
    "args_json",
    "tenant_id",
    "credential_scope",
    "policy_version",
    "owner",
    "lease_expires_at",
    "next_attempt_at",
    "attempt_count",
    "parent_attempt_id",
    "dispatched_at",
)
#: What every view must be able to read.
REQUIRED_COLUMNS = ("attempt_id", "state")
#: The seed names read as numbers, and what each is.
_NUMBERS = {
    "created_at": "a time in harness seconds (ctx.now() in a worker)",
    "updated_at": "a time in harness seconds (ctx.now() in a worker)",
    "lease_expires_at": "a time in harness seconds (ctx.now() in a worker)",
    "next_attempt_at": "a time in harness seconds (ctx.now() in a worker)",
    "dispatched_at": "a time in harness seconds (ctx.now() in a worker)",
    "attempt_count": "a count of tries",
}
EVENT_COLUMNS = ("attempt_id", "from_state", "to_state", "at", "actor", "reason")
_AUTHORITY_COLUMNS = frozenset({"tenant_id", "credential_scope", "policy_version"})
_ROWID = "rowid"


class MappedLedgerView:
    """What every view over a user's table does, whatever the database: map the table's
    columns and states to the seed names (``table=``/``query=``, ``columns=``, ``states=``,
    ``constants=``, ``args_columns=``, ``events_table=``/``event_columns=``, ``queue_sql=``,
    ``authority_of=``: see :class:`SQLiteLedgerView`), check them, and build the attempts,
    queue and events from the rows. A database's view supplies where the rows come from:
    ``_source``, ``_table_columns()``, ``_rows()`` and ``_queue_ids()``.
    """

    #: The name of the database's own row id column, if it has one (SQLite's ``rowid``).
    row_id: str | None = _ROWID

    def __init__(
        self,
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
        if table is not None and query is not None:
            raise LedgerError(
                "table= and query= both say where the attempts are; give one of them (query= "
                "is a SELECT over your tables, one row per tool call)."
            )
        self.table = table or "attempts"
        self.query = query
        self.columns = dict(columns or {})
        # By the text of the value: a column of integers (0, 1) maps as well as one of words.
        self.states = {str(key): state for key, state in (states or {}).items()}
        self.constants = dict(constants or {})
        self.args_columns = tuple(args_columns)
        self.events_table = events_table
        self.event_columns = dict(event_columns or {})
        self.queue_sql = queue_sql
        self.authority_of = authority_of
        known = set(SEED_COLUMNS + OPTIONAL_COLUMNS)
        unknown = sorted((set(self.columns) | set(self.constants)) - known)
        if unknown:
            raise LedgerError(
                f"{', '.join(unknown)} is not a seed name; map only "
                f"{', '.join(SEED_COLUMNS + OPTIONAL_COLUMNS)}."
            )
        if self.args_columns and ("args_json" in self.columns or "args_hash" in self.columns):
            raise LedgerError(
                "args_columns= and a mapped args_json or args_hash column both say what the "
                "arguments are; give one of them."
            )
        self._present: frozenset[str] | None = None
        #: Seed names whose same-named column (not mapped) holds what is not a number (an
        #: ISO-8601 ``created_at``): that column is not read for them.
        self._unreadable: set[str] = set()

    # -- what this view can read ---------------------------------------------------------------

    @property
    def provides(self) -> frozenset[str]:
        """The seed names this view can read: mapped (or same-named) columns the table has,
        constants, arguments from ``args_columns``, and the authority from ``authority_of``.
        Before the table exists, the names it is configured to read (``columns=``)."""
        names = {name: self.columns.get(name, name) for name in SEED_COLUMNS + OPTIONAL_COLUMNS}
        present = self._present if self._present is not None else self._table_columns()
        if present is None:
            found = set(self.columns)
        else:
            found = {
                name for name, col in names.items()
                if col in present or (col == self.row_id and col is not None)
            }
        found |= set(self.constants)
        if self.args_columns:
            found |= {"args_json", "args_hash"}
        elif "args_json" in found:
            found.add("args_hash")  # the view computes it when the table does not store it
        if self.authority_of is not None:
            found |= _AUTHORITY_COLUMNS
        return frozenset(found - self._unreadable)

    def _number(self, name: str, column: str, value: Any, default: Any) -> Any:
        """``value`` of seed name ``name`` (a time in harness seconds, a count) as a number.
        A same-named column nobody mapped that holds something else (ISO-8601 text) is not
        read for it; a mapped one is the user's word, and holding anything else is an error
        that says so."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
        if name not in self.columns:
            self._unreadable.add(name)
            return default
        raise LedgerError(
            f"{self._source}: {name} is mapped to column {column!r}, which holds {value!r}, "
            f"not a number; {name} is {_NUMBERS[name]}: store that there, map {name} to a "
            "column that holds it, or leave it unmapped."
        )

    def _state(self, value: object) -> State:
        if str(value) in self.states:
            return self.states[str(value)]
        try:
            return State(str(value))
        except ValueError:
            raise LedgerError(
                f"state {value!r} in {self._source} is not a pytest-crashpoints "
                f"state; map it with states={{{value!r}: State.<one of "
                f"{', '.join(s.name for s in State)}>}}"
            ) from None

    def attempts(self) -> list[Attempt]:
        names = {name: self.columns.get(name, name) for name in SEED_COLUMNS + OPTIONAL_COLUMNS}
        present, rows = self._rows(self.table, REQUIRED_COLUMNS, self.columns)
        if rows:
            absent = [c for c in self.args_columns if c not in present]
            if absent:
                raise LedgerError(
                    f"{self._source} lacks the argument column(s) "
                    f"{', '.join(absent)} named in args_columns=."
                )
            self._present = frozenset(present)
        attempts = [self._attempt(row, names, present) for row in rows]
        if "created_at" in self.provides:
            attempts.sort(key=lambda a: (a.created_at, a.attempt_id))
        return attempts

    def _authority(
        self,
        get: Callable[..., Any],
        names: Mapping[str, str],
        present: set[str],
        task_id: str,
        created_at: float,
    ) -> Authority | None:
        """The authority a row records: its tenant, scope and policy columns; what of them
        the table does not store, from ``authority_of`` (a table that stores the tenant
        alone does not record an empty scope)."""
        stored = {
            name for name in _AUTHORITY_COLUMNS
            if names[name] in present or name in self.constants
        }
        given = self.authority_of(task_id, created_at) if self.authority_of else None
        if "tenant_id" not in stored and given is not None:
            return given
        if "tenant_id" not in stored:
            return None
        scope = (
            parse_scope(str(get("credential_scope", "") or ""))
            if "credential_scope" in stored or given is None
            else given.credential_scope
        )
        policy = (
            str(get("policy_version", ""))
            if "policy_version" in stored or given is None
            else given.policy_version
        )
        return Authority(str(get("tenant_id", "")), scope, policy)

    def _attempt(self, row: Any, names: Mapping[str, str], present: set[str]) -> Attempt:
        def get(name: str, default: Any = None) -> Any:
            if name in self.constants:
                return self.constants[name]
            column = names[name]
            value = row[column] if column in present else default
            if name in _NUMBERS and value is not None and column in present:
                return self._number(name, column, value, default)
            return value

        created_at = float(get("created_at", 0.0) or 0.0)
        task_id = str(get("task_id", "") or "")
        authority = self._authority(get, names, present, task_id, created_at)
        if self.args_columns:
            args = normalize_args({column: row[column] for column in self.args_columns})
            digest = args_hash(args)
        else:
            raw_args = get("args_json")
            args = json.loads(raw_args) if isinstance(raw_args, str) and raw_args else {}
            digest = str(get("args_hash") or "") or (args_hash(args) if raw_args else "")
        return Attempt(
            attempt_id=str(get("attempt_id")),
            task_id=task_id,
            tool_name=str(get("tool_name", "") or ""),
            args_hash=digest,
            args=args,
            idempotency_key=str(get("idempotency_key", "") or ""),
            state=self._state(get("state")),
            provider_request_id=_text(get("provider_request_id")),
            result_ref=_text(get("result_ref")),
            authority=authority or Authority("", frozenset(), ""),
            owner=_text(get("owner")),
            lease_expires_at=get("lease_expires_at"),
            next_attempt_at=get("next_attempt_at"),
            attempt_count=int(get("attempt_count", 0) or 0),
            parent_attempt_id=_text(get("parent_attempt_id")),
            created_at=created_at,
            updated_at=float(get("updated_at", created_at) or created_at),
            dispatched_at=get("dispatched_at"),
        )

    def queue(self) -> list[QueueEntry]:
        attempts = self.attempts()
        if self.queue_sql is None or not attempts:
            shown = [a for a in attempts if a.state in IN_FLIGHT_STATES]
        else:
            ids = self._queue_ids()
            shown = [a for a in attempts if a.attempt_id in ids]
        return [
            QueueEntry(
                attempt_id=a.attempt_id,
                task_id=a.task_id,
                tool_name=a.tool_name,
                state=a.state,
                owner=a.owner,
                lease_expires_at=a.lease_expires_at,
                age=a.updated_at - a.created_at,
                next_attempt_at=a.next_attempt_at,
                args_hash=a.args_hash,
                provider_request_id=a.provider_request_id,
            )
            for a in shown
        ]

    def events(self) -> Sequence[Event]:
        if self.events_table is None:
            return []
        names = {name: self.event_columns.get(name, name) for name in EVENT_COLUMNS}
        _present, rows = self._rows(self.events_table, EVENT_COLUMNS, self.event_columns)
        return [
            Event(
                event_id=index,
                attempt_id=str(row[names["attempt_id"]]),
                from_state=None
                if row[names["from_state"]] is None
                else self._state(row[names["from_state"]]),
                to_state=self._state(row[names["to_state"]]),
                at=float(row[names["at"]]),
                actor=str(row[names["actor"]]),
                reason=str(row[names["reason"]]),
            )
            for index, row in enumerate(rows, start=1)
        ]

    # -- where the rows come from: each database's view ----------------------------------------

    @property
    def _source(self) -> str:
        """Where the attempts are, in words, for messages."""
        raise NotImplementedError

    def _table_columns(self) -> frozenset[str] | None:
        """The table's (or query's) columns, if the table exists yet."""
        raise NotImplementedError

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        """(columns present, rows readable by column name) of ``table`` (or ``query=``); none
        yet if the table does not exist. Missing required columns are an error
        (:meth:`_check_required`)."""
        raise NotImplementedError

    def _queue_ids(self) -> set[str]:
        """The attempt ids ``queue_sql`` lists."""
        raise NotImplementedError

    def _check_required(
        self, present: set[str], required: Sequence[str], mapping: Mapping[str, str], *,
        by_query: bool, where: str,
    ) -> None:
        """Raise :class:`LedgerError` if a required column is not among ``present``."""
        missing = [mapping.get(name, name) for name in required]
        missing = [
            c for c in missing if c not in present and (c != self.row_id or by_query)
        ]
        if missing:
            raise LedgerError(
                f"{where} lacks the column(s) {', '.join(missing)}; map your "
                "names with columns={'seed_name': 'your_name'} (event_columns= for events)"
                + (", or name them in the query (AS ...)." if by_query else ".")
            )


class SQLiteLedgerView(MappedLedgerView):
    """Read a user's SQLite ledger table (read-only) as the harness needs it.

    Only a row id and a state are required: ``columns`` maps seed names to the table's names
    (unmapped names are used as they are; ``"rowid"`` is SQLite's own row id), and a seed
    name the table has no column for is simply not provided. ``constants`` gives a seed
    name one value for every row (``constants={"tool_name": "send_email"}``).
    ``args_columns`` names the columns that together are the call's arguments (their hash is
    computed), for a table that stores them as columns rather than as one JSON column.
    ``states`` maps the table's state values to :class:`State` (default: the values are State
    names). ``events_table`` and ``event_columns`` do the same for an event log, if the ledger
    keeps one. ``queue_sql``, if given, is the query whose first column lists the attempt ids
    the operator's queue shows; by default the queue is every in-flight attempt. When the
    tenant, scope and policy are not stored, ``authority_of(task_id, created_at)`` supplies
    the authority the attempt was created under (in a crash test: ``ctx.authority_at``).

    A ledger file or table that does not exist yet reads as empty (a worker creates its
    ledger on first use). A missing required column, a state value not mapped, or a
    ``queue_sql`` that fails raise :class:`LedgerError` saying what to do.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
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
        self.path = Path(path)
        super().__init__(
            table=table, query=query, columns=columns, states=states, constants=constants,
            args_columns=args_columns, events_table=events_table, event_columns=event_columns,
            queue_sql=queue_sql, authority_of=authority_of,
        )

    # -- reading -------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        return conn

    @property
    def _source(self) -> str:
        """Where the attempts are, in words: ``path:table`` or ``path (query=)``."""
        return f"{self.path} (query=)" if self.query is not None else f"{self.path}:{self.table}"

    def _table_columns(self) -> frozenset[str] | None:
        """The table's (or query's) columns, if the file and the table exist yet."""
        if not self.path.exists():
            return None
        with self._closing() as conn:
            if self.query is not None:
                present = self._query_columns(conn)
                return frozenset(present) if present else None
            present = {row["name"] for row in conn.execute(f'PRAGMA table_info("{self.table}")')}
        return frozenset(present) if present else None

    def _query_columns(self, conn: sqlite3.Connection) -> set[str]:
        """The columns of ``query``; none while a table it reads does not exist yet."""
        assert self.query is not None
        try:
            cursor = conn.execute(f"SELECT * FROM ({self.query}) LIMIT 0")
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return set()
            raise LedgerError(
                f"query= failed on {self.path} ({exc}); it must be one SELECT whose rows are "
                "the attempts, with a column for each seed name you map."
            ) from None
        return {column[0] for column in cursor.description}

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        """(columns present, rows) of ``table``; none yet if the file or table does not exist
        (a worker creates its ledger on first use). Missing required columns are an error."""
        if not self.path.exists():
            return set(), []
        with self._closing() as conn:
            by_query = self.query is not None and table == self.table
            if by_query:
                present = self._query_columns(conn)
            else:
                present = {row["name"] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            if not present:
                return set(), []
            where = self._source if by_query else f"{self.path}:{table}"
            self._check_required(present, required, mapping, by_query=by_query, where=where)
            if by_query:
                return present, conn.execute(f"SELECT * FROM ({self.query})").fetchall()
            rows = conn.execute(f'SELECT rowid AS "{_ROWID}", * FROM "{table}" ORDER BY rowid')
            return present | {_ROWID}, rows.fetchall()

    def _queue_ids(self) -> set[str]:
        assert self.queue_sql is not None
        try:
            with self._closing() as conn:
                return {str(row[0]) for row in conn.execute(self.queue_sql)}
        except sqlite3.Error as exc:
            raise LedgerError(
                f"queue_sql= failed on {self.path} ({exc}); it must be a query whose first "
                "column lists the attempt ids your operators' queue shows."
            ) from None

    def _closing(self) -> Any:
        from contextlib import closing

        return closing(self._connect())


def _text(value: object) -> str | None:
    """A column value as text (an issue number stored as an integer, say), or None."""
    return None if value is None else str(value)
