"""The support agent built with Pydantic AI (``pydantic_support.py``): the scripted model
looks the charge up, refunds 15 EUR, and says so; asked again after a crash, it picks
20 EUR. Its refund carries a key derived from the ticket, so one refund whatever the crash:
killed after the model chose the refund (``model.tool_call``: restarted, the model asks for
20 EUR), after Stripe refunded (B: restarted, the same key with another amount is refused,
and the tool tells the model the refund was made), with the answer lost, a call refused, the
ticket delivered twice or to two workers at once. On OpenAI's Responses API (Pydantic AI's
default for ``openai:`` models) and on Anthropic's Messages (which Pydantic AI streams).

The agent keeps no ledger: Stripe's and the model's journals are the evidence, against the
fault-free run; and an invariant of the test's own, ``the_customer_is_answered``, holds that
some run of the ticket reaches the model's last words (a tool that raised on Stripe's refusal
would refund once and fail the ticket on every delivery after). Its twin without a key is in
``broken/test_pydantic_ai.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai", reason="the Pydantic AI scenarios need pydantic-ai: pip install -e .[agents]"
)

from fake_providers import Script, call, say
from pytest_crashpoints import Context
from pytest_crashpoints.harness import Evidence
from scenarios.pydantic_support import handle_ticket
from scenarios.support_agent import CHARGE_ID, TICKET, create_charge

# Pydantic AI imports a provider's SDK at its first run: imported here, once, every worker
# process the harness forks for a test has it already (seconds a process otherwise).
for _models in ("pydantic_ai.models.openai", "pydantic_ai.models.anthropic"):
    importlib.import_module(_models)

OPENAI = "openai:gpt-5.5"
ANTHROPIC = "anthropic:claude-sonnet-5-5"

#: The model's last words to the customer.
DONE = "Refunded the 15 EUR shipping of order 7."
#: Look the charge up, refund 15 EUR, say so; asked the refund question again: 20 EUR.
SCRIPT = Script(
    [call("look_up_charge", charge_id=CHARGE_ID),
     call("refund_charge", charge_id=CHARGE_ID, amount=1500),
     say(DONE)],
    on_reask={1: call("refund_charge", charge_id=CHARGE_ID, amount=2000)},
)


def the_customer_is_answered(evidence: Evidence) -> Iterator[str]:
    """The ticket's run reaches the model's last words to the customer"""
    # One refund is not enough: a tool that raises on Stripe's refusal of the ticket's key
    # with another amount refunds once, and the ticket fails on every delivery after.
    if not any(r.provider == "model" and r.status == 200 and r.message == 0
               and (r.note or "").endswith(repr(DONE)) for r in evidence.requests):
        yield (f"no run of ticket {TICKET['id']} reached the model's last words ({DONE!r}): "
               "each delivery of it ended before the agent answered the customer")


async def worker(ticket: dict[str, Any], ctx: Context, *, model: str = OPENAI,
                 keyed: bool = True) -> str:
    # The model's provider reads OPENAI_* / ANTHROPIC_* from the environment the harness set.
    return await handle_ticket(
        ticket, model=model, stripe_url=ctx.base_url("payments"),
        stripe_key=ctx.api_key("payments", str(ticket["task_id"])), keyed=keyed)


async def anthropic_worker(ticket: dict[str, Any], ctx: Context) -> str:
    return await worker(ticket, ctx, model=ANTHROPIC)


async def unkeyed_worker(ticket: dict[str, Any], ctx: Context) -> str:
    return await worker(ticket, ctx, keyed=False)


#: Every fault the agent can meet: a kill after the model chose a tool or after Stripe
#: applied the refund, a lost answer, a refused call, the ticket twice or at once. (No A or
#: C: the agent commits nothing, so neither has a place.)
every_fault = pytest.mark.crashpoints(
    points=["B", "D", "F", "model.tool_call"], providers=["model", "payments"],
    mode="exhaustive", strict_coverage=False,  # no ledger: the journals are the evidence
)


@every_fault
def test_a_refund_keyed_by_the_ticket_is_made_once(crashpoints):
    crashpoints.run(worker=worker, messages=[TICKET], model=SCRIPT, setup=create_charge,
                    invariants=[the_customer_is_answered])


@every_fault
def test_on_anthropic_streamed_too(crashpoints):
    crashpoints.run(worker=anthropic_worker, messages=[TICKET], model=SCRIPT,
                    setup=create_charge, invariants=[the_customer_is_answered])
