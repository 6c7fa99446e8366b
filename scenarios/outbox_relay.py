"""An order service with a transactional outbox, and the relay that publishes it.

``place_order`` writes the order and an outbox row (the event ``order.placed``) in one SQLite
transaction: either both are there or neither. ``relay`` then publishes each unsent outbox row
to the event broker (an HTTP API here: ``POST /v1/events``) and marks it sent. A worker runs
both, one after the other; the relay also runs on its own (``recover``: on a schedule, after a
restart), so an event whose worker died is published by the next run.

The relay's two ends are the classic window: killed after the publish and before the mark,
the next run publishes the row again. ``dedupe=True`` sends the outbox row's id as the event's
``Idempotency-Key``, which the broker honours (Kafka's idempotent producer, a consumer that
dedupes by message id), so the consumer sees one event; ``dedupe=False`` publishes a second
``order.placed``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER)",
    "CREATE TABLE IF NOT EXISTS outbox (id TEXT PRIMARY KEY, topic TEXT, body TEXT, "
    "sent INTEGER NOT NULL DEFAULT 0)",
)


def _open(db: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        for statement in SCHEMA:
            conn.execute(statement)
    return conn


def place_order(order: dict[str, Any], *, db: str | Path) -> None:
    """The order and its event, in one transaction (a second delivery adds nothing)."""
    conn = _open(db)
    try:
        with conn:
            conn.execute("INSERT OR IGNORE INTO orders VALUES (?, ?)",
                         (order["task_id"], order["amount"]))
            conn.execute(
                "INSERT OR IGNORE INTO outbox (id, topic, body) VALUES (?, 'order.placed', ?)",
                (f"{order['task_id']}:placed", f'{{"order": "{order["task_id"]}"}}'),
            )
    finally:
        conn.close()


def relay(*, db: str | Path, api_url: str, api_key: str, dedupe: bool = True) -> int:
    """Publish every unsent outbox row, then mark it sent; returns how many were published."""
    conn = _open(db)
    published = 0
    try:
        rows = conn.execute(
            "SELECT id, topic, body FROM outbox WHERE sent = 0 ORDER BY id"
        ).fetchall()
        for row_id, topic, body in rows:
            headers = {"Authorization": f"Bearer {api_key}"}
            if dedupe:
                headers["Idempotency-Key"] = row_id
            httpx.post(f"{api_url}/v1/events", headers=headers, timeout=10.0,
                       json={"topic": topic, "body": body}).raise_for_status()
            with conn:
                conn.execute("UPDATE outbox SET sent = 1 WHERE id = ?", (row_id,))
            published += 1
    finally:
        conn.close()
    return published
