"""BUG: the DBOS-durable Pydantic AI support agent (``../pydantic_dbos_support.py`` with
``keyed=False``) whose refund step calls Stripe with no idempotency key. Killed after Stripe
refunded and before DBOS checkpointed the step, the workflow is recovered by DBOS
(``DBOS.launch()`` in the next process) from its last checkpoint: the model's answer that
chose the refund is replayed from its checkpoint, and the refund step runs again, a second
refund (invariant 1). DBOS runs steps at least once; the key derived from the workflow's id
makes it once at Stripe (``../test_pydantic_ai_dbos.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "pydantic_ai.durable_exec.dbos",
    reason="the Pydantic AI scenarios need pydantic-ai with DBOS: pip install -e .[agents]",
)

from scenarios.support_agent import TICKET, create_charge
from scenarios.test_pydantic_ai import SCRIPT
from scenarios.test_pydantic_ai_dbos import unkeyed_recovery, unkeyed_worker, workflows


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["model", "payments"],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_refund_step_without_a_key_refunds_again_when_dbos_recovers_it(crashpoints):
    crashpoints.run(worker=unkeyed_worker, recover=unkeyed_recovery, messages=[TICKET],
                    model=SCRIPT, setup=create_charge, ledger_view=workflows)
