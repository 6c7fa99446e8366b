"""An order charger on Stripe's PaymentIntents, through stripe-python, whose recovery lists the
customer's PaymentIntents: what Stripe recommends over its search, which is not read-after-write.

Each order is a row of its own SQLite table (WAL). A delivery:

1. finds the order ``charged``: nothing to do;
2. finds it ``pending`` under another worker's lease that has not run out: that worker may be
   charging it right now, so this delivery gives up (raises) and the order comes back later;
3. finds it ``pending`` otherwise (a worker died with it): lists the customer's PaymentIntents
   (``GET /v1/payment_intents?customer=``, consistent) for one made for this order
   (``metadata[order_id]``); found, the order is ``charged``; not found, it was never charged;
4. records the order ``pending`` under its own lease (a commit), creates and confirms the
   PaymentIntent, records it ``charged``.

An order is charged in one Stripe account under one version of the shop's policy, both kept in
its row. An order begun under another account or policy than the delivery's, or whose
credentials are gone (revoked, or refused the charge), is set aside for a person
(``review``, :func:`park`): what was done then is not this authority's to finish.

What the variants change:

- ``synchronous``: SQLite's ``FULL`` (the default) syncs each commit; with ``NORMAL`` in WAL a
  power loss takes the commits since the last checkpoint, so the ``pending`` row can be gone
  after the PaymentIntent was made, and the order looks new: charged again;
- ``idempotency_key``: the create carries a key derived from the order, so Stripe replays the
  first charge instead of making a second, whatever the charger remembers;
- ``look_up_first``: a new order is looked up too before it is charged, so a lost ``pending``
  row costs nothing.

Nothing in it knows of a test: a test gives it the API's URL, its key and the database.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import stripe

#: How long a worker's claim on an order lasts (wall seconds): past it, the worker is taken
#: for dead and another may reconcile the order.
LEASE = 120.0
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, status TEXT NOT NULL, "
    "owner TEXT, lease_until REAL, intent_id TEXT, account TEXT, policy TEXT)"
)


class OrderBusy(RuntimeError):
    """Another worker holds the order's lease: try again later."""


def _open(db: str | Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=5.0, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(SCHEMA)
    return conn


def _find(client: stripe.StripeClient, order: Mapping[str, Any]) -> str | None:
    """The PaymentIntent made for ``order`` (its customer's, listed), if there is one."""
    intents = client.v1.payment_intents.list(params={"customer": order["customer"],
                                                     "limit": 100})
    for intent in intents.auto_paging_iter():
        metadata = intent.metadata.to_dict() if intent.metadata else {}
        if metadata.get("order_id") == order["task_id"] and intent.status != "canceled":
            return str(intent.id)
    return None


def charge(
    order: Mapping[str, Any],
    *,
    db: str | Path,
    api_url: str,
    api_key: str,
    account: str,
    policy: str,
    synchronous: str = "FULL",
    idempotency_key: bool = False,
    look_up_first: bool = False,
) -> str:
    """Charge ``order`` (``task_id``, ``customer``, ``amount``) once, in Stripe account
    ``account`` under the shop's ``policy`` version; its final status."""
    me = f"{os.getpid()}"
    client = stripe.StripeClient(api_key, base_addresses={"api": api_url},
                                 max_network_retries=0)
    conn = _open(db, synchronous)
    try:
        order_id = str(order["task_id"])
        row = conn.execute("SELECT status, owner, lease_until, account, policy FROM orders "
                           "WHERE id = ?", (order_id,)).fetchone()
        if row is not None and row[0] in ("charged", "review"):
            return str(row[0])
        if row is not None and row[1] != me and (row[2] or 0) > time.time():
            raise OrderBusy(f"order {order_id} is being charged by {row[1]}")
        if row is not None and (row[3], row[4]) != (account, policy):
            # Begun under another account or policy: what was done then is not this
            # authority's to finish, nor to look up. A person decides.
            _record(conn, order_id, "review", me, None, account, policy)
            return "review"
        if row is not None or look_up_first:
            found = _find(client, order)
            if found is not None:
                _record(conn, order_id, "charged", me, found, account, policy)
                return "charged"
        _record(conn, order_id, "pending", me, None, account, policy)
        options: stripe.RequestOptions = {}
        if idempotency_key:
            options["idempotency_key"] = f"order:{order_id}:charge"
        try:
            intent = client.v1.payment_intents.create(
                params={"amount": int(order["amount"]), "currency": "usd",
                        "customer": order["customer"], "payment_method": "pm_card_visa",
                        "confirm": True, "metadata": {"order_id": order_id}},
                options=options,
            )
        except (stripe.PermissionError, stripe.AuthenticationError):
            # Refused before anything was done: these credentials may not charge. A person
            # decides.
            _record(conn, order_id, "review", me, None, account, policy)
            return "review"
        _record(conn, order_id, "charged", me, str(intent.id), account, policy)
        return "charged"
    finally:
        conn.close()


def park(order: Mapping[str, Any], *, db: str | Path, synchronous: str = "FULL") -> str:
    """Set ``order`` aside for a person (``review``): what is done when the credentials to
    charge it, or to look it up, are gone. A charged order stays charged."""
    conn = _open(db, synchronous)
    try:
        row = conn.execute("SELECT status FROM orders WHERE id = ?",
                           (str(order["task_id"]),)).fetchone()
        if row is not None and row[0] == "charged":
            return "charged"
        _record(conn, str(order["task_id"]), "review", f"{os.getpid()}", None, None, None)
        return "review"
    finally:
        conn.close()


def _record(conn: sqlite3.Connection, order_id: str, status: str, owner: str,
            intent_id: str | None, account: str | None, policy: str | None) -> None:
    """The order's row, in one committed transaction (a ``pending`` row holds the lease;
    the account and policy it was begun under stay those of its first row)."""
    lease = time.time() + LEASE if status == "pending" else None
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO orders (id, status, owner, lease_until, intent_id, account, policy) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET status = "
            "excluded.status, owner = excluded.owner, lease_until = excluded.lease_until, "
            "intent_id = coalesce(excluded.intent_id, intent_id)",
            (order_id, status, owner, lease, intent_id, account, policy),
        )
