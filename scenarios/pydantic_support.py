"""A support agent built with Pydantic AI: a model reads a ticket and, with two tools, looks
the charge up and refunds what the shop owes, through the shop's Stripe account (plain
httpx). The agent is Pydantic AI's own ``Agent`` with its tools, run by ``agent.run``;
nothing of the harness is in it: the model is named by a string (``"openai:gpt-5-mini"``,
``"anthropic:claude-sonnet-5-5"``) and its provider reads the API's URL and key from the
environment, as in production; the Stripe account comes in the run's ``deps``.

Pydantic AI keeps no state of its own between two runs: a worker killed after the refund
left starts the ticket over, and the model is asked again. It may answer otherwise (another
amount): what makes the refund happen once is in the tool, not in the framework.

- ``keyed=True``: the refund carries an ``Idempotency-Key`` derived from the *ticket*
  (``<ticket>:refund``), never from what the model said. Run again, the same refund is
  replayed by Stripe; asked for another amount under the same key, Stripe refuses it
  (``idempotency_error``), and the tool tells the model that the ticket's refund was made.
- ``keyed=False``: no key, what a tool written as an ordinary API call does. Run again after
  a crash, it refunds twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic_ai import Agent, RunContext

INSTRUCTIONS = (
    "You are a support agent of an online shop. Look up the charge the customer writes "
    "about, refund what the shop owes with refund_charge (amounts in cents), and say what "
    "you did in one sentence."
)


@dataclass
class Shop:
    """What the tools of one run work with: the ticket, the shop's Stripe account (an
    ``httpx.AsyncClient`` whose base URL and key are the account's), and whether the refund
    carries a key derived from the ticket."""

    ticket: Mapping[str, Any]
    stripe: httpx.AsyncClient
    keyed: bool = True


async def look_up_charge(ctx: RunContext[Shop], charge_id: str) -> str:
    """Look up a charge: its amount (in cents) and currency."""
    response = await ctx.deps.stripe.get(f"/v1/charges/{charge_id}")
    response.raise_for_status()
    charge = response.json()
    return f"{charge['id']}: {charge['amount']} {charge['currency']}"


async def refund_charge(ctx: RunContext[Shop], charge_id: str, amount: int) -> str:
    """Refund part or all of a charge; ``amount`` in cents."""
    headers = {}
    if ctx.deps.keyed:
        # The ticket's refund: the same key whatever the model says when it is asked again.
        headers["Idempotency-Key"] = f"{ctx.deps.ticket['id']}:refund"
    response = await ctx.deps.stripe.post(
        "/v1/refunds", data={"charge": charge_id, "amount": str(amount)}, headers=headers)
    if response.status_code == 400 and response.json()["error"].get("type") == \
            "idempotency_error":
        # Asked again after a crash, the model chose otherwise: the first refund stands.
        return ("This ticket's refund was already made (with other arguments). Do not "
                "refund again; tell the customer it is done.")
    response.raise_for_status()
    refund = response.json()
    return f"Refunded {refund['amount']} cents of {charge_id}: {refund['id']}"


def support_agent(model: str) -> Agent[Shop, str]:
    """The agent on ``model`` (a Pydantic AI model name). The SDK's own retries are off: a
    retry is the caller's decision (in production, the queue's)."""
    return Agent(model, deps_type=Shop, instructions=INSTRUCTIONS,
                 tools=[look_up_charge, refund_charge], model_settings={"max_retries": 0})


async def handle_ticket(
    ticket: Mapping[str, Any], *, model: str, stripe_url: str, stripe_key: str,
    keyed: bool = True,
) -> str:
    """Let the agent handle ``ticket``; return its last words."""
    async with httpx.AsyncClient(base_url=stripe_url, timeout=10.0,
                                 headers={"Authorization": f"Bearer {stripe_key}"}) as stripe:
        shop = Shop(ticket, stripe, keyed=keyed)
        result = await support_agent(model).run(
            f"Ticket {ticket['id']} from {ticket['email']}: {ticket['text']}", deps=shop)
        return result.output
