"""The fake MCP server, reached by the official ``mcp`` client unchanged over loopback: the
handshake, tools and their annotations, effects in the journal, a tool that dedupes (its first
result answered to the second call's id), a lookup tool, refusals without an effect, and a
session the server forgets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_providers import ApiKey, McpProvider, McpServer, McpTool, serve

mcp = pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

SERVER = McpServer(
    "tools",
    McpTool("refund", input_schema={"type": "object", "required": ["ticket_id", "amount"]},
            idempotent=True, dedupe_by=("ticket_id",)),
    McpTool("send_email", input_schema={"type": "object", "required": ["to"]}),
    McpTool("find_email", read_only=True, finds="send_email"),
)
KEY = ApiKey("sk_mcp", "tenant-a", frozenset({"tools:write"}))


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[McpProvider]:
    provider = SERVER.provider(tmp_path / "tools.db", keys=[KEY])
    yield provider
    provider.close()


@pytest.fixture
def url(provider: McpProvider) -> Iterator[str]:
    with serve(provider) as base:
        yield base + "/mcp"


Session = Callable[[ClientSession], Awaitable[Any]]


def in_session(url: str, body: Session) -> Any:
    import httpx2

    async def main() -> Any:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY.secret}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await body(session)

    try:
        return asyncio.run(asyncio.wait_for(main(), 30))
    except Exception as group:  # the session's task group wraps what the call raised
        leaf: BaseException = group
        while getattr(leaf, "exceptions", None):  # an exception group (Python 3.11+)
            leaf = leaf.exceptions[0]  # type: ignore[attr-defined]
        if leaf is group:
            raise
        raise leaf from None


def effects(provider: McpProvider) -> list[tuple[str, str]]:
    return [(e.operation, e.object_id) for e in provider.journal.effects()]


def test_the_client_lists_the_tools_with_their_annotations(url: str) -> None:
    listed = in_session(url, lambda s: s.list_tools())
    tools = {tool.name: tool for tool in listed.tools}
    assert list(tools) == ["refund", "send_email", "find_email"]
    refund, email, find = tools["refund"], tools["send_email"], tools["find_email"]
    assert refund.input_schema["required"] == ["ticket_id", "amount"]
    assert (refund.annotations.idempotent_hint, refund.annotations.read_only_hint) == (True, False)
    assert (email.annotations.idempotent_hint, email.annotations.destructive_hint) == (False, True)
    assert (find.annotations.read_only_hint, find.annotations.destructive_hint) == (True, False)


def test_a_call_is_an_effect_and_a_deduped_call_answers_the_first_result(
    url: str, provider: McpProvider
) -> None:
    async def body(session: ClientSession) -> list[Any]:
        first = await session.call_tool("refund", {"ticket_id": "t-1", "amount": 500})
        again = await session.call_tool("refund", {"ticket_id": "t-1", "amount": 500})
        other = await session.call_tool("refund", {"ticket_id": "t-1", "amount": 450})
        mail = [await session.call_tool("send_email", {"to": "a@example.com"}) for _ in "ab"]
        return [first, again, other, *mail]

    first, again, other, *mail = in_session(url, body)
    assert first.structured_content == again.structured_content  # replayed, same id
    assert first.structured_content["arguments"] == {"ticket_id": "t-1", "amount": 500}
    assert other.is_error and "already called" in other.content[0].text
    assert not any(m.is_error for m in mail)
    made = effects(provider)
    assert [op for op, _ in made] == ["refund", "send_email", "send_email"]  # no dedupe: two
    rows = [r for r in provider.journal.requests() if r.operation == "refund"]
    assert [(r.effect_applied, r.replayed) for r in rows] == [
        (True, False), (False, True), (False, False)
    ]


def test_a_lookup_tool_finds_the_effects_of_another(url: str) -> None:
    async def body(session: ClientSession) -> Any:
        await session.call_tool("send_email", {"to": "a@example.com", "ticket_id": "t-2"})
        return await session.call_tool("find_email", {"ticket_id": "t-2"})

    found = in_session(url, body).structured_content["found"]
    assert [f["arguments"]["to"] for f in found] == ["a@example.com"]


def test_a_call_without_a_required_argument_is_a_tool_error_and_no_effect(
    url: str, provider: McpProvider
) -> None:
    result = in_session(url, lambda s: s.call_tool("refund", {"amount": 5}))
    assert result.is_error and "missing argument(s) ticket_id" in result.content[0].text
    assert effects(provider) == []


def test_a_refused_call_applies_nothing(url: str, provider: McpProvider) -> None:
    provider.faults.server_errors(1, on="writes")
    with pytest.raises(MCPError):
        in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert effects(provider) == []


def test_a_forgotten_session_is_404_and_a_new_one_works(url: str, provider: McpProvider) -> None:
    provider.faults.lose_sessions(1)
    with pytest.raises(MCPError, match="not found"):
        in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert effects(provider) == []
    forgotten = [s["forgotten"] for s in provider.sessions()]
    assert forgotten == [1]
    in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert [op for op, _ in effects(provider)] == ["send_email"]
    provider.forget_sessions()
    assert all(s["forgotten"] for s in provider.sessions())


def test_the_newer_eras_probe_is_told_to_fall_back(url: str) -> None:
    import httpx

    answer = httpx.post(
        url,
        headers={"Authorization": f"Bearer {KEY.secret}", "Accept": "application/json"},
        json={"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
    )
    assert answer.json()["error"]["code"] == -32601


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: McpServer("Tools", McpTool("a")), "must be lower case"),
        (lambda: McpServer("tools"), "has no tools"),
        (lambda: McpServer("tools", McpTool("a"), McpTool("a")), "two tools are named 'a'"),
        (lambda: McpServer("tools", McpTool("f", read_only=True, finds="x")), "finds 'x'"),
        (lambda: McpTool("a b"), "must be 1 to 64 letters"),
        (lambda: McpTool("a", input_schema={"type": "array"}), "a JSON Schema of an object"),
        (lambda: McpTool("a", finds="b"), "must be read_only=True"),
        (lambda: McpTool("a", read_only=True, dedupe_by=("x",)), "makes no effect to dedupe"),
    ],
)
def test_a_bad_server_says_what_is_wrong(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make()


def test_only_a_tool_call_is_an_outcome_the_session_traffic_is_plumbing(
    provider: McpProvider,
) -> None:
    """B and C come only with a tool's result: the client sends its stream's GET in a task of
    its own, so a C counted at the session's own answers would count differently each run."""
    import httpx

    headers = {"Authorization": f"Bearer {KEY.secret}"}

    def post(message: dict[str, Any], **more: str) -> httpx.Response:
        request = httpx.Request("POST", "https://tools.test/mcp", json=message,
                                headers={**headers, **more})
        return provider.handle(request)

    init = post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-06-18"}})
    session = init.headers["Mcp-Session-Id"]
    stream = provider.handle(httpx.Request("GET", "https://tools.test/mcp", headers=headers))
    call = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "send_email", "arguments": {"to": "a@example.com"}}},
                **{"Mcp-Session-Id": session})
    infos = [r.extensions["crashpoints"] for r in (init, stream, call)]
    assert [(i.operation, i.plumbing) for i in infos] == [
        ("mcp.message", True), ("mcp.stream", True), ("send_email", False)
    ]
    assert (stream.status_code, infos[2].kind, infos[2].effect_applied) == (405, "write", True)


def test_the_openai_agents_sdks_mcp_server_reaches_it_unchanged(
    url: str, provider: McpProvider
) -> None:
    """The OpenAI Agents SDK's ``MCPServerStreamableHttp``, given the URL and the header."""
    agents_mcp = pytest.importorskip("agents.mcp", reason="the OpenAI Agents SDK: [agents]")

    async def main() -> Any:
        params = {"url": url, "headers": {"Authorization": f"Bearer {KEY.secret}"}}
        async with agents_mcp.MCPServerStreamableHttp(params=params) as server:
            listed = await server.list_tools()
            called = await server.call_tool("send_email", {"to": "a@example.com"})
            return [t.name for t in listed], called

    names, called = asyncio.run(asyncio.wait_for(main(), 30))
    assert names == ["refund", "send_email", "find_email"] and not called.is_error
    assert [op for op, _ in effects(provider)] == ["send_email"]


def test_a_duplicated_request_is_handled_twice_and_answered_once(
    url: str, provider: McpProvider
) -> None:
    """The same tools/call sent again (a proxy's retry): a tool that dedupes answers its first
    result again and acts once; one that does not acts twice."""
    provider.faults.duplicate_requests(2)

    async def body(session: ClientSession) -> list[Any]:
        refund = await session.call_tool("refund", {"ticket_id": "t-3", "amount": 5})
        mail = await session.call_tool("send_email", {"to": "a@example.com"})
        return [refund, mail]

    refund, mail = in_session(url, body)
    assert not refund.is_error and not mail.is_error
    assert [op for op, _ in effects(provider)] == ["refund", "send_email", "send_email"]
    rows = [r for r in provider.journal.requests() if r.operation == "refund"]
    assert [(r.effect_applied, r.replayed) for r in rows] == [(True, False), (False, True)]
