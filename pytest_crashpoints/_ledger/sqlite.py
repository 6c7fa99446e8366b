"""The reference interruption ledger, on SQLite from the standard library.

One row per attempt at one logical side effect, written *before* dispatch, plus an append-only
event log of every state transition. Durability settings: WAL, ``synchronous=FULL``, a busy
timeout, and every write in an explicit ``BEGIN IMMEDIATE`` transaction, so a process killed
at any instant leaves either the whole write or none of it.

One connection per process: the connection is opened lazily by the process that uses it and
reopened after a fork (SQLite connections must never cross a fork). Every timestamp comes from
an injectable clock (the harness clock in tests), never from the wall clock directly.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._inject.failpoints import crashpoint
from ..errors import (
    IdempotencyKeyConflict,
    IllegalTransition,
    LeaseHeld,
    LedgerError,
    SchemaVersionError,
    UnknownAttempt,
)
from .args import canonical_json, text_hash
from .authority import Authority, parse_scope
from .records import Attempt, Event, QueueEntry
from .states import IN_FLIGHT_STATES, State, is_legal

__all__ = ["SCHEMA_VERSION", "Ledger"]

#: ``PRAGMA user_version`` of the schema this module writes and reads.
SCHEMA_VERSION = 1

_STATE_CHECK = ", ".join(f"'{state.value}'" for state in State)

_SCHEMA: tuple[str, ...] = (
    f"""
CREATE TABLE attempts (
    attempt_id          TEXT PRIMARY KEY,
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
    lease_expires_at    REAL,
    next_attempt_at     REAL,
    dispatched_at       REAL,
    attempt_count       INTEGER NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    parent_attempt_id   TEXT REFERENCES attempts (attempt_id),
    created_at          REAL NOT NULL,
    updated_at          REAL NOT NULL
)
""",
    """
CREATE INDEX attempts_by_state ON attempts (state)
""",
    """
CREATE INDEX attempts_by_task ON attempts (task_id)
""",
    """
CREATE TABLE events (
    -- A plain rowid, not AUTOINCREMENT: the triggers below forbid the deletes that would
    -- let an id be reused, and it spares every logged commit a sqlite_sequence page.
    event_id    INTEGER PRIMARY KEY,
    attempt_id  TEXT NOT NULL REFERENCES attempts (attempt_id),
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    at          REAL NOT NULL,
    actor       TEXT NOT NULL,
    reason      TEXT NOT NULL
)
""",
    """
CREATE INDEX events_by_attempt ON events (attempt_id)
""",
    """
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END
""",
    """
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END
""",
)


#: The tables every ledger of this schema version has.
_TABLES = ("attempts", "events")


@functools.lru_cache(maxsize=256)
def _authority(tenant_id: str, scope_text: str, policy_version: str) -> Authority:
    # Authority is frozen (its scope a frozenset): one object can serve every row that has it.
    return Authority(tenant_id, parse_scope(scope_text), policy_version)


def _attempt_from_row(row: sqlite3.Row) -> Attempt:
    return Attempt(
        attempt_id=row["attempt_id"],
        task_id=row["task_id"],
        tool_name=row["tool_name"],
        args_hash=row["args_hash"],
        args=json.loads(row["args_json"]),
        idempotency_key=row["idempotency_key"],
        state=State(row["state"]),
        provider_request_id=row["provider_request_id"],
        result_ref=row["result_ref"],
        authority=_authority(row["tenant_id"], row["credential_scope"], row["policy_version"]),
        owner=row["owner"],
        lease_expires_at=row["lease_expires_at"],
        next_attempt_at=row["next_attempt_at"],
        attempt_count=row["attempt_count"],
        parent_attempt_id=row["parent_attempt_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        dispatched_at=row["dispatched_at"],
    )


_INHERITED_CONNECTIONS: list[sqlite3.Connection] = []


class Ledger:
    """The reference ledger over one SQLite file.

    ``clock`` returns the current time in seconds (pass the harness clock's ``now`` in tests).
    ``busy_timeout`` is how long a writer waits for another process's write lock, in real
    seconds. The file is created with the current schema if it does not exist; a file written
    by another schema version raises :class:`SchemaVersionError`.

    With ``read_only=True`` the file is opened read-only (SQLite's ``mode=ro``): nothing is
    created, switched to WAL or written, and a file that is not a ledger of this schema
    version raises :class:`LedgerError` (or :class:`SchemaVersionError`) and stays byte for
    byte as it was; every write raises :class:`LedgerError`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self._busy_timeout = busy_timeout
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None

    #: What begins a write transaction: SQLite takes the write lock at once, so a write never
    #: fails half-way for a lock another writer holds.
    _BEGIN = "BEGIN IMMEDIATE"
    #: What a claim's read of the lease adds to lock the row (SQLite's write lock covers it).
    _LOCK_ROW = ""
    #: What orders attempts created at the same clock time: the order they were inserted.
    _ROW_ORDER = "rowid"

    @property
    def where(self) -> str:
        """Where the ledger is, as its errors name it."""
        return str(self.path)

    def now(self) -> float:
        """The ledger's clock (harness time in tests)."""
        return self._clock()

    # -- connection -------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._conn is not None and self._pid == pid:
            return self._conn
        if self._conn is not None:
            # Inherited over fork: it belongs to the parent. Keep it referenced so it is never
            # closed here (closing may checkpoint or unlink the parent's WAL), and open our own.
            _INHERITED_CONNECTIONS.append(self._conn)
        target = f"{self.path.resolve().as_uri()}?mode=ro" if self.read_only else str(self.path)
        conn = sqlite3.connect(
            target,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=self.read_only,
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            if self.read_only:
                self._check_read_only(conn)
            else:
                # Check (and create) the schema first, in one write transaction, so a foreign
                # file is refused before anything below writes to it.
                self._ensure_schema(conn)
                self._enable_wal(conn)
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.OperationalError as exc:
            conn.close()
            raise LedgerError(
                f"cannot open the ledger {self.path} ({exc}); another process may hold it "
                f"longer than the busy timeout ({self._busy_timeout:g}s), or the path is wrong."
            ) from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise LedgerError(
                f"{self.path} is not a readable SQLite ledger ({exc}); check the path, or "
                "restore the ledger from a backup."
            ) from exc
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, pid
        return conn

    def _check_version(self, conn: sqlite3.Connection) -> bool:
        """True if the file is empty (a new ledger); raise if it has another schema version."""
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        (tables,) = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
        ).fetchone()
        if version == 0 and tables == 0:
            return True
        if version != SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} has ledger schema version {version}, but this version of "
                f"pytest-crashpoints reads version {SCHEMA_VERSION}; nothing was changed. "
                "Open it with the pytest-crashpoints release that wrote it, or start a new "
                "ledger file."
            )
        return False

    def _check_read_only(self, conn: sqlite3.Connection) -> None:
        """Refuse, without writing, a file that is not a ledger of this schema version."""
        conn.execute("BEGIN")
        try:
            new = self._check_version(conn)
            names = {
                row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        finally:
            conn.execute("COMMIT")
        missing = sorted(set(_TABLES) - names)
        if new or missing:
            raise LedgerError(
                f"{self.path} is not a pytest-crashpoints ledger (it has no "
                f"{' or '.join(missing)} table); check the path. Nothing was changed."
            )

    @staticmethod
    def _enable_wal(conn: sqlite3.Connection) -> None:
        # Switching to WAL needs an exclusive lock. Two processes opening a new ledger at once
        # can each hold a shared lock and want it: SQLite then answers "locked" at once rather
        # than deadlock (the busy handler is skipped), so the loser yields and tries again.
        for attempt in range(200):
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 199:
                    raise
                time.sleep(0.001 * (1 + attempt % 10))
                continue
            if str(mode).lower() == "wal":
                return
        raise sqlite3.OperationalError("the ledger could not be switched to WAL mode")

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version == SCHEMA_VERSION:
            return  # set in the transaction that created the schema: nothing to check or make
        conn.execute("BEGIN IMMEDIATE")
        try:
            if self._check_version(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        """Close this process's connection (a later call reopens it)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None
        self._pid = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _write(self, op: str, attempt_id: str | None = None) -> Iterator[sqlite3.Connection]:
        # The harness may kill the process here: "at the next ledger write" (crash point C).
        crashpoint("ledger.write", op=op, attempt_id=attempt_id)
        if self.read_only:
            raise LedgerError(f"the ledger {self.where} was opened read-only; {op} writes.")
        conn = self._connection()
        conn.execute(self._BEGIN)
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def _read_attempt(self, conn: sqlite3.Connection, attempt_id: str) -> Attempt:
        row = conn.execute("SELECT * FROM attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        if row is None:
            raise UnknownAttempt(attempt_id)
        return _attempt_from_row(row)

    @staticmethod
    def _current_state(conn: sqlite3.Connection, attempt_id: str) -> State:
        row = conn.execute(
            "SELECT state FROM attempts WHERE attempt_id = ?", (attempt_id,)
        ).fetchone()
        if row is None:
            raise UnknownAttempt(attempt_id)
        return State(row[0])

    @staticmethod
    def _returned(row: sqlite3.Row | None, attempt_id: str) -> Attempt:
        """The attempt an ``UPDATE ... RETURNING *`` wrote (no row: no such attempt)."""
        if row is None:
            raise UnknownAttempt(attempt_id)
        return _attempt_from_row(row)

    def _update(
        self, op: str, attempt_id: str, assignments: str, values: tuple[object, ...]
    ) -> Attempt:
        """Write ``op``: set ``assignments`` (one ``?`` per item of ``values``) and
        ``updated_at`` on the attempt, in one transaction; the attempt as written."""
        with self._write(op, attempt_id) as conn:
            row = conn.execute(
                f"UPDATE attempts SET {assignments}, updated_at = ? WHERE attempt_id = ? "
                "RETURNING *",
                (*values, self._clock(), attempt_id),
            ).fetchone()
            return self._returned(row, attempt_id)

    @staticmethod
    def _log(
        conn: sqlite3.Connection,
        attempt_id: str,
        from_state: State | None,
        to_state: State,
        at: float,
        actor: str,
        reason: str,
    ) -> None:
        conn.execute(
            "INSERT INTO events (attempt_id, from_state, to_state, at, actor, reason) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (attempt_id, from_state and from_state.value, to_state.value, at, actor, reason),
        )

    # -- writes -----------------------------------------------------------------------------

    def record_intent(
        self,
        *,
        task_id: str,
        tool_name: str,
        args: Mapping[str, Any],
        idempotency_key: str,
        authority: Authority,
        actor: str,
        lease_seconds: float | None = None,
        parent_attempt_id: str | None = None,
        state: State = State.INTENT_RECORDED,
        reason: str = "intent recorded",
    ) -> tuple[Attempt, bool]:
        """Insert the intent for one logical effect, keyed by ``idempotency_key``.

        Returns ``(attempt, created)``. If the key already exists with the same arguments hash,
        the existing attempt is returned with ``created=False`` and nothing is written; with a
        different hash, :class:`IdempotencyKeyConflict` is raised and nothing is written.
        Arguments that cannot be normalized raise :class:`ArgumentsError` before anything is
        written. ``actor`` becomes the owner, with a lease of ``lease_seconds`` if given.
        """
        if not idempotency_key:
            raise LedgerError(
                "an empty idempotency key cannot name an effect; derive a stable key from what "
                "makes the effect unique (e.g. 'invoice:tenant-7:2026-08-11:send')."
            )
        text = canonical_json(args)
        digest = text_hash(text)
        with self._write("record_intent") as conn:
            now = self._clock()
            attempt_id = f"a-{uuid.uuid4().hex[:16]}"
            lease = None if lease_seconds is None else now + lease_seconds
            # A key already recorded inserts nothing and returns no row (the check and the
            # insert are one statement; the transaction holds the write lock anyway).
            row = conn.execute(
                "INSERT INTO attempts (attempt_id, task_id, tool_name, args_hash, args_json, "
                "idempotency_key, state, tenant_id, credential_scope, policy_version, owner, "
                "lease_expires_at, parent_attempt_id, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (idempotency_key) DO NOTHING RETURNING *",
                (
                    attempt_id,
                    task_id,
                    tool_name,
                    digest,
                    text,
                    idempotency_key,
                    state.value,
                    authority.tenant_id,
                    authority.scope_text,
                    authority.policy_version,
                    actor,
                    lease,
                    parent_attempt_id,
                    now,
                    now,
                ),
            ).fetchone()
            if row is None:
                row = conn.execute(
                    "SELECT * FROM attempts WHERE idempotency_key = ?", (idempotency_key,)
                ).fetchone()
                existing = _attempt_from_row(row)
                if existing.args_hash != digest:
                    raise IdempotencyKeyConflict(idempotency_key, existing.args_hash, digest)
                return existing, False
            self._log(conn, attempt_id, None, state, now, actor, reason)
            return _attempt_from_row(row), True

    def transition(
        self,
        attempt_id: str,
        to_state: State,
        *,
        actor: str,
        reason: str,
        expected: State | Sequence[State] | None = None,
        provider_request_id: str | None = None,
        result_ref: str | None = None,
        next_attempt_at: float | None = None,
    ) -> Attempt:
        """Move an attempt to ``to_state`` and log the event, in one transaction.

        A provider request id already recorded is kept (the first one known names the
        request). ``expected`` makes it a compare-and-set: if the attempt is not in (one of)
        those states the move is refused with :class:`IllegalTransition`, so two processes
        racing for the same move cannot both win. A move the transition table forbids raises
        :class:`IllegalTransition` naming the attempt and both states; nothing is changed.
        Moving to DISPATCHED counts one more attempt.
        """
        if expected is None:
            allowed: tuple[State, ...] = tuple(State)
        else:
            allowed = (expected,) if isinstance(expected, State) else tuple(expected)
        # The states this move may start from: allowed by ``expected`` and by the table.
        sources = {state for state in allowed if is_legal(state, to_state)}
        with self._write("transition", attempt_id) as conn:
            if len(sources) == 1:
                # One possible source: the compare-and-set is the UPDATE's WHERE clause.
                (current,) = sources
            else:
                current = self._current_state(conn, attempt_id)
            if current not in sources:
                raise IllegalTransition(attempt_id, current.value, to_state.value)
            now = self._clock()
            dispatched = to_state is State.DISPATCHED
            row = conn.execute(
                "UPDATE attempts SET state = ?, updated_at = ?, "
                "provider_request_id = coalesce(provider_request_id, ?), "
                "result_ref = coalesce(?, result_ref), next_attempt_at = ?, "
                "attempt_count = attempt_count + ?, dispatched_at = coalesce(?, dispatched_at) "
                "WHERE attempt_id = ? AND state = ? RETURNING *",
                (
                    to_state.value,
                    now,
                    provider_request_id,
                    result_ref,
                    next_attempt_at,
                    1 if dispatched else 0,
                    now if dispatched else None,
                    attempt_id,
                    current.value,
                ),
            ).fetchone()
            if row is None:  # not in the one source state (or no such attempt): nothing changed
                raise IllegalTransition(
                    attempt_id, self._current_state(conn, attempt_id).value, to_state.value
                )
            self._log(conn, attempt_id, current, to_state, now, actor, reason)
            return _attempt_from_row(row)

    def record_provider_request_id(
        self, attempt_id: str, provider_request_id: str, *, result_ref: str | None = None
    ) -> Attempt:
        """Persist the provider's request id (and the id of what it created, if the answer
        names it) as soon as they are known (safe order, step 4)."""
        return self._update(
            "record_provider_request_id",
            attempt_id,
            "provider_request_id = ?, result_ref = coalesce(?, result_ref)",
            (provider_request_id, result_ref),
        )

    def defer(self, attempt_id: str, *, until: float, actor: str) -> Attempt:
        """Back off: leave the state alone and set ``next_attempt_at`` (harness time)."""
        return self._update("defer", attempt_id, "next_attempt_at = ?, owner = ?", (until, actor))

    def claim(self, attempt_id: str, *, owner: str, lease_seconds: float) -> Attempt:
        """Take ownership of an attempt for ``lease_seconds`` of clock time.

        Succeeds if the attempt has no owner, its lease has expired, or ``owner`` already holds
        it (which renews the lease). Otherwise raises :class:`LeaseHeld`; nothing changes.
        """
        if lease_seconds <= 0:
            raise LedgerError(f"lease_seconds must be positive, not {lease_seconds!r}.")
        with self._write("claim", attempt_id) as conn:
            held = conn.execute(
                "SELECT owner, lease_expires_at FROM attempts WHERE attempt_id = ?"
                + self._LOCK_ROW,
                (attempt_id,),
            ).fetchone()
            if held is None:
                raise UnknownAttempt(attempt_id)
            holder, expires = held
            now = self._clock()
            if holder is not None and holder != owner and expires is not None and expires > now:
                raise LeaseHeld(attempt_id, holder, expires)
            row = conn.execute(
                "UPDATE attempts SET owner = ?, lease_expires_at = ?, updated_at = ? "
                "WHERE attempt_id = ? RETURNING *",
                (owner, now + lease_seconds, now, attempt_id),
            ).fetchone()
            return self._returned(row, attempt_id)

    def release(self, attempt_id: str, *, owner: str) -> Attempt:
        """End ``owner``'s lease now (the owner stays recorded, so work is never ownerless)."""
        with self._write("release", attempt_id) as conn:
            row = conn.execute(
                "UPDATE attempts SET lease_expires_at = ?, updated_at = ? "
                "WHERE attempt_id = ? AND owner = ? RETURNING *",
                (self._clock(), self._clock(), attempt_id, owner),
            ).fetchone()
            # No row: someone else's lease (left alone), or no such attempt (UnknownAttempt).
            return self._read_attempt(conn, attempt_id) if row is None else _attempt_from_row(row)

    def link_attempt(
        self,
        parent_attempt_id: str,
        *,
        args: Mapping[str, Any],
        authority: Authority,
        actor: str,
        reason: str,
    ) -> Attempt:
        """Create a new attempt linked to ``parent_attempt_id`` that requires review.

        Used when the arguments or the authority changed since the parent's intent: the parent
        is never reused, and the new attempt starts in MANUAL_REVIEW under the new authority,
        with the key ``<parent key>/linked-<n>``.
        """
        parent = self.get(parent_attempt_id)
        children = sum(1 for a in self.attempts() if a.parent_attempt_id == parent_attempt_id)
        attempt, _ = self.record_intent(
            task_id=parent.task_id,
            tool_name=parent.tool_name,
            args=args,
            idempotency_key=f"{parent.idempotency_key}/linked-{children + 1}",
            authority=authority,
            actor=actor,
            parent_attempt_id=parent_attempt_id,
            state=State.MANUAL_REVIEW,
            reason=reason,
        )
        return attempt

    # -- reads ------------------------------------------------------------------------------

    def get(self, attempt_id: str) -> Attempt:
        """The attempt with this id, or :class:`UnknownAttempt`."""
        return self._read_attempt(self._connection(), attempt_id)

    def find(self, idempotency_key: str) -> Attempt | None:
        """The attempt with this idempotency key, or None."""
        row = (
            self._connection()
            .execute("SELECT * FROM attempts WHERE idempotency_key = ?", (idempotency_key,))
            .fetchone()
        )
        return None if row is None else _attempt_from_row(row)

    def attempts(self, *, task_id: str | None = None) -> list[Attempt]:
        """Every attempt (of one task, if given), oldest first."""
        sql = "SELECT * FROM attempts"
        params: tuple[str, ...] = ()
        if task_id is not None:
            sql, params = sql + " WHERE task_id = ?", (task_id,)
        rows = self._connection().execute(sql + f" ORDER BY created_at, {self._ROW_ORDER}", params)
        return [_attempt_from_row(row) for row in rows]

    def events(self, attempt_id: str | None = None) -> list[Event]:
        """The event log (of one attempt, if given), in the order it was written."""
        sql = "SELECT * FROM events"
        params: tuple[str, ...] = ()
        if attempt_id is not None:
            sql, params = sql + " WHERE attempt_id = ?", (attempt_id,)
        rows = self._connection().execute(sql + " ORDER BY event_id", params)
        return [
            Event(
                event_id=row["event_id"],
                attempt_id=row["attempt_id"],
                from_state=None if row["from_state"] is None else State(row["from_state"]),
                to_state=State(row["to_state"]),
                at=row["at"],
                actor=row["actor"],
                reason=row["reason"],
            )
            for row in rows
        ]

    def queue(self, *, include_review: bool = False) -> list[QueueEntry]:
        """The operator's queue: every in-flight attempt (and MANUAL_REVIEW ones if asked),
        oldest first, with owner, age, backoff, args hash and provider request id."""
        states = set(IN_FLIGHT_STATES) | ({State.MANUAL_REVIEW} if include_review else set())
        marks = ", ".join("?" for _ in states)
        now = self._clock()
        rows = self._connection().execute(
            f"SELECT * FROM attempts WHERE state IN ({marks}) "
            f"ORDER BY created_at, {self._ROW_ORDER}",
            [state.value for state in states],
        )
        return [
            QueueEntry(
                attempt_id=row["attempt_id"],
                task_id=row["task_id"],
                tool_name=row["tool_name"],
                state=State(row["state"]),
                owner=row["owner"],
                lease_expires_at=row["lease_expires_at"],
                age=now - row["created_at"],
                next_attempt_at=row["next_attempt_at"],
                args_hash=row["args_hash"],
                provider_request_id=row["provider_request_id"],
            )
            for row in rows
        ]

    def backup(self, path: str | os.PathLike[str]) -> Path:
        """Copy the whole ledger to ``path`` through SQLite's online backup API.

        The copy is consistent even while other processes write. An existing file at ``path``
        is refused rather than overwritten.
        """
        target = Path(path)
        if target.exists():
            raise LedgerError(
                f"{target} already exists; back up to a new path so no backup is overwritten."
            )
        partial = target.with_name(target.name + ".partial")
        try:
            dest = sqlite3.connect(partial)
            try:
                self._connection().backup(dest)
            finally:
                dest.close()
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        return target
