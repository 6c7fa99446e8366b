"""An installment charger: one order, two charges (the deposit, then the balance) at a
Stripe-style API with plain httpx, each under a key derived from the order and recorded in a
SQLite row of its own. Nothing of the harness is in this code.

Its credentials come from ``credentials(provider)``: the integration's account and API key as
they are now, or ``None`` once an operator revoked it. Each row records the account it charges;
a ``pending`` row left for another account (the integration moved) is parked for review, since
the provider's idempotency keys are per account. When it asks is the whole difference:

- ``ask="each"``: before each charge. An integration revoked (or narrowed: the provider then
  answers 403) between the deposit and the balance parks the balance for review.
- ``ask="once"``: once, when the order arrives, and both charges go out under that key. An
  integration revoked while the deposit is being charged does not stop the balance: it goes
  out under credentials the task no longer holds (invariant 4).

A redelivered order charges a ``pending`` row of the same account again under the same key: the
provider replays its first answer instead of charging twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

Ask = Literal["each", "once"]
PARTS = ("deposit", "balance")
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS charges (id TEXT PRIMARY KEY, order_id TEXT, part TEXT, "
    "amount INTEGER, account TEXT, status TEXT, idem_key TEXT, charge_id TEXT)"
)
#: An integration's account at the provider and its API key.
Credentials = tuple[str, str]


def charge_installments(
    order: Mapping[str, Any],
    *,
    db: str | Path,
    api_url: str,
    credentials: Callable[[str], Credentials | None],
    ask: Ask = "each",
) -> str:
    """Charge ``order`` (``task_id``, ``deposit``, ``balance``, ``customer``): ``"charged"``,
    or ``"review"`` when the integration lost its authority on the way."""
    order_id = str(order["task_id"])
    conn = sqlite3.connect(db, timeout=10.0)
    try:
        with conn:
            conn.execute(SCHEMA)
        once = credentials("payments") if ask == "once" else None
        for part in PARTS:
            row_id = f"{order_id}:{part}"
            row = conn.execute(
                "SELECT status, account FROM charges WHERE id = ?", (row_id,)
            ).fetchone()
            if row is not None and row[0] == "review":
                return "review"
            if row is not None and row[0] == "charged":
                continue
            held = once if ask == "once" else credentials("payments")
            if held is None:  # revoked: nothing may be charged any more
                return _park(conn, row_id, order_id, part, order[part])
            account, api_key = held
            if row is not None and row[1] != account:  # maybe charged at the old account
                return _park(conn, row_id, order_id, part, order[part])
            idem_key = f"order:{order_id}:{part}"
            with conn:
                conn.execute(
                    "INSERT OR IGNORE INTO charges VALUES (?, ?, ?, ?, ?, 'pending', ?, NULL)",
                    (row_id, order_id, part, order[part], account, idem_key),
                )
            response = httpx.post(
                f"{api_url}/v1/charges",
                headers={"Authorization": f"Bearer {api_key}", "Idempotency-Key": idem_key},
                data={"amount": str(order[part]), "currency": "eur",
                      "customer": order["customer"], "description": f"{order_id} {part}"},
                timeout=10.0,
            )
            if response.status_code in (401, 403):
                return _park(conn, row_id, order_id, part, order[part])
            response.raise_for_status()
            with conn:
                conn.execute(
                    "UPDATE charges SET status = 'charged', charge_id = ? WHERE id = ?",
                    (response.json()["id"], row_id),
                )
        return "charged"
    finally:
        conn.close()


def _park(conn: sqlite3.Connection, row_id: str, order_id: str, part: str, amount: int) -> str:
    with conn:
        conn.execute(
            "INSERT OR IGNORE INTO charges VALUES (?, ?, ?, ?, NULL, 'review', NULL, NULL)",
            (row_id, order_id, part, amount),
        )
        conn.execute("UPDATE charges SET status = 'review' WHERE id = ?", (row_id,))
    return "review"
