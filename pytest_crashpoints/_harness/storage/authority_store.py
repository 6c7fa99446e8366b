"""The authority store (E): the current authority of each task, outside the workers.

A SQLite file in the run directory holds an append-only table of changes; the current authority
of a task is its latest change. The harness changes it between steps (revoke, narrow the
credential scope, bump the policy version, move the task to another tenant); workers and
recovery read the current authority from it; every change is kept with its harness time, so a
report can show what was in force when.

Each call opens its own connection, so a store object is safe to use on both sides of a fork
and pickles as its path and clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..._ledger.authority import Authority, format_scope, parse_scope
from ...errors import HarnessUsageError, UnknownTask

__all__ = ["AuthorityChange", "AuthorityStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS authority_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    at REAL NOT NULL,
    tenant_id TEXT,
    credential_scope TEXT,
    policy_version TEXT,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS authority_changes_task ON authority_changes (task_id, seq);
"""


@dataclasses.dataclass(frozen=True)
class AuthorityChange:
    """One change: from harness time ``at`` on, ``task_id`` runs under ``authority``
    (``None``: revoked, nothing may be done for the task)."""

    seq: int
    task_id: str
    at: float
    authority: Authority | None
    reason: str


class AuthorityStore:
    """The authority of every task of a run. ``clock`` stamps changes with harness time."""

    def __init__(
        self, path: str | os.PathLike[str], *, clock: Callable[[], float], create: bool = True
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        if not create:
            return  # the harness created it when it set the case up
        db = sqlite3.connect(self.path, timeout=30.0)
        try:
            db.executescript(_SCHEMA)
        finally:
            db.close()

    def set(self, task_id: str, authority: Authority, *, reason: str = "granted") -> None:
        """From now on, ``task_id`` runs under ``authority``."""
        self._append(task_id, authority, reason)

    def revoke(self, task_id: str, *, reason: str = "revoked") -> None:
        """From now on, nothing may be done for ``task_id``."""
        self._require(task_id)
        self._append(task_id, None, reason)

    def narrow_scope(
        self, task_id: str, scope: str | Iterable[str], *, reason: str = "scope narrowed"
    ) -> Authority:
        """Keep only ``scope`` of the task's credential scope; return the new authority.

        Raises :class:`HarnessUsageError` if ``scope`` is not within the current scope (that
        would widen it) or the task is revoked.
        """
        current = self._current_live(task_id, "narrow its scope")
        narrowed = parse_scope(scope)
        if not narrowed <= current.credential_scope:
            raise HarnessUsageError(
                f"cannot narrow the scope of task {task_id!r} to {format_scope(narrowed)!r}: "
                f"it is not within {current.scope_text!r}. Use set() to grant a different "
                "authority on purpose."
            )
        return self._replace(task_id, current, reason, credential_scope=narrowed)

    def bump_policy(
        self, task_id: str, policy_version: str, *, reason: str = "policy version bumped"
    ) -> Authority:
        """Put the task under ``policy_version``; return the new authority."""
        current = self._current_live(task_id, "bump its policy")
        return self._replace(task_id, current, reason, policy_version=policy_version)

    def move_tenant(
        self, task_id: str, tenant_id: str, *, reason: str = "moved to another tenant"
    ) -> Authority:
        """Move the task to ``tenant_id``; return the new authority."""
        current = self._current_live(task_id, "move it")
        return self._replace(task_id, current, reason, tenant_id=tenant_id)

    def current(self, task_id: str) -> Authority | None:
        """The task's authority now; ``None`` if it was revoked.

        Raises :class:`UnknownTask` if no authority was ever set for it.
        """
        with self._connect() as db:
            row = db.execute(
                "SELECT tenant_id, credential_scope, policy_version FROM authority_changes "
                "WHERE task_id = ? ORDER BY seq DESC LIMIT 1",
                (task_id,),
            ).fetchone()
        if row is None:
            raise UnknownTask(task_id)
        return _authority(row)

    def changes(self, task_id: str | None = None) -> list[AuthorityChange]:
        """Every change, oldest first (of one task, or of all)."""
        query = (
            "SELECT seq, task_id, at, tenant_id, credential_scope, policy_version, reason "
            "FROM authority_changes"
        )
        params: tuple[str, ...] = ()
        if task_id is not None:
            query += " WHERE task_id = ?"
            params = (task_id,)
        with self._connect() as db:
            rows = db.execute(query + " ORDER BY seq", params).fetchall()
        return [
            AuthorityChange(seq, task, at, _authority((tenant, scope, policy)), reason)
            for seq, task, at, tenant, scope, policy, reason in rows
        ]

    def __reduce__(self) -> tuple[object, ...]:
        return (_reopen, (str(self.path), self._clock))

    def _require(self, task_id: str) -> None:
        self.current(task_id)

    def _current_live(self, task_id: str, what: str) -> Authority:
        current = self.current(task_id)
        if current is None:
            raise HarnessUsageError(
                f"task {task_id!r} is revoked, so there is no authority to {what}; set() a new "
                "authority first."
            )
        return current

    def _replace(
        self, task_id: str, current: Authority, reason: str, **change: object
    ) -> Authority:
        new = dataclasses.replace(current, **change)  # type: ignore[arg-type]
        self._append(task_id, new, reason)
        return new

    def _append(self, task_id: str, authority: Authority | None, reason: str) -> None:
        values = (
            (None, None, None)
            if authority is None
            else (authority.tenant_id, authority.scope_text, authority.policy_version)
        )
        with self._connect(write=True) as db:
            db.execute(
                "INSERT INTO authority_changes "
                "(task_id, at, tenant_id, credential_scope, policy_version, reason) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (task_id, float(self._clock()), *values, reason),
            )

    @contextlib.contextmanager
    def _connect(self, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            # Harness bookkeeping: a process kill does not lose the page cache, so no sync.
            db.execute("PRAGMA synchronous=OFF")
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()


def _authority(row: tuple[str | None, str | None, str | None]) -> Authority | None:
    tenant, scope, policy = row
    if tenant is None or policy is None:
        return None
    return Authority(tenant, parse_scope(scope or ""), policy)


def _reopen(path: str, clock: Callable[[], float]) -> AuthorityStore:
    return AuthorityStore(path, clock=clock)
