"""BUG (1): an MCP client that calls a tool again after its result was lost, against a server
whose ``send_email`` is not idempotent (``idempotentHint: false``): the e-mail goes out twice,
with no kill and no second delivery (invariant 1). The fix is on either side: a key the server
honours (``../test_mcp_support.py``), or no blind retry of a tool that does not say it is safe.

BUG (2): the OpenAI Agents SDK's default for a failed MCP call (``mcp_agents_sdk.py``): the
failure is shown to the model as the tool's answer, the model goes on, and the run ends "done";
a refused ``refund`` is never made and nothing delivers the ticket again (invariant 2: work
silently dropped). Its twin with ``failure_error_function=None`` passes.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.mcpserver", reason="mcp 2's API; mcp 1.x: test_mcp1.py")

from scenarios.mcp_support import PLAIN_TOOLS, TICKET, TOOLS, handle_ticket


@pytest.mark.crashpoints(points="B", faults=["lose_response"], providers=[PLAIN_TOOLS],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_a_tool_called_again_after_its_result_was_lost(crashpoints):
    crashpoints.run(worker=functools.partial(handle_ticket, retry=True), messages=[TICKET])


@pytest.mark.crashpoints(points="D", faults=["concurrent_delivery"], providers=[PLAIN_TOOLS],
                         mode="exhaustive", expect=1, strict_coverage=False)
def test_looked_up_then_sent_by_two_deliveries_at_once(crashpoints):
    # "Sent already? No: send." Two workers at once both look, find nothing, and send.
    crashpoints.run(worker=functools.partial(handle_ticket, look_first=True), messages=[TICKET])


@pytest.mark.crashpoints(points="F", providers=["model", TOOLS], mode="exhaustive",
                         expect=2, strict_coverage=False)
def test_the_agents_sdk_shows_a_refused_refund_to_the_model_and_ends_done(crashpoints):
    # The SDK's default: a failed MCP call is the tool's answer; the model goes on, the run
    # ends "done", and nothing delivers the ticket again. The refund is never made.
    pytest.importorskip("agents", reason="the OpenAI Agents SDK is an agents extra")
    from scenarios import mcp_agents_sdk

    crashpoints.run(worker=functools.partial(mcp_agents_sdk.handle_ticket,
                                             raise_tool_errors=False),
                    messages=[mcp_agents_sdk.TICKET], model=mcp_agents_sdk.SCRIPT)
