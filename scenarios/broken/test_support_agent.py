"""The support agent (``../support_agent.py``, ``../support_graph.py``) with the three classic
bugs of LLM agents put back, each caught from the providers' own journals:

- the idempotency key is the id the model gave the tool call: the worker killed after the
  refund left (B) is restarted, the model is asked again and names the call anew, and the
  refund is made twice (invariant 1);
- the key is made of the arguments the model chose, and the model asked again picks another
  amount: a second refund (invariant 1);
- the tools trust LangGraph's checkpoint to run them once: killed inside the tool node, the
  graph runs the node again on restart and refunds twice (invariant 1).

Their twins pass: ``../test_support_agent.py``.
"""

import functools

import pytest

pytest.importorskip("openai", reason="the openai SDK is an agents extra: pip install -e .[agents]")

from scenarios.support_agent import handle_ticket, run_the_ticket

#: Every kill at B (a refund or an e-mail sent, the agent not yet told): each bug makes a
#: second refund (invariant 1).
caught_at_b = pytest.mark.crashpoints(
    points="B", providers=["model", "payments", "email"], mode="exhaustive", max_faults=1,
    expect=1,
)


@caught_at_b
def test_key_from_the_model_call_id(crashpoints):
    run_the_ticket(
        crashpoints, functools.partial(handle_ticket, key_from="call_id"), reask_amount=None
    )


@caught_at_b
def test_another_amount_on_the_reask(crashpoints):
    run_the_ticket(
        crashpoints, functools.partial(handle_ticket, key_from="arguments"), reask_amount=2000
    )


@caught_at_b
def test_framework_runs_the_tool_node_again(crashpoints):
    pytest.importorskip("langgraph.checkpoint.sqlite", reason="an agents extra")
    from scenarios.support_graph import handle_ticket as graph_ticket

    run_the_ticket(
        crashpoints,
        functools.partial(graph_ticket, ledger=False),
        recovery=None,  # no ledger: nothing to recover
        reask_amount=None,
    )
