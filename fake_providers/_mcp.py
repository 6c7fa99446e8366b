"""A fake MCP server: the tools an agent calls over the Model Context Protocol, as a provider.

An :class:`McpServer` is a name and tools (:class:`McpTool`); its provider
(:class:`~fake_providers.McpProvider`, ``_mcp_provider.py``) speaks MCP's streamable HTTP
transport at ``/mcp``, the way the official ``mcp`` client (1.x and 2.x) and the frameworks on
it (the OpenAI Agents SDK's ``MCPServerStreamableHttp``, langchain-mcp-adapters) reach a
server: JSON-RPC 2.0 in a POST, answered with one JSON body, after the handshake
(``initialize``). A server is deployed one of two ways, and the fake is either:

- with sessions (the default): ``initialize`` answers an ``Mcp-Session-Id``, every later
  request must present it, and a session can be forgotten (a restart, a load balancer sending
  the call to another node): the fault ``forget_session``;
- stateless (``stateless=True``, the SDK's ``stateless_http=True``, how servers behind a load
  balancer usually run): no ``Mcp-Session-Id``, every request stands alone, and there is no
  session to forget, so that fault is not applicable to it.

What a tool does to the world is journalled like any provider's effect, the ground truth of
the crash tests: a tool that is not read-only makes an effect per call (its object type the
tool's name, its payload the arguments), unless ``dedupe_by`` names the arguments that make
two calls the same effect (then the server honours its ``idempotentHint``: the same values
again answer the first result and make nothing new). A read-only tool with ``finds`` looks the
effects of another tool up by the arguments it is given (a lookup recovery can use). The
annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``)
are what ``tools/list`` tells the client: claims, as on a real server; a tool with
``annotations=False`` claims nothing (``tools/list`` shows no ``annotations``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from ._mcp_provider import McpProvider
from ._provider import ApiDescription, described

__all__ = ["McpProvider", "McpServer", "McpTool"]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclasses.dataclass(frozen=True)
class McpTool:
    """One tool of an :class:`McpServer`.

    ``name`` and ``description`` as ``tools/list`` shows them; ``input_schema`` the JSON
    Schema of its arguments (its ``required`` names are checked: a call without one is a
    tool error, never an effect). The annotations are the claims the server makes:
    ``read_only`` (``readOnlyHint``), ``destructive`` (``destructiveHint``), ``idempotent``
    (``idempotentHint``), ``open_world`` (``openWorldHint``); ``annotations=False`` makes no
    claim at all (``tools/list`` shows no ``annotations``; then ``idempotent``,
    ``destructive`` and ``open_world`` keep their defaults, and ``read_only`` only says what
    the tool does). What the tool really does: a read-only tool makes no effect; any other
    tool makes one per call, unless ``dedupe_by`` names the arguments whose values make two
    calls the same effect (the second answers the first's result). ``finds`` (a read-only
    tool) names another tool whose effects it looks up, matching the arguments it is given.
    Raises ``ValueError`` for a bad name, schema or combination.
    """

    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = dataclasses.field(
        default_factory=lambda: {"type": "object"}
    )
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True
    dedupe_by: tuple[str, ...] | None = None
    finds: str | None = None
    annotations: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"McpTool name {self.name!r} must be 1 to 64 letters, digits, '_', '-' or '.'."
            )
        if not isinstance(self.input_schema, Mapping) or self.input_schema.get(
            "type", "object"
        ) != "object":
            raise ValueError(
                f"McpTool({self.name!r}): input_schema must be a JSON Schema of an object "
                "(a dict with type 'object')."
            )
        if self.finds is not None and not self.read_only:
            raise ValueError(
                f"McpTool({self.name!r}): a tool that finds {self.finds!r} looks up, so it "
                "must be read_only=True."
            )
        if self.dedupe_by is not None and self.read_only:
            raise ValueError(
                f"McpTool({self.name!r}): a read-only tool makes no effect to dedupe."
            )
        if self.dedupe_by is not None:
            object.__setattr__(self, "dedupe_by", tuple(self.dedupe_by))
        self._check_claims()

    def _check_claims(self) -> None:
        if not isinstance(self.annotations, bool):
            raise ValueError(
                f"McpTool({self.name!r}): annotations={self.annotations!r} must be True (claim "
                "the hints) or False (no annotations at all)."
            )
        claimed = [
            f"{name}={value!r}"
            for name, value, default in (
                ("idempotent", self.idempotent, False),
                ("destructive", self.destructive, True),
                ("open_world", self.open_world, True),
            )
            if value != default
        ]
        if not self.annotations and claimed:
            raise ValueError(
                f"McpTool({self.name!r}): annotations=False claims nothing, but "
                f"{', '.join(claimed)} is a claim; drop it or the annotations=False."
            )

    @property
    def writes(self) -> bool:
        return not self.read_only

    def listed(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it."""
        shown: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }
        if self.annotations:
            shown["annotations"] = {
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive and not self.read_only,
                "idempotentHint": self.idempotent or self.read_only,
                "openWorldHint": self.open_world,
            }
        return shown


class McpServer(ApiDescription["McpProvider"]):
    """An MCP server described as tools: the fake provider of it, for crash tests.

    ``McpServer(name, *tools, stateless=False, base_url=None)``. ``name`` names the provider
    (``providers=[server]`` in the marker; ``ctx.base_url(name)`` is the server's root, its
    endpoint ``ctx.base_url(name) + "/mcp"``; ``ctx.api_key(name, task)`` the bearer token).
    ``stateless=True`` serves it as ``stateless_http=True`` servers run: no
    ``Mcp-Session-Id``, every request stands alone, no session to forget. Raises
    ``ValueError`` for a bad name or tool, two tools of one name, or a ``finds`` naming no
    tool that writes.
    """

    is_recording = False
    #: A request to it may arrive twice (a proxy's retry of the same JSON-RPC request).
    duplicates_requests = True
    request_id_header = "X-Request-Id"

    def __init__(
        self, name: str, *tools: McpTool, stateless: bool = False, base_url: str | None = None
    ) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", name or ""):
            raise ValueError(
                f"McpServer name {name!r} must be lower case letters, digits, '-' or '_', "
                "starting with a letter (it names the provider, its scopes and its URL)."
            )
        if not isinstance(stateless, bool):
            raise ValueError(f"McpServer({name!r}): stateless={stateless!r} is not True or False.")
        _check_tools(name, tools)
        self.name = name
        self.tools: tuple[McpTool, ...] = tuple(tools)
        self.stateless = stateless
        #: Whether its clients hold sessions (``Mcp-Session-Id``) it can forget.
        self.has_sessions = not stateless
        self.base_url = base_url or f"https://{name}.crashpoints.test"

    def __repr__(self) -> str:
        how = ", stateless" if self.stateless else ""
        return f"McpServer({self.name!r}, {len(self.tools)} tool(s){how})"

    def tool(self, name: str) -> McpTool | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    @property
    def idempotency_header(self) -> str | None:
        """Where its idempotency is, for a crash test: in the arguments of its tools that
        dedupe (``None`` when none does)."""
        return "arguments" if any(tool.dedupe_by for tool in self.tools) else None

    @property
    def has_lookup(self) -> bool:
        """Whether a tool looks effects up (``finds``)."""
        return any(tool.finds for tool in self.tools)

    @property
    def has_search(self) -> bool:
        return False

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset({f"{self.name}:read", f"{self.name}:write"})

    def _provider_class(self) -> type[McpProvider]:
        """The class of this server's fake provider: an :class:`McpProvider` of its tools."""
        return described(
            McpProvider, "Mcp", self.name, self.base_url, has_lookup=self.has_lookup,
            has_search=False, server=self,
        )


def _check_tools(name: str, tools: tuple[McpTool, ...]) -> None:
    if not tools:
        raise ValueError(f"McpServer({name!r}) has no tools; give it some McpTool(...).")
    for tool in tools:
        if not isinstance(tool, McpTool):
            raise ValueError(f"McpServer({name!r}): {tool!r} is not an McpTool.")
    names = [tool.name for tool in tools]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"McpServer({name!r}): two tools are named {twice[0]!r}.")
    writers = {tool.name for tool in tools if tool.writes}
    for tool in tools:
        if tool.finds is not None and tool.finds not in writers:
            raise ValueError(
                f"McpServer({name!r}): {tool.name!r} finds {tool.finds!r}, which is not "
                f"one of its tools that write ({', '.join(sorted(writers)) or 'none'})."
            )
