"""An order charger as a DBOS workflow, its state in DBOS's SQLite system database.

The workflow ``charge_order`` runs one step, ``charge``, a Stripe-style charge with plain
httpx. DBOS checkpoints each step's output in its system database; a process killed after a
step ran and before its checkpoint is recovered by DBOS (``DBOS.launch()`` in the next
process) from the last checkpoint, so that step runs again: steps run *at least once*.

- ``keyed=True``: the step sends an ``Idempotency-Key`` derived from the workflow's id
  (``DBOS.workflow_id``), the same in every run of the workflow, so the provider replays the
  first charge instead of charging twice.
- ``keyed=False``: no key (what a step written as an ordinary function does). Run again by
  DBOS's recovery, it charges twice.

Nothing of the harness is in it: the API's URL and key come from the environment
(``PAYMENTS_URL``, ``PAYMENTS_KEY``), the database's path from the caller. In production:
PostgreSQL as the system database, and the same code.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from dbos import DBOS, SetWorkflowID

KEYED = {"value": True}


@DBOS.step()
def charge(order: dict[str, Any]) -> str:
    headers = {"Authorization": f"Bearer {os.environ['PAYMENTS_KEY']}"}
    if KEYED["value"]:
        headers["Idempotency-Key"] = f"{DBOS.workflow_id}:charge"
    response = httpx.post(
        f"{os.environ['PAYMENTS_URL']}/v1/charges",
        data={"amount": str(order["amount"]), "currency": "eur",
              "description": f"order {order['task_id']}"},
        headers=headers,
        timeout=10.0,
    )
    response.raise_for_status()
    return str(response.json()["id"])


@DBOS.workflow()
def charge_order(order: dict[str, Any]) -> str:
    return charge(order)


def start(db: str) -> None:
    """DBOS for this process, its system database the SQLite file ``db``; ``launch`` also
    recovers the workflows a dead process of this application left pending."""
    DBOS(config={"name": "charger", "system_database_url": f"sqlite:///{db}",
                 "run_admin_server": False, "log_level": "WARNING"})
    DBOS.launch()


def handle(order: dict[str, Any], *, db: str, keyed: bool = True) -> str:
    """Charge ``order`` in its workflow (its id: the order's ``task_id``); the result of a
    workflow that already ran is returned, not run again."""
    KEYED["value"] = keyed
    start(db)
    try:
        with SetWorkflowID(str(order["task_id"])):
            return charge_order(order)
    finally:
        DBOS.destroy()


def recover(*, db: str, keyed: bool = True) -> list[str]:
    """DBOS's own recovery, as a process of its own: launch (which recovers every pending
    workflow of this application) and wait for each recovered one to end."""
    KEYED["value"] = keyed
    start(db)
    try:
        pending = DBOS.list_workflows(status=["PENDING", "ENQUEUED"])
        return [str(DBOS.retrieve_workflow(w.workflow_id).get_result()) for w in pending]
    finally:
        DBOS.destroy()
