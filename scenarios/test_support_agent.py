"""The support agent: a scripted model reads a ticket and decides to refund a charge
(payments) and to e-mail the customer (email). One refund and one e-mail whatever the crash:
killed after the model chose a tool (``model.tool_call``: restarted, the model is asked again
and picks another amount) or after an intent was recorded (A). Two forms of the agent:

- ``support_agent.py``: the ``openai`` SDK's plain tool loop;
- ``support_graph.py``: LangGraph, a ``ToolNode`` and a ``SqliteSaver`` checkpointer.

Both record each tool call in the reference ledger under a key derived from the ticket before
it leaves. Their broken variants are in ``broken/test_support_agent.py``; the suite runs both
under every kill at B and every lost answer too (``tests/acceptance/test_llm_agents.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("openai", reason="the openai SDK is an agents extra: pip install -e .[agents]")

from scenarios.support_agent import handle_ticket, run_the_ticket

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture

#: Every kill after the model chose a tool: restarted, the agent asks the model again.
after_the_model_chose = pytest.mark.crashpoints(
    points=["model.tool_call"], providers=["model", "payments", "email"],
    mode="exhaustive", max_faults=1,
)


@after_the_model_chose
def test_one_refund_and_one_email(crashpoints: CrashpointsFixture) -> None:
    run_the_ticket(crashpoints, handle_ticket)


@after_the_model_chose
def test_the_graph_runs_each_tool_once(crashpoints: CrashpointsFixture) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="an agents extra")
    from scenarios.support_graph import handle_ticket as graph_ticket

    run_the_ticket(crashpoints, graph_ticket)
