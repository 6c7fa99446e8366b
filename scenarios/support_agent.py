"""A support agent as LLM agents are built: a model reads a ticket and decides, with two tools,
to refund a charge (payments) and to e-mail the customer (email), in the ``openai`` SDK's
plain tool loop. A crash test changes only the SDK's base URL and key.

The model decides; the agent keeps the decisions safe with the reference ledger: each tool call
is recorded (intent, then DISPATCHED) before it leaves, under an idempotency key derived from
the *task* (the ticket and the tool), never from what the model said. A model asked again
after a crash may answer otherwise (another amount, another call id): the decision already
recorded for the ticket stands, and the model is told so.

``key_from`` puts back the two classic bugs of agents that let the model name the effect:

- ``"call_id"``: the key is the id the model gave the tool call. A model asked again after a
  crash gives the same call a new id: a second refund.
- ``"arguments"``: the key is made of the arguments the model chose. A model that picks
  another amount when asked again makes another refund.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from openai import OpenAI

from fake_providers import Script, call, say
from pytest_crashpoints import Context, args_hash, guarded_call

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture, ExplorationReport

KeyFrom = Literal["task", "call_id", "arguments"]

MODEL = "gpt-4o-mini"
#: Turns the loop allows before it gives up (a model that never stops calling tools).
MAX_TURNS = 8

SYSTEM = (
    "You are a support agent of an online shop. Read the customer's ticket, refund what the "
    "shop owes with refund_charge, then tell the customer by e-mail with email_customer."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "refund_charge",
            "description": "Refund part or all of a charge.",
            "parameters": {
                "type": "object",
                "properties": {
                    "charge_id": {"type": "string"},
                    "amount": {"type": "integer", "description": "in cents"},
                    "reason": {"type": "string",
                               "enum": ["duplicate", "requested_by_customer"]},
                },
                "required": ["charge_id", "amount"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "email_customer",
            "description": "Send the customer an e-mail.",
            "parameters": {
                "type": "object",
                "properties": {"subject": {"type": "string"}, "body": {"type": "string"}},
                "required": ["subject", "body"],
            },
        },
    },
]


def _tool_args(ticket: Mapping[str, Any], name: str, arguments: Mapping[str, Any]) -> tuple[
    str, dict[str, Any]
]:
    """The reference adapter and its arguments for one of the model's tool calls."""
    if name == "refund_charge":
        args: dict[str, Any] = {"charge": arguments["charge_id"], "amount": arguments["amount"]}
        if arguments.get("reason"):
            args["reason"] = arguments["reason"]
        return "refund", args
    if name == "email_customer":
        return "send_email", {"to": ticket["email"], "subject": arguments["subject"],
                              "body": arguments["body"]}
    raise ValueError(f"the model called an unknown tool {name!r}")


def run_tool(
    ctx: Context, ticket: Mapping[str, Any], name: str, arguments: Mapping[str, Any], *,
    call_id: str, key_from: KeyFrom = "task",
) -> str:
    """Run one tool call of the model in the safe order; what to tell the model."""
    task_id = str(ticket["task_id"])
    tool, args = _tool_args(ticket, name, arguments)
    if key_from == "call_id":
        key = call_id  # BUG: the model names the effect anew each time it is asked
    elif key_from == "arguments":
        key = f"{ticket['id']}:{tool}:{args_hash(args)[:12]}"  # BUG: so does what it chose
    else:
        key = f"{ticket['id']}:{tool}"  # the ticket's refund, the ticket's e-mail: one each
    decided = ctx.ledger.find(key)
    if decided is not None and decided.args_hash != args_hash(args):
        # Asked again after a crash, the model chose otherwise: the first decision stands.
        return (f"Already done for this ticket: {decided.tool_name} {json.dumps(decided.args)} "
                f"is {decided.state.value}. Do not do it again.")
    authority = ctx.authority(task_id)
    if authority is None:
        raise PermissionError(f"task {task_id} has no authority any more")
    attempt = guarded_call(
        ctx.ledger, ctx.adapters()[tool], task_id=task_id, args=args, idempotency_key=key,
        authority=authority, actor=ctx.worker_id,
        current_authority=lambda: ctx.authority(task_id),
    )
    return f"{tool}: {attempt.state.value} {attempt.result_ref or ''}".strip()


def handle_ticket(
    ticket: Mapping[str, Any], ctx: Context, *, key_from: KeyFrom = "task", max_retries: int = 0
) -> str:
    """Let the model handle one ticket; return its last words. ``max_retries=2`` is the
    SDK's own default: it retries a refused or unanswered model call itself."""
    client = OpenAI(base_url=ctx.base_url("model") + "/v1",
                    api_key=ctx.api_key("model", str(ticket["task_id"])),
                    max_retries=max_retries)  # 0: a retry is the worker's decision
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Ticket {ticket['id']} from {ticket['email']}: "
                                    f"{ticket['text']}"},
    ]
    try:
        for _ in range(MAX_TURNS):
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content or ""
            for tool_call in message.tool_calls:
                result = run_tool(
                    ctx, ticket, tool_call.function.name,
                    json.loads(tool_call.function.arguments),
                    call_id=tool_call.id, key_from=key_from,
                )
                messages.append({"role": "tool", "tool_call_id": tool_call.id,
                                 "content": result})
        raise RuntimeError(f"the model did not finish ticket {ticket['id']} in {MAX_TURNS} turns")
    finally:
        client.close()


def recover(ctx: Context) -> int:
    """The reference recovery: reconcile every tool call left in flight."""
    return len(ctx.recover())


# -- the case: a ticket, the charge it is about, and what the model answers ------------------

#: The charge the customer complains about; ``create_charge`` makes it before each case.
CHARGE = {"amount": "4999", "currency": "eur", "customer": "cus_ada",
          "description": "order 7"}
#: Its id: the first object the payments provider of a case creates.
CHARGE_ID = "ch_000000000000000000000001"

TICKET = {
    "task_id": "ticket-42",
    "id": "T-42",
    "email": "ada@example.com",
    "text": f"Order 7 arrived broken. Please refund the 15 EUR shipping of charge {CHARGE_ID}.",
}


def create_charge(ctx: Context) -> None:
    """Set-up: the charge the ticket is about, made by the shop before the ticket came."""
    response = ctx.client("payments", str(TICKET["task_id"])).post("/v1/charges", data=CHARGE)
    response.raise_for_status()
    assert response.json()["id"] == CHARGE_ID, response.json()["id"]


def support_script(*, reask_amount: int | None = None) -> Script:
    """The model: refund 15 EUR, then e-mail the customer, then say it is done.
    ``reask_amount``: the amount it picks when the first question is asked again."""
    refund = call("refund_charge", charge_id=CHARGE_ID, amount=1500,
                  reason="requested_by_customer")
    reasks = {}
    if reask_amount is not None:
        reasks[0] = call("refund_charge", charge_id=CHARGE_ID, amount=reask_amount,
                         reason="requested_by_customer")
    return Script(
        [
            refund,
            call("email_customer", subject="Your refund for order 7",
                 body="We refunded the 15 EUR shipping of order 7. Sorry for the trouble."),
            say("Refunded 15 EUR and told the customer."),
        ],
        on_reask=reasks,
    )


def run_the_ticket(
    crashpoints: CrashpointsFixture,
    worker: Callable[[Any, Context], object],
    *,
    recovery: Callable[[Context], object] | None = recover,
    reask_amount: int | None = 2000,
) -> ExplorationReport:
    """The case every form of the agent runs: the ticket, the charge it is about (made before
    each case), and a model that picks another amount when it is asked again (by default 2000
    cents, where it first said 1500; ``None``: the same amount). ``recovery``: the reference
    recovery unless told otherwise (``None``: no recovery)."""
    return crashpoints.run(
        worker=worker,
        recover=recovery,
        messages=[TICKET],
        model=support_script(reask_amount=reask_amount),
        setup=create_charge,
    )
