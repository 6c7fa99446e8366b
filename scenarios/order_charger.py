"""An order charger with its own SQLite tables, calling a Stripe-style API with plain httpx.

It charges one order per message, with the provider's ``Idempotency-Key``. What it uses as the
key is the whole difference between safe and broken:

- ``"stable"``: a key derived from the order (``order:<id>:charge``), kept in the order's row.
  A redelivered order is charged again with the same key, and the provider replays the first
  answer instead of charging twice.
- ``"fresh-recorded"``: a new random key for every try, each try a row of its own
  (``charge_attempts``) that records its key;
- ``"fresh-overwritten"``: a new random key for every try, written over the last one in the
  order's row;
- ``"fresh-unrecorded"``: a new random key for every try, kept nowhere (what an SDK that makes
  up a key per request does when it is not given one).

With a fresh key, a try killed after the provider charged (B) and delivered again charges the
customer twice: the provider sees two different keys, so two charges. Nothing of the harness
is in this code; a test changes only the API URL, the key and the database path.

``log_commit_errors=True`` is another bug: when recording the charge fails (a full disk, an I/O
error), the charger logs it and reports the order charged. The message is acknowledged, and
the order stays ``pending`` for good: nobody will ever finish it. Letting the error raise
gets the order delivered again, and the stable key charges nothing twice.

``synchronous="NORMAL"`` (with WAL: commits are not synced until a checkpoint) loses the
order's rows on a power loss; the stable key survives it, since it is derived from the order
again, not read back from the lost row.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

KeyPolicy = Literal["stable", "fresh-recorded", "fresh-overwritten", "fresh-unrecorded"]

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER, status TEXT, "
    "idem_key TEXT, charge_id TEXT)",
    "CREATE TABLE IF NOT EXISTS charge_attempts (idem_key TEXT PRIMARY KEY, order_id TEXT, "
    "status TEXT, charge_id TEXT)",
)


def _open(db: str | Path, synchronous: str | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    if synchronous is not None:
        conn.execute(f"PRAGMA synchronous={synchronous}")
    with conn:
        for statement in SCHEMA:
            conn.execute(statement)
    return conn


def charge_order(
    order: Mapping[str, Any],
    *,
    db: str | Path,
    api_url: str,
    api_key: str,
    keys: KeyPolicy = "stable",
    log_commit_errors: bool = False,
    synchronous: str | None = None,
) -> str:
    """Charge ``order`` (``task_id``, ``amount``, ``customer``) once; return its status."""
    order_id = str(order["task_id"])
    conn = _open(db, synchronous)
    try:
        row = conn.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()
        if row is not None and row[0] == "charged":
            return "charged"
        with conn:
            conn.execute(
                "INSERT OR IGNORE INTO orders VALUES (?, ?, 'pending', NULL, NULL)",
                (order_id, order["amount"]),
            )
        key = f"order:{order_id}:charge" if keys == "stable" else uuid.uuid4().hex
        with conn:
            if keys in ("stable", "fresh-overwritten"):
                conn.execute("UPDATE orders SET idem_key = ? WHERE id = ?", (key, order_id))
            elif keys == "fresh-recorded":
                conn.execute(
                    "INSERT INTO charge_attempts VALUES (?, ?, 'pending', NULL)", (key, order_id)
                )
        response = httpx.post(
            f"{api_url}/v1/charges",
            headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": key},
            data={"amount": str(order["amount"]), "currency": "eur", "customer": order["customer"]},
            timeout=10.0,
        )
        response.raise_for_status()
        charge_id = response.json()["id"]
        try:
            with conn:
                conn.execute(
                    "UPDATE orders SET status = 'charged', charge_id = ? WHERE id = ?",
                    (charge_id, order_id),
                )
                conn.execute(
                    "UPDATE charge_attempts SET status = 'charged', charge_id = ? "
                    "WHERE idem_key = ?",
                    (charge_id, key),
                )
        except sqlite3.OperationalError:
            if not log_commit_errors:
                raise
            logging.getLogger(__name__).warning("order %s charged, not recorded", order_id)
        return "charged"
    finally:
        conn.close()
