"""The fake MCP server, reached by the official ``mcp`` client unchanged over loopback: the
handshake, tools and their annotations (or none), effects in the journal, a tool that dedupes
(its first result answered to the second call's id), a lookup tool, refusals without an
effect, a session the server forgets, and a stateless server. The same tests run with the mcp
1.x client (``make test-mcp1``): mcp 1 spells the result's fields in camel case and builds its
client on httpx, mcp 2 on httpx2."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_providers import ApiKey, McpProvider, McpServer, McpTool, serve

mcp = pytest.importorskip("mcp", reason="the mcp SDK is an agents extra: pip install -e .[agents]")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

MAJOR = int(importlib.metadata.version("mcp").split(".")[0])
#: The HTTP client library the SDK's client takes, and the error a failed request raises.
CLIENT_HTTP: Any = importlib.import_module("httpx2" if MAJOR >= 2 else "httpx")
_exceptions = importlib.import_module("mcp.shared.exceptions")
MCPError: type[Exception] = getattr(_exceptions, "MCPError", None) or _exceptions.McpError


def field(value: object, snake: str) -> Any:
    """A field of the SDK's models under either major's name (``is_error``, ``isError``)."""
    head, *rest = snake.split("_")
    camel = head + "".join(part.title() for part in rest)
    return getattr(value, snake) if hasattr(value, snake) else getattr(value, camel)

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
    async def main() -> Any:
        async with (
            CLIENT_HTTP.AsyncClient(headers={"Authorization": f"Bearer {KEY.secret}"}) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
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
    refund, email, find = (
        field(tools[name], "annotations") for name in ("refund", "send_email", "find_email")
    )
    assert field(tools["refund"], "input_schema")["required"] == ["ticket_id", "amount"]
    hints = ("idempotent_hint", "read_only_hint", "destructive_hint")
    assert [field(refund, hint) for hint in hints] == [True, False, True]
    assert [field(email, hint) for hint in hints] == [False, False, True]
    assert [field(find, hint) for hint in hints] == [True, True, False]


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
    structured = field(first, "structured_content")
    assert structured == field(again, "structured_content")  # replayed, same id
    assert structured["arguments"] == {"ticket_id": "t-1", "amount": 500}
    assert field(other, "is_error") and "already called" in other.content[0].text
    assert not any(field(m, "is_error") for m in mail)
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

    found = field(in_session(url, body), "structured_content")["found"]
    assert [f["arguments"]["to"] for f in found] == ["a@example.com"]


def test_a_call_without_a_required_argument_is_a_tool_error_and_no_effect(
    url: str, provider: McpProvider
) -> None:
    result = in_session(url, lambda s: s.call_tool("refund", {"amount": 5}))
    assert field(result, "is_error") and "missing argument(s) ticket_id" in result.content[0].text
    assert effects(provider) == []


def test_a_refused_call_applies_nothing(url: str, provider: McpProvider) -> None:
    provider.faults.server_errors(1, on="writes")
    with pytest.raises((MCPError, CLIENT_HTTP.HTTPStatusError)):  # mcp 1: the HTTP error
        in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert effects(provider) == []


def test_a_forgotten_session_is_404_and_a_new_one_works(url: str, provider: McpProvider) -> None:
    provider.faults.lose_sessions(1)
    with pytest.raises(MCPError, match=r"not found|Session terminated"):  # mcp 2 | mcp 1
        in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert effects(provider) == []
    forgotten = [s["forgotten"] for s in provider.sessions()]
    assert forgotten == [1]
    in_session(url, lambda s: s.call_tool("send_email", {"to": "a@example.com"}))
    assert [op for op, _ in effects(provider)] == ["send_email"]
    provider.forget_sessions()
    assert all(s["forgotten"] for s in provider.sessions())


def test_the_newer_eras_probe_is_told_to_fall_back(url: str) -> None:
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
    assert names == ["refund", "send_email", "find_email"] and not field(called, "is_error")
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
    assert not field(refund, "is_error") and not field(mail, "is_error")
    assert [op for op, _ in effects(provider)] == ["refund", "send_email", "send_email"]
    rows = [r for r in provider.journal.requests() if r.operation == "refund"]
    assert [(r.effect_applied, r.replayed) for r in rows] == [(True, False), (False, True)]


STATELESS = McpServer(
    "tools",
    McpTool("send_email", input_schema={"type": "object", "required": ["to"]}),
    McpTool("notify", annotations=False),
    stateless=True,
)


@pytest.fixture
def stateless(tmp_path: Path) -> Iterator[tuple[McpProvider, str]]:
    provider = STATELESS.provider(tmp_path / "stateless.db", keys=[KEY])
    with serve(provider) as base:
        yield provider, base + "/mcp"
    provider.close()


def test_a_stateless_server_is_reached_by_the_client_and_keeps_no_session(
    stateless: tuple[McpProvider, str],
) -> None:
    provider, url = stateless

    async def body(session: ClientSession) -> Any:
        listed = await session.list_tools()
        called = await session.call_tool("send_email", {"to": "a@example.com"})
        return listed, called

    listed, called = in_session(url, body)
    assert [tool.name for tool in listed.tools] == ["send_email", "notify"]
    assert not field(called, "is_error")
    assert [op for op, _ in effects(provider)] == ["send_email"]
    assert provider.sessions() == [] and provider.forget_sessions() == 0


def test_on_a_stateless_server_every_request_stands_alone(
    stateless: tuple[McpProvider, str],
) -> None:
    """As the SDK's ``stateless_http=True``: no ``Mcp-Session-Id`` from ``initialize``, a
    call with no handshake (or a session header it never gave) is served, ``DELETE`` is 405,
    and the switch that forgets sessions has nothing to take."""
    provider, url = stateless
    headers = {"Authorization": f"Bearer {KEY.secret}", "Accept": "application/json"}
    hello = httpx.post(url, headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18"}})
    assert hello.status_code == 200 and "mcp-session-id" not in hello.headers
    provider.faults.lose_sessions(1)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "send_email", "arguments": {"to": "a@example.com"}}}
    alone = httpx.post(url, headers=headers, json=call)
    stale = httpx.post(url, headers={**headers, "Mcp-Session-Id": "tools-session-000001"},
                       json=call)
    assert [a.status_code for a in (alone, stale)] == [200, 200]
    assert not alone.json()["result"]["isError"]
    assert [op for op, _ in effects(provider)] == ["send_email", "send_email"]
    assert httpx.delete(url, headers=headers).status_code == 405


def test_a_tool_without_annotations_shows_none(stateless: tuple[McpProvider, str]) -> None:
    provider, url = stateless
    listed = httpx.post(url, headers={"Authorization": f"Bearer {KEY.secret}"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/list"}).json()["result"]["tools"]
    shown = {tool["name"]: tool for tool in listed}
    assert "annotations" not in shown["notify"] and "annotations" in shown["send_email"]
    tools = in_session(url, lambda s: s.list_tools()).tools
    assert [field(tool, "annotations") is None for tool in tools] == [False, True]
    # It still acts as a tool that is not read-only: an effect per call.
    in_session(url, lambda s: s.call_tool("notify", {}))
    assert [op for op, _ in effects(provider)] == ["notify"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: McpTool("a", annotations=False, idempotent=True),
         "annotations=False claims nothing, but idempotent=True is a claim"),
        (lambda: McpTool("a", annotations=False, destructive=False, open_world=False),
         "destructive=False, open_world=False is a claim"),
        (lambda: McpTool("a", annotations="no"), "annotations='no' must be True"),
        (lambda: McpServer("tools", McpTool("a"), stateless="yes"),
         "stateless='yes' is not True or False"),
    ],
)
def test_a_bad_claim_or_deployment_says_what_is_wrong(
    make: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize("deployed", ["with sessions", "stateless"])
def test_langchain_mcp_adapters_reach_it_unchanged(
    tmp_path: Path, deployed: str
) -> None:
    """langchain-mcp-adapters (which requires mcp 1.x: ``make test-mcp1`` installs it), given
    the URL and the header, lists the tools and calls one as a LangChain tool."""
    adapters = pytest.importorskip("langchain_mcp_adapters.client",
                                   reason="langchain-mcp-adapters requires mcp<2")
    server = STATELESS if deployed == "stateless" else SERVER
    provider = server.provider(tmp_path / "tools.db", keys=[KEY])

    async def main(url: str) -> list[str]:
        client = adapters.MultiServerMCPClient({"tools": {
            "transport": "streamable_http", "url": url,
            "headers": {"Authorization": f"Bearer {KEY.secret}"}}})
        tools = {tool.name: tool for tool in await client.get_tools()}
        await tools["send_email"].ainvoke({"to": "a@example.com"})
        return list(tools)

    with serve(provider) as base:
        names = asyncio.run(asyncio.wait_for(main(base + "/mcp"), 30))
    assert names == [tool.name for tool in server.tools]
    assert [op for op, _ in effects(provider)] == ["send_email"]
    provider.close()
