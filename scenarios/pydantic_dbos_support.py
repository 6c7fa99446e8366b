"""A support agent made durable by Pydantic AI's own DBOS integration, its state in DBOS's
SQLite system database.

The agent (``agent.run`` inside the DBOS workflow ``handle_ticket``) carries the
``DBOSDurability`` capability, which makes each model request a DBOS step: its answer is
checkpointed in the system database. Its two tools are DBOS steps of their own
(``@DBOS.step``, as Pydantic AI's DBOS guide says of tools that do I/O): a charge looked up,
a charge refunded through the shop's Stripe account (plain httpx). A process killed after a
step ran and before its checkpoint is recovered by DBOS (``DBOS.launch()`` in the next
process) from the last checkpoint: the model's checkpointed answers are replayed without
asking it again, and the step that was cut short runs again. Steps run *at least once*.

- ``keyed=True``: the refund carries an ``Idempotency-Key`` derived from the workflow's id
  (``DBOS.workflow_id``), the same in every run of the workflow; and the model's choice of
  the refund was checkpointed before the step began, so a step run again asks for the same
  refund, and Stripe replays the first one instead of refunding twice.
- ``keyed=False``: no key (a step written as an ordinary API call). Run again by DBOS's
  recovery, it refunds twice.

Nothing of the harness is in it: the model is a Pydantic AI model name whose provider reads
its URL and key from the environment, Stripe's URL and key come from ``STRIPE_URL`` and
``STRIPE_KEY``, the database's path from the caller. In production: PostgreSQL as the system
database, and the same code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx
from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability

INSTRUCTIONS = (
    "You are a support agent of an online shop. Look up the charge the customer writes "
    "about, refund what the shop owes with refund_charge (amounts in cents), and say what "
    "you did in one sentence."
)
#: How this process runs: the agent (built by ``start``, before DBOS launches) and the key.
RUN: dict[str, Any] = {"agent": None, "keyed": True}


def _stripe() -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=os.environ["STRIPE_URL"], timeout=10.0,
                             headers={"Authorization": f"Bearer {os.environ['STRIPE_KEY']}"})


@DBOS.step()
async def look_up_charge(charge_id: str) -> str:
    """Look up a charge: its amount (in cents) and currency."""
    async with _stripe() as stripe:
        response = await stripe.get(f"/v1/charges/{charge_id}")
    response.raise_for_status()
    charge = response.json()
    return f"{charge['id']}: {charge['amount']} {charge['currency']}"


@DBOS.step()
async def refund_charge(charge_id: str, amount: int) -> str:
    """Refund part or all of a charge; ``amount`` in cents."""
    headers = {}
    if RUN["keyed"]:
        # The workflow's refund: the same key in every run of the workflow.
        headers["Idempotency-Key"] = f"{DBOS.workflow_id}:refund"
    async with _stripe() as stripe:
        response = await stripe.post(
            "/v1/refunds", data={"charge": charge_id, "amount": str(amount)}, headers=headers)
    response.raise_for_status()
    refund = response.json()
    return f"Refunded {refund['amount']} cents of {charge_id}: {refund['id']}"


@DBOS.workflow()
async def handle_ticket(ticket: dict[str, Any]) -> str:
    result = await RUN["agent"].run(
        f"Ticket {ticket['id']} from {ticket['email']}: {ticket['text']}")
    return str(result.output)


def start(db: str, *, model: str, keyed: bool) -> None:
    """DBOS for this process, its system database the SQLite file ``db``, and the agent on
    ``model`` (built before DBOS launches: its capability registers the model's steps);
    ``launch`` also recovers the workflows a dead process of this application left pending."""
    RUN["keyed"] = keyed
    DBOS(config={"name": "support", "system_database_url": f"sqlite:///{db}",
                 "run_admin_server": False, "log_level": "WARNING"})
    RUN["agent"] = Agent(model, name="support", instructions=INSTRUCTIONS,
                         tools=[look_up_charge, refund_charge],
                         capabilities=[DBOSDurability()],
                         model_settings={"max_retries": 0})  # a retry is DBOS's to make
    DBOS.launch()


async def handle(ticket: Mapping[str, Any], *, db: str, model: str, keyed: bool = True) -> str:
    """Handle ``ticket`` in its workflow (its id: the ticket's ``task_id``); the result of a
    workflow that already ran is returned, not run again."""
    start(db, model=model, keyed=keyed)
    try:
        with SetWorkflowID(str(ticket["task_id"])):
            return await handle_ticket(dict(ticket))
    finally:
        DBOS.destroy()


def recover(*, db: str, model: str, keyed: bool = True) -> list[str]:
    """DBOS's own recovery, as a process of its own: launch (which recovers every pending
    workflow of this application) and wait for each recovered one to end."""
    start(db, model=model, keyed=keyed)
    try:
        pending = DBOS.list_workflows(status=["PENDING", "ENQUEUED"])
        return [str(DBOS.retrieve_workflow(w.workflow_id).get_result()) for w in pending]
    finally:
        DBOS.destroy()
