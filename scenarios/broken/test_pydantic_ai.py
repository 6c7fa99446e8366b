"""BUG: the Pydantic AI support agent (``../pydantic_support.py``) whose refund tool calls
Stripe with no idempotency key. Killed after Stripe refunded (B) and before the agent saw the
answer, the ticket is delivered again; Pydantic AI keeps nothing between two runs, so the
model is asked again, calls the tool again, and the customer is refunded twice (invariant 1).
Its twin with a key derived from the ticket passes: ``../test_pydantic_ai.py``."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "pydantic_ai", reason="the Pydantic AI scenarios need pydantic-ai: pip install -e .[agents]"
)

from scenarios.support_agent import TICKET, create_charge
from scenarios.test_pydantic_ai import SCRIPT, unkeyed_worker


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["model", "payments"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_refund_without_a_key_is_made_again_when_the_ticket_comes_back(crashpoints):
    crashpoints.run(worker=unkeyed_worker, messages=[TICKET], model=SCRIPT, setup=create_charge)
