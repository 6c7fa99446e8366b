"""The support agent over MCP (``mcp_support.py``): the official ``mcp`` client, unchanged,
against a fake MCP server whose tools take the ticket's id as their idempotency: one refund
and one e-mail whatever the kill, the lost result or the second delivery. The same agent on the
OpenAI Agents SDK (``mcp_agents_sdk.py``: the scripted model picks the tools, the SDK's
``MCPServerStreamableHttp`` calls them) passes too when a failed call raises. The broken twins
are in ``broken/test_mcp_support.py``."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")
pytest.importorskip("mcp.server.mcpserver", reason="mcp 2's API; mcp 1.x: test_mcp1.py")

import functools

from scenarios.mcp_support import PLAIN_TOOLS, TICKET, TOOLS, handle_ticket
from scenarios.support_tools import STATELESS_TOOLS


@pytest.mark.crashpoints(points="BCDF", providers=[TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_one_refund_and_one_email_over_mcp(crashpoints):
    crashpoints.run(worker=handle_ticket, messages=[TICKET])


@pytest.mark.crashpoints(points="BCDF", providers=[STATELESS_TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_one_refund_and_one_email_on_a_stateless_server(crashpoints):
    # Deployed stateless: no session to forget (the summary says it is not applicable);
    # every other fault, requests sent twice included.
    crashpoints.run(worker=handle_ticket, messages=[TICKET])


@pytest.mark.crashpoints(points="BC", providers=[PLAIN_TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_an_email_looked_up_before_it_is_sent_again(crashpoints):
    # send_email has no key here: the agent asks find_email first. Kills and lost results
    # pass; two deliveries at once do not (broken/test_mcp_support.py).
    crashpoints.run(worker=functools.partial(handle_ticket, look_first=True), messages=[TICKET])


@pytest.mark.crashpoints(points="BCDF", providers=["model", TOOLS], mode="exhaustive",
                         strict_coverage=False)
def test_the_agents_sdk_refunds_and_emails_once_over_mcp(crashpoints):
    pytest.importorskip("agents", reason="the OpenAI Agents SDK is an agents extra")
    from scenarios import mcp_agents_sdk

    crashpoints.run(worker=mcp_agents_sdk.handle_ticket, messages=[mcp_agents_sdk.TICKET],
                    model=mcp_agents_sdk.SCRIPT)
