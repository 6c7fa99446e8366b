"""BUG: a LangGraph node that refunds without a key after ``interrupt()``
(``../approval_graph.py`` with ``keyed=False``). Killed after the refund left (B), the
approval is delivered again; LangGraph runs the resumed node again from its start,
``interrupt()`` returns the approval again, and the refund is made twice (invariant 1). The
keyed graph passes (``../test_approval_graph.py``)."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="LangGraph is an agents extra")

from scenarios.test_approval_graph import APPROVAL, TICKET, create_charge, unkeyed


@pytest.mark.crashpoints(points="B", faults=["kill"], providers=["payments"], mode="exhaustive",
                         expect=1, strict_coverage=False)
def test_a_resumed_node_refunds_again_after_a_kill(crashpoints):
    crashpoints.run(worker=unkeyed, messages=[TICKET, APPROVAL], setup=create_charge)
