"""The provider journal: external reality, on disk, surviving the worker's death.

One SQLite file per provider (never the ledger's file). It holds what the provider did (every
request and every applied effect) and what the harness told it to do (keys, settings, faults).
Everything lives in the file, not in memory, because the in-process handler runs inside forked
worker processes while the harness flips switches from the parent.

Durability: WAL, a busy timeout, and write transactions taken with ``BEGIN IMMEDIATE``. An
accepted effect is committed before any response leaves the provider. Commits are not synced
to the disk (``synchronous=OFF``): a committed transaction is in the operating system's page
cache the moment ``COMMIT`` returns, and a killed process does not take the page cache with
it, so the journal is exactly as durable as the crashes it witnesses need. (A power loss or
a kernel crash could lose it; nothing here simulates those.) A sync per request cost several
milliseconds on a shared disk, for nothing a process crash can observe.
Connections are opened lazily per process: a connection inherited over ``fork`` is never used
(nor closed) in the child.

Attribution: every request and effect row carries the ``label`` of the derived key the request
presented (see ``_keys``), which names the process that sent it, and the ``aliases`` of the
object it created or read: every string by which the provider's API names that object to its
clients (an id, a number, a URL), so that whatever a ledger stored of an answer links it to the
effect. Every request row also records when it was recorded on the machine's monotonic clock
(``mono_ns``), which orders the requests of several providers within one harness second. The
journal's schema version is stored in the file; a journal written by another
version is refused (journals are per-test files: start a new one).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["EffectRecord", "Journal", "RequestRecord"]

SCHEMA_VERSION = 4

_INHERITED: list[sqlite3.Connection] = []

_META = "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL)"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS keys(
    secret TEXT PRIMARY KEY, key_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
    scopes TEXT NOT NULL, revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS faults(
    kind TEXT PRIMARY KEY, remaining INTEGER, applies_to TEXT NOT NULL, value REAL,
    skip INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS requests(
    seq INTEGER PRIMARY KEY, request_id TEXT NOT NULL UNIQUE, time REAL NOT NULL,
    method TEXT NOT NULL, path TEXT NOT NULL, operation TEXT, kind TEXT,
    tenant_id TEXT, key_id TEXT, scopes TEXT, label TEXT,
    idempotency_key TEXT, correlation_id TEXT, attempt_id TEXT, operation_key TEXT,
    payload_hash TEXT, args_hash TEXT,
    status INTEGER, effect_applied INTEGER NOT NULL, object_id TEXT,
    aliases TEXT NOT NULL DEFAULT '[]', fault TEXT,
    replayed INTEGER NOT NULL DEFAULT 0, mono_ns INTEGER, world_limit TEXT);
CREATE INDEX IF NOT EXISTS requests_operation_key ON requests(operation_key);
CREATE INDEX IF NOT EXISTS requests_attempt ON requests(attempt_id);
CREATE INDEX IF NOT EXISTS requests_label ON requests(label);
CREATE TABLE IF NOT EXISTS effects(
    seq INTEGER PRIMARY KEY, time REAL NOT NULL, operation TEXT NOT NULL,
    operation_key TEXT NOT NULL, object_type TEXT NOT NULL, object_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL, key_id TEXT NOT NULL, scopes TEXT NOT NULL, label TEXT,
    idempotency_key TEXT, correlation_id TEXT, attempt_id TEXT,
    payload_hash TEXT NOT NULL, args_hash TEXT, request_id TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]', body TEXT NOT NULL,
    UNIQUE(object_type, object_id));
CREATE INDEX IF NOT EXISTS effects_operation_key ON effects(operation_key);
CREATE INDEX IF NOT EXISTS effects_label ON effects(label);
CREATE TABLE IF NOT EXISTS idempotency(
    tenant_id TEXT NOT NULL, key TEXT NOT NULL, params_hash TEXT NOT NULL,
    state TEXT NOT NULL, owner_pid INTEGER, owner_start TEXT, created_at REAL NOT NULL,
    status INTEGER, headers TEXT, body BLOB,
    PRIMARY KEY(tenant_id, key));
"""


@dataclass(frozen=True)
class RequestRecord:
    """One request the provider received, whatever its outcome.

    ``status`` is None when no response was produced (a lookup timeout); ``fault`` names the
    injected fault that shaped the answer, if any (``"response_lost"`` means the effect was
    applied and the client saw a connection failure). ``scopes`` are the scopes of the key
    presented, at the time of the request; ``tenant_id`` is the key's tenant, also when the key
    was revoked and the request refused (None for an unknown key). ``label`` is the label of the
    derived key the request presented (None for a plain key, an unknown key or none): it names
    the process that sent the request. ``aliases`` are the names the provider's API gives the
    object the request created or read by id (empty for a refusal, a search, a list, or a
    request that names no object); see each provider for what they are. ``mono_ns`` is when
    the request was recorded on the machine's monotonic clock (the same for every process:
    it orders requests to several providers within one harness second). ``world_limit`` says
    what of the request the fake does not serve (a route, a method, a parameter, a media type
    its description lacks), None for a request it serves: the simulated world ends there.
    """

    seq: int
    request_id: str
    time: float
    method: str
    path: str
    operation: str | None
    kind: str | None
    tenant_id: str | None
    key_id: str | None
    scopes: tuple[str, ...] | None
    label: str | None
    idempotency_key: str | None
    correlation_id: str | None
    attempt_id: str | None
    operation_key: str | None
    payload_hash: str | None
    args_hash: str | None
    status: int | None
    effect_applied: bool
    object_id: str | None
    aliases: tuple[str, ...]
    fault: str | None
    replayed: bool
    mono_ns: int | None = None
    world_limit: str | None = None


@dataclass(frozen=True)
class EffectRecord:
    """One effect the provider applied (a charge made, an email sent, an issue opened, a deploy).

    ``operation_key`` names the logical operation: the idempotency key for payments, otherwise
    the correlation id, or the payload hash when the client sent no correlation id.
    ``time`` is the harness time the effect was committed. ``body`` is the stored object.
    ``label`` is the label of the derived key that applied it (None for a plain key): the
    process that sent the request. ``aliases`` are the names the provider's API gives the
    object, as the client that created it saw them (the same as its request's aliases).
    """

    seq: int
    time: float
    operation: str
    operation_key: str
    object_type: str
    object_id: str
    tenant_id: str
    key_id: str
    scopes: tuple[str, ...]
    label: str | None
    idempotency_key: str | None
    correlation_id: str | None
    attempt_id: str | None
    payload_hash: str
    args_hash: str | None
    request_id: str
    aliases: tuple[str, ...]
    body: dict[str, Any]


#: A record of a journal row (see :func:`_record`).
_Record = TypeVar("_Record", RequestRecord, EffectRecord)


def _scopes(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(json.loads(text))


def _record(kind: type[_Record], row: sqlite3.Row, **decoded: Any) -> _Record:
    """The record ``kind`` of a journal row: each field is the column of its name, but for
    those given ``decoded`` (columns stored as JSON text or as integer flags)."""
    columns = {f.name: row[f.name] for f in fields(kind) if f.name not in decoded}
    return kind(**columns, **decoded)


def _request_record(row: sqlite3.Row) -> RequestRecord:
    return _record(
        RequestRecord,
        row,
        scopes=_scopes(row["scopes"]),
        effect_applied=bool(row["effect_applied"]),
        aliases=tuple(json.loads(row["aliases"])),
        replayed=bool(row["replayed"]),
    )


def _effect_record(row: sqlite3.Row) -> EffectRecord:
    return _record(
        EffectRecord,
        row,
        scopes=tuple(json.loads(row["scopes"])),
        aliases=tuple(json.loads(row["aliases"])),
        body=json.loads(row["body"]),
    )


class Journal:
    """A provider's journal file: durable ground truth and the harness's control panel.

    Safe to use from several threads and from forked processes (each process opens its own
    connections). Read it from the harness with the same class: ``Journal(path, provider=...)``.
    """

    def __init__(self, path: str | os.PathLike[str], *, provider: str) -> None:
        self.path = Path(path)
        self.provider = provider
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        try:
            self._create_schema(provider)
        except BaseException:
            self.close()
            raise

    def _create_schema(self, provider: str) -> None:
        with self.transaction() as conn:
            # Check whose journal this is, and of which version, before touching its tables:
            # another version's tables may lack columns this version indexes.
            conn.execute(_META)
            meta = dict(conn.execute("SELECT name, value FROM meta").fetchall())
            if "provider" in meta:
                if meta["provider"] != provider:
                    raise ValueError(
                        f"{self.path} is the journal of the {meta['provider']!r} provider, not "
                        f"{provider!r}; give every provider its own journal file."
                    )
                if meta.get("schema") != str(SCHEMA_VERSION):
                    raise ValueError(
                        f"{self.path} is a {provider} journal of schema version "
                        f"{meta.get('schema', 'unknown')}, but this version of fake_providers "
                        f"reads version {SCHEMA_VERSION}; nothing was changed. Journals are "
                        "per-test files: give the provider a new journal file."
                    )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            if "provider" not in meta:
                conn.execute("INSERT INTO meta VALUES ('provider', ?)", (provider,))
                conn.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))

    # -- connections ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _forget_inherited(self) -> None:
        # After fork, the parent's connections (and a lock a parent thread may have held) are
        # not ours: start afresh. The inherited connections are kept referenced, never used and
        # never closed here: closing an inherited SQLite connection in the child is as unsafe as
        # using it.
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            _INHERITED.extend(self._idle)
            self._idle = []

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection of this process, in autocommit mode, returned to the pool afterwards."""
        self._forget_inherited()
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.rollback()
            with self._lock:
                self._idle.append(conn)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, rolled back on error."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this process's idle connections (the journal stays usable; it reopens lazily)."""
        self._forget_inherited()
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- queries for the invariant checks ------------------------------------------------------

    def requests(
        self,
        *,
        operation_key: str | None = None,
        attempt_id: str | None = None,
        tenant_id: str | None = None,
        idempotency_key: str | None = None,
        correlation_id: str | None = None,
        request_id: str | None = None,
        label: str | None = None,
    ) -> list[RequestRecord]:
        """Every request matching all the given filters, in arrival order.

        ``label`` selects the requests that presented a key derived for that label.
        """
        rows = self._select(
            "requests",
            operation_key=operation_key,
            attempt_id=attempt_id,
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            correlation_id=correlation_id,
            request_id=request_id,
            label=label,
        )
        return [_request_record(r) for r in rows]

    def effects(
        self,
        *,
        operation_key: str | None = None,
        attempt_id: str | None = None,
        tenant_id: str | None = None,
        payload_hash: str | None = None,
        args_hash: str | None = None,
        object_id: str | None = None,
        label: str | None = None,
    ) -> list[EffectRecord]:
        """Every applied effect matching all the given filters, in commit order.

        ``label`` selects the effects applied by a key derived for that label.
        """
        rows = self._select(
            "effects",
            operation_key=operation_key,
            attempt_id=attempt_id,
            tenant_id=tenant_id,
            payload_hash=payload_hash,
            args_hash=args_hash,
            object_id=object_id,
            label=label,
        )
        return [_effect_record(r) for r in rows]

    def _select(self, table: str, **given: str | None) -> list[Any]:
        """The rows of ``table`` whose columns equal every given value that is not None, in
        ``seq`` order."""
        clauses = [f"{name}=?" for name, value in given.items() if value is not None]
        args = [value for value in given.values() if value is not None]
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        with self.connection() as conn:
            return conn.execute(f"SELECT * FROM {table}{where} ORDER BY seq", args).fetchall()

    def effect_counts(self) -> dict[str, int]:
        """Number of applied effects per logical operation (``operation_key``)."""
        with self.connection() as conn:
            rows = conn.execute(
                "SELECT operation_key, COUNT(*) FROM effects GROUP BY operation_key"
            ).fetchall()
        return {r[0]: r[1] for r in rows}


def next_counter(conn: sqlite3.Connection, name: str) -> int:
    """Increment and return the counter ``name`` (inside the caller's write transaction)."""
    row = conn.execute(
        "INSERT INTO counters(name, value) VALUES (?, 1) "
        "ON CONFLICT(name) DO UPDATE SET value=value+1 RETURNING value",
        (name,),
    ).fetchone()
    return int(row[0])
