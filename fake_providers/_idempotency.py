"""Idempotency keys as Stripe implements them, for any provider that honours a key header.

A write that presents a key claims it for its tenant (:func:`reserve`) before it executes:

- the same key with the same parameters, once the first request finished: the saved response
  is replayed byte for byte (``Idempotent-Replayed: true``, ``Original-Request``), with no
  new effect;
- with other parameters: refused (the provider's 400);
- while the first request is still in flight: refused (409), nothing stored; a key whose
  owner process died (a killed worker) is taken over, since its effect and saved response
  commit together, so nothing was applied under it.

The response is saved in the same transaction as the effect (:func:`saver` as the reply's
``on_commit``); a request that fails validation releases the key (:func:`release`). Keys are
scoped per tenant and forgotten after ``retention`` harness seconds.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable

from ._exports import IMPORTED
from ._provider import Call, Provider, Reply

__all__ = ["owner_alive", "process_start", "release", "reserve", "saver"]


def process_start(pid: int) -> str | None:
    """The start time of a live process (Linux ``/proc``), or None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def owner_alive(pid: int, start: str | None) -> bool:
    if os.path.isdir("/proc"):
        return start is not None and process_start(pid) == start
    try:  # pragma: no cover - non-Linux fallback: the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:  # pragma: no cover
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True  # pragma: no cover


def reserve(
    provider: Provider,
    call: Call,
    key: str,
    params_hash: str,
    *,
    in_use: Callable[[str], Reply],
    mismatch: Callable[[str], Reply],
) -> Reply | None:
    """Claim ``key`` for this request (``None``: go on and execute), or the answer now: the
    saved response replayed (``replayed=True``), ``mismatch(message)`` for a key first used
    with other parameters, ``in_use(message)`` while its first request is in flight."""
    me, my_start = os.getpid(), process_start(os.getpid())
    with provider.journal.transaction() as conn:
        conn.execute(
            "DELETE FROM idempotency WHERE tenant_id=? AND created_at<?",
            (call.tenant_id, call.now - call.settings.retention),
        )
        row = conn.execute(
            "SELECT params_hash, state, owner_pid, owner_start, status, headers, body "
            "FROM idempotency WHERE tenant_id=? AND key=?",
            (call.tenant_id, key),
        ).fetchone()
        if row is None:
            conn.execute(
                "INSERT INTO idempotency(tenant_id, key, params_hash, state, owner_pid, "
                "owner_start, created_at) VALUES (?, ?, ?, 'in_flight', ?, ?, ?)",
                (call.tenant_id, key, params_hash, me, my_start, call.now),
            )
            return None
        if row["state"] == "in_flight":
            if owner_alive(row["owner_pid"], row["owner_start"]):
                return in_use(
                    "There is currently another in-progress request using this idempotency "
                    f"key ({key!r}). Please try again later."
                )
            conn.execute(
                "UPDATE idempotency SET params_hash=?, owner_pid=?, owner_start=?, "
                "created_at=? WHERE tenant_id=? AND key=?",
                (params_hash, me, my_start, call.now, call.tenant_id, key),
            )
            return None
        if row["params_hash"] not in (params_hash, IMPORTED):
            return mismatch(
                "Keys for idempotent requests can only be used with the same parameters they "
                f"were first used with. Try using a key other than {key!r} if you meant to "
                "execute a different request."
            )
        headers = dict(json.loads(row["headers"]))
        headers["Idempotent-Replayed"] = "true"
        headers["Original-Request"] = headers.get(provider.request_id_header, "")
        return Reply(row["status"], bytes(row["body"]), headers, replayed=True)


def release(provider: Provider, call: Call, key: str) -> None:
    """Give up a key this process claimed (the request was refused before executing)."""
    with provider.journal.transaction() as conn:
        conn.execute(
            "DELETE FROM idempotency WHERE tenant_id=? AND key=? AND state='in_flight' "
            "AND owner_pid=?",
            (call.tenant_id, key, os.getpid()),
        )


def saver(call: Call, key: str) -> Callable[[sqlite3.Connection, Reply], None]:
    """The reply's ``on_commit``: save the final response under ``key``, with the effect."""
    tenant = call.tenant_id

    def save(conn: sqlite3.Connection, final: Reply) -> None:
        conn.execute(
            "UPDATE idempotency SET state='done', owner_pid=NULL, owner_start=NULL, "
            "status=?, headers=?, body=? WHERE tenant_id=? AND key=?",
            (final.status, json.dumps(final.headers), final.body, tenant, key),
        )

    return save
