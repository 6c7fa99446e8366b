"""A subscription renewal charger, and the incident it had in production.

Each message renews one subscription: the charger writes the renewal's row (``charging``, with
a key made for this try), charges the customer through a Stripe-style API with plain httpx,
then marks the row ``charged`` with the charge's id. A row left ``charging`` (the worker died
between the charge and the row) is settled by ``settle``: at start-up for rows older than a
minute (:func:`recover`), and by the worker itself when the queue delivers the renewal again.

How it settles a stuck row is the whole difference:

- ``"retry"`` (the bug, as it ran in production): it charges again with a new key, as if the
  first try had failed. The customer whose worker died after Stripe charged is charged twice.
- ``"lookup"`` (the fix): it asks Stripe for the renewal's charge (a search by the renewal id
  in the charge's metadata) and confirms the row with it; when the search finds nothing (a
  search lags behind writes), it parks the row for a person instead of charging blind.

``scenarios/incident/`` holds what production left on 2026-11-30: the renewals table, with
November's renewal stuck ``charging``, and Stripe's list of the customer's charges, which
shows November's charge (docs/howto-incident.md).
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import httpx

Settle = Literal["retry", "lookup"]

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS renewals (id TEXT PRIMARY KEY, customer TEXT, amount INTEGER, "
    "status TEXT, idem_key TEXT, charge_id TEXT, updated_at REAL)"
)
#: A row ``charging`` for longer than this belongs to a worker that died.
STALE_AFTER = 60.0


def _open(db: str | Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=10.0)
    with conn:
        conn.execute(SCHEMA)
    return conn


def renew(
    renewal: Mapping[str, Any], *, db: str | Path, api_url: str, api_key: str, settle: Settle
) -> str:
    """Charge one renewal (``task_id``, ``customer``, ``amount``) once; return its status."""
    renewal_id = str(renewal["task_id"])
    conn = _open(db)
    try:
        row = conn.execute(
            "SELECT status FROM renewals WHERE id = ?", (renewal_id,)
        ).fetchone()
        if row is not None and row[0] != "charging":
            return str(row[0])
        with httpx.Client(base_url=api_url, auth=_Bearer(api_key)) as stripe:
            if row is not None:  # delivered again: a try of ours died midway
                return settle_row(conn, stripe, renewal_id, settle=settle)
            key = f"renewal-{renewal_id}-{uuid.uuid4().hex[:12]}"
            with conn:
                conn.execute(
                    "INSERT INTO renewals VALUES (?, ?, ?, 'charging', ?, NULL, ?)",
                    (renewal_id, renewal["customer"], int(renewal["amount"]), key, time.time()),
                )
            return _unless_refused(conn, renewal_id, lambda: _charge(conn, stripe, renewal_id, key))
    finally:
        conn.close()


def recover(*, db: str | Path, api_url: str, api_key: str, settle: Settle) -> list[str]:
    """At start-up: settle every row left ``charging`` for over a minute."""
    conn = _open(db)
    try:
        stuck = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM renewals WHERE status = 'charging' AND updated_at < ?",
                (time.time() - STALE_AFTER,),
            )
        ]
        with httpx.Client(base_url=api_url, auth=_Bearer(api_key)) as stripe:
            return [settle_row(conn, stripe, renewal_id, settle=settle) for renewal_id in stuck]
    finally:
        conn.close()


def settle_row(
    conn: sqlite3.Connection, stripe: httpx.Client, renewal_id: str, *, settle: Settle
) -> str:
    """Finish a row left ``charging``."""
    return _unless_refused(conn, renewal_id, lambda: _settle(conn, stripe, renewal_id, settle))


def _settle(conn: sqlite3.Connection, stripe: httpx.Client, renewal_id: str, settle: Settle) -> str:
    if settle == "retry":
        key = f"renewal-{renewal_id}-{uuid.uuid4().hex[:12]}"
        with conn:
            conn.execute(
                "UPDATE renewals SET idem_key = ?, updated_at = ? WHERE id = ?",
                (key, time.time(), renewal_id),
            )
        return _charge(conn, stripe, renewal_id, key)
    found = stripe.get(
        "/v1/charges/search", params={"query": f"metadata['renewal_id']:'{renewal_id}'"}
    )
    found.raise_for_status()
    charges = [c for c in found.json()["data"] if c["status"] == "succeeded"]
    with conn:
        if charges:
            conn.execute(
                "UPDATE renewals SET status = 'charged', charge_id = ?, updated_at = ? "
                "WHERE id = ?",
                (charges[0]["id"], time.time(), renewal_id),
            )
            return "charged"
        conn.execute(
            "UPDATE renewals SET status = 'review', updated_at = ? WHERE id = ?",
            (time.time(), renewal_id),
        )
    return "review"


def _unless_refused(conn: sqlite3.Connection, renewal_id: str, act: Callable[[], str]) -> str:
    """``act()``, or, when Stripe refuses the key (revoked, or without the scope), the row
    parked for a person: nothing more can be done for it with this integration."""
    try:
        return act()
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code not in (401, 403):
            raise
    with conn:
        conn.execute(
            "UPDATE renewals SET status = 'review', updated_at = ? WHERE id = ?",
            (time.time(), renewal_id),
        )
    return "review"


def _charge(conn: sqlite3.Connection, stripe: httpx.Client, renewal_id: str, key: str) -> str:
    customer, amount = conn.execute(
        "SELECT customer, amount FROM renewals WHERE id = ?", (renewal_id,)
    ).fetchone()
    response = stripe.post(
        "/v1/charges",
        data={"amount": amount, "currency": "usd", "customer": customer,
              "description": f"Renewal {renewal_id}", "metadata[renewal_id]": renewal_id},
        headers={"Idempotency-Key": key},
    )
    response.raise_for_status()
    with conn:
        conn.execute(
            "UPDATE renewals SET status = 'charged', charge_id = ?, updated_at = ? WHERE id = ?",
            (response.json()["id"], time.time(), renewal_id),
        )
    return "charged"


class _Bearer(httpx.Auth):
    def __init__(self, key: str) -> None:
        self.key = key

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self.key}"
        yield request
