"""Ledger views: how the harness reads a ledger that is not the reference one.

The invariants are checked through the :class:`~pytest_crashpoints.LedgerView` protocol
(``attempts()``, ``queue()``, ``events()``). The reference :class:`Ledger` is one;
:class:`SQLiteLedgerView` reads any SQLite table that follows the seed schema
(docs/howto-own-ledger.md), with configurable table, column and state names::

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
from .authority import Authority, parse_scope
from .records import Attempt, Event, QueueEntry
from .states import IN_FLIGHT_STATES, State

__all__ = ["SEED_COLUMNS", "LedgerView", "SQLiteLedgerView"]

class LedgerView(Protocol):
    """How the harness reads a ledger: the reference :class:`Ledger` is one.

    ``attempts()`` returns every attempt with the columns of :class:`Attempt` (see
    docs/howto-own-ledger.md); ``queue()`` what the
    operator's queue shows (in-flight work); ``events()`` the transition log, or an empty list
    if the ledger keeps none.
    """

    def attempts(self) -> Sequence[Attempt]: ...

    def queue(self) -> Sequence[QueueEntry]: ...

    def events(self) -> Sequence[Event]: ...


#: The seed schema's columns, which every viewed table must have.
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
EVENT_COLUMNS = ("attempt_id", "from_state", "to_state", "at", "actor", "reason")


class SQLiteLedgerView:
    """Read a user's SQLite ledger table (read-only) as the harness needs it.

    ``columns`` maps seed names to the table's names (unmapped names are used as they are);
    ``states`` maps the table's state values to :class:`State` (default: the values are
    State names). ``events_table`` and ``event_columns`` do the same for an event log, if
    the ledger keeps one. ``queue_sql``, if given, is the query whose first column lists the
    attempt ids the operator's queue shows; by default the queue is every in-flight attempt.
    A ledger file or table that does not exist yet reads as empty (a worker creates its
    ledger on first use). Missing seed columns or an unknown state value raise
    :class:`LedgerError` saying which.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = "attempts",
        columns: Mapping[str, str] | None = None,
        states: Mapping[str, State] | None = None,
        events_table: str | None = None,
        event_columns: Mapping[str, str] | None = None,
        queue_sql: str | None = None,
        authority_of: Callable[[str, float], Authority | None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.table = table
        self.columns = dict(columns or {})
        self.states = dict(states or {})
        self.events_table = events_table
        self.event_columns = dict(event_columns or {})
        self.queue_sql = queue_sql
        self.authority_of = authority_of

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        return conn

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        """(columns present, rows) of ``table``; none yet if the file or table does not exist
        (a worker creates its ledger on first use). Missing required columns are an error."""
        if not self.path.exists():
            return set(), []
        with self._closing() as conn:
            present = {row["name"] for row in conn.execute(f'PRAGMA table_info("{table}")')}
            if not present:
                return set(), []
            missing = [mapping.get(name, name) for name in required]
            missing = [column for column in missing if column not in present]
            if missing:
                raise LedgerError(
                    f"{self.path}:{table} lacks the column(s) {', '.join(missing)}; map your "
                    "names with columns={'seed_name': 'your_name'} (event_columns= for events)."
                )
            return present, conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid').fetchall()

    def _state(self, value: object) -> State:
        if value in self.states:
            return self.states[str(value)]
        try:
            return State(str(value))
        except ValueError:
            raise LedgerError(
                f"state {value!r} in {self.path}:{self.table} is not a pytest-crashpoints "
                f"state; map it with states={{{value!r}: State.<one of "
                f"{', '.join(s.name for s in State)}>}}"
            ) from None

    def attempts(self) -> list[Attempt]:
        names = {name: self.columns.get(name, name) for name in SEED_COLUMNS + OPTIONAL_COLUMNS}
        present, rows = self._rows(self.table, SEED_COLUMNS, self.columns)
        return sorted(
            (self._attempt(row, names, present) for row in rows),
            key=lambda a: (a.created_at, a.attempt_id),
        )

    def _attempt(self, row: sqlite3.Row, names: Mapping[str, str], present: set[str]) -> Attempt:
        def get(name: str, default: Any = None) -> Any:
            column = names[name]
            return row[column] if column in present else default

        created_at = float(get("created_at"))
        task_id = str(get("task_id"))
        if names["tenant_id"] in present:
            authority: Authority | None = Authority(
                str(get("tenant_id", "")),
                parse_scope(str(get("credential_scope", "") or "")),
                str(get("policy_version", "")),
            )
        else:
            authority = self.authority_of(task_id, created_at) if self.authority_of else None
        raw_args = get("args_json")
        return Attempt(
            attempt_id=str(get("attempt_id")),
            task_id=task_id,
            tool_name=str(get("tool_name")),
            args_hash=str(get("args_hash") or ""),
            args=json.loads(raw_args) if raw_args else {},
            idempotency_key=str(get("idempotency_key")),
            state=self._state(get("state")),
            provider_request_id=get("provider_request_id"),
            result_ref=get("result_ref"),
            authority=authority or Authority("", frozenset(), ""),
            owner=get("owner"),
            lease_expires_at=get("lease_expires_at"),
            next_attempt_at=get("next_attempt_at"),
            attempt_count=int(get("attempt_count", 0) or 0),
            parent_attempt_id=get("parent_attempt_id"),
            created_at=created_at,
            updated_at=float(get("updated_at")),
            dispatched_at=get("dispatched_at"),
        )

    def queue(self) -> list[QueueEntry]:
        attempts = self.attempts()
        if self.queue_sql is None:
            shown = [a for a in attempts if a.state in IN_FLIGHT_STATES]
        else:
            with self._closing() as conn:
                ids = {str(row[0]) for row in conn.execute(self.queue_sql)}
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

    def _closing(self) -> Any:
        from contextlib import closing

        return closing(self._connect())
