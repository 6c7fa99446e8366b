"""A journal that starts with objects made elsewhere, and a journal's objects written out.

:func:`seed` records each object as an effect with the request that made it, under the key
given (its tenant, scopes and label name who made it), so lookups, searches and lists find
it and the journal's ground truth counts it. An object's idempotency key, when the export
knows it, is stored as done with the object as its saved answer, and with its parameters
unknown (:data:`~fake_providers._exports.IMPORTED`): a request with that key is answered
with the object, whatever it sends, as the real provider would answer the request that made
it. :func:`export` writes the fakes' own export format (``_exports``).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._exports import EXPORT_FORMAT, IMPORTED, Exported, ExportError
from ._journal import Journal, next_counter
from ._keys import ApiKey

__all__ = ["export", "seed"]


def seed(
    journal: Journal,
    objects: Iterable[Exported],
    *,
    key: ApiKey,
    at: float,
    provider: str,
    request_id_prefix: str,
    request_id_header: str,
    hash_of: Callable[[Mapping[str, Any]], str | None],
    then: Callable[[sqlite3.Connection, Sequence[Exported]], None],
) -> list[str]:
    """See :meth:`Provider.seed` (``then``: its ``seeded`` hook, in the transaction)."""
    objects = list(objects)
    ids = []
    with journal.transaction() as conn:
        for obj in objects:
            taken = conn.execute(
                "SELECT request_id FROM effects WHERE object_type=? AND object_id=?",
                (obj.object_type, obj.object_id),
            ).fetchone()
            if taken is not None:
                raise ExportError(
                    f"{provider}: {obj.object_type} {obj.object_id!r} is given twice; "
                    "each object may appear once in the exports."
                )
            phash = hash_of(dict(obj.body)) or ""
            seq = next_counter(conn, "request")
            request_id = f"{request_id_prefix}{seq:014d}"
            aliases = json.dumps(list(dict.fromkeys((obj.object_id, *obj.aliases))))
            scopes = json.dumps(sorted(key.scopes))
            row = {
                "seq": seq, "request_id": request_id, "time": at, "method": "IMPORT",
                "path": f"/(exported {obj.object_type})", "operation": obj.operation,
                "kind": "write", "tenant_id": key.tenant_id, "key_id": key.key_id,
                "scopes": scopes, "label": key.label, "idempotency_key": obj.idempotency_key,
                "correlation_id": None, "attempt_id": None,
                "operation_key": obj.idempotency_key or phash, "payload_hash": phash,
                "args_hash": None, "status": 200, "effect_applied": 1,
                "object_id": obj.object_id, "aliases": aliases, "fault": None, "replayed": 0,
                "mono_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
            }
            conn.execute(
                f"INSERT INTO requests({', '.join(row)}) "
                f"VALUES ({', '.join(':' + name for name in row)})",
                row,
            )
            conn.execute(
                "INSERT INTO effects(time, operation, operation_key, object_type, object_id, "
                "tenant_id, key_id, scopes, label, idempotency_key, correlation_id, "
                "attempt_id, payload_hash, args_hash, request_id, aliases, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, NULL, ?, ?, ?)",
                (
                    at, obj.operation, obj.idempotency_key or phash, obj.object_type,
                    obj.object_id, key.tenant_id, key.key_id, scopes, key.label,
                    obj.idempotency_key, phash, request_id, aliases, json.dumps(obj.body),
                ),
            )
            if obj.idempotency_key:
                headers = {"Content-Type": "application/json", request_id_header: request_id}
                conn.execute(
                    "INSERT OR REPLACE INTO idempotency(tenant_id, key, params_hash, state, "
                    "created_at, status, headers, body) VALUES (?, ?, ?, 'done', ?, 200, ?, ?)",
                    (key.tenant_id, obj.idempotency_key, IMPORTED, at, json.dumps(headers),
                     json.dumps(obj.body).encode("utf-8")),
                )
            ids.append(request_id)
        then(conn, objects)
    return ids


def export(journal: Journal, *, provider: str) -> dict[str, Any]:
    """See :meth:`Provider.export`."""
    objects = [
        {
            "object_type": effect.object_type,
            "object_id": effect.object_id,
            "operation": effect.operation,
            "body": effect.body,
            "idempotency_key": effect.idempotency_key,
            "aliases": list(effect.aliases),
        }
        for effect in journal.effects()
    ]
    return {"format": EXPORT_FORMAT, "provider": provider, "objects": objects}
