"""The fake MCP server's provider: MCP's streamable HTTP transport at ``/mcp``.

JSON-RPC 2.0 in a POST, answered with one JSON body (``application/json``; the transport lets a
server answer so instead of with an event stream), and the handshake era of the protocol
(``initialize``). A client that probes the newer ``server/discover`` first is told the method
does not exist and falls back to ``initialize``, as the SDK's clients do. ``GET /mcp`` (a
stream of the server's own messages) is refused with 405, which the protocol allows.

Sessions, as the server is deployed (:attr:`McpServer.stateless`): a server with sessions
answers ``initialize`` with an ``Mcp-Session-Id`` that every later request must present
(400 without one, 404 for one it forgot), and ``DELETE /mcp`` ends it; a stateless server
hands out none, takes every request on its own (with or without ``initialize`` before it), and
refuses ``DELETE`` with 405, as the SDK's ``stateless_http=True`` does.

Every provider fault applies: ``tools/call`` of a tool that is not read-only is a write
(lost results, refusals, B at the wire), one of a ``finds`` tool a lookup, everything else a
read. One more is a server with sessions' own: ``faults.lose_sessions(n)`` makes the next ``n``
writes find their session forgotten (a restart, a load balancer sending them to another
node): 404, nothing applied, and the client must ``initialize`` again;
:meth:`McpProvider.forget_sessions` forgets every session at once. A stateless server never
takes that switch: it has no session to forget.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx

from ._faults import RequestKind, take
from ._idempotency import reserve as _reserve
from ._idempotency import saver as _saver
from ._provider import (
    Call,
    EffectDraft,
    Provider,
    Reply,
    Route,
    json_body,
    payload_hash,
)

__all__ = ["McpProvider"]


class _Tool(Protocol):
    """What the provider reads of an ``McpTool`` (``_mcp.py`` describes it; naming it here
    would make the two modules import each other)."""

    @property
    def name(self) -> str: ...
    @property
    def input_schema(self) -> Mapping[str, Any]: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def dedupe_by(self) -> tuple[str, ...] | None: ...
    @property
    def finds(self) -> str | None: ...
    @property
    def writes(self) -> bool: ...
    def listed(self) -> dict[str, Any]: ...


class _Server(Protocol):
    """What the provider reads of an ``McpServer``."""

    @property
    def name(self) -> str: ...
    @property
    def stateless(self) -> bool: ...
    @property
    def tools(self) -> tuple[_Tool, ...]: ...

#: The handshake-era protocol versions this server speaks, oldest first.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SESSION_HEADER = "Mcp-Session-Id"
_PATH = re.compile(r"/mcp/?")
#: JSON-RPC error codes.
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_sessions(
    id TEXT PRIMARY KEY, created REAL NOT NULL, label TEXT, version TEXT NOT NULL,
    forgotten INTEGER NOT NULL DEFAULT 0
)
"""


def _message(request: httpx.Request) -> dict[str, Any] | None:
    """The JSON-RPC message of a POST (None when it is not one object)."""
    try:
        body = json.loads(request.content.decode("utf-8") or "null")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def _calls(tool: str) -> Callable[[httpx.Request], bool]:
    def accepts(request: httpx.Request) -> bool:
        message = _message(request)
        if message is None or message.get("method") != "tools/call":
            return False
        params = message.get("params")
        return isinstance(params, dict) and params.get("name") == tool

    return accepts


class McpProvider(Provider):
    """The provider of an :class:`McpServer` (made by :meth:`McpServer.provider`)."""

    server: _Server
    request_id_header = "X-Request-Id"
    has_search = False

    def __init__(self, journal_path: Any, **kwargs: Any) -> None:
        super().__init__(journal_path, **kwargs)
        with self.journal.transaction() as conn:
            conn.execute(_SCHEMA)

    # -- routes -------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        name = self.server.name
        out = []
        for tool in self.server.tools:
            kind: RequestKind = "write" if tool.writes else ("lookup" if tool.finds else "read")
            scope = f"{name}:write" if tool.writes else f"{name}:read"
            out.append(
                Route("POST", _PATH, tool.name, kind, scope, self._tool_handler(tool),
                      accepts=_calls(tool.name))
            )
        # The session's own traffic: no outcome at its answers (the client sends its stream's
        # GET in a task of its own, so a C counted there would count differently each run).
        out += [
            Route("POST", _PATH, "mcp.message", "read", f"{name}:read", self._message,
                  plumbing=True),
            Route("GET", _PATH, "mcp.stream", "read", f"{name}:read", self._no_stream,
                  plumbing=True),
            Route("DELETE", _PATH, "mcp.end_session", "read", f"{name}:read", self._end,
                  plumbing=True),
        ]
        return out

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        rpc = {401: INVALID_REQUEST, 403: INVALID_REQUEST, 404: INVALID_REQUEST}.get(
            status, -32603 if status >= 500 else INVALID_REQUEST
        )
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": rpc, "message": message}}
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request; a write the ``duplicate_requests`` switch takes is handled
        twice (the same request sent again), and the second answer is the client's."""
        request.read()
        route, _ = self._match(request)
        if route is not None and route.kind == "write" and not route.plumbing:
            with self.journal.transaction() as conn:
                twice = take(conn, "request_duplicated", "write") is not None
            if twice:  # the first answer never reaches the client, whatever it was
                with contextlib.suppress(httpx.HTTPError):
                    super().handle(request)
        return super().handle(request)

    # -- sessions -----------------------------------------------------------------------------

    def forget_sessions(self) -> int:
        """Forget every session handed out so far (the server restarted, or another node
        answers): their next request gets 404, and the client must initialize again. Returns
        how many were forgotten."""
        with self.journal.transaction() as conn:
            return conn.execute(
                "UPDATE mcp_sessions SET forgotten=1 WHERE forgotten=0"
            ).rowcount

    def sessions(self) -> list[dict[str, Any]]:
        """Every session, oldest first: ``id``, ``created``, ``label``, ``version``,
        ``forgotten``."""
        with self.journal.connection() as conn:
            rows = conn.execute("SELECT * FROM mcp_sessions ORDER BY created, id").fetchall()
        return [dict(row) for row in rows]

    def _session(self, call: Call) -> Reply | None:
        """None when the request's session is one the server knows (any request, for a
        stateless server); else the refusal."""
        if self.server.stateless:
            return None
        given = call.request.headers.get(SESSION_HEADER)
        if not given:
            return self._rpc_error(
                None, INVALID_REQUEST,
                f"Bad Request: no {SESSION_HEADER} header; send initialize first.", status=400,
            )
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT forgotten FROM mcp_sessions WHERE id=?", (given,)
            ).fetchone()
        if row is None or row[0]:
            return self._rpc_error(
                None, INVALID_REQUEST,
                f"Session {given} not found (this server no longer knows it): initialize a "
                "new session.",
                status=404,
            )
        return None

    def _lost_session(self, call: Call) -> bool:
        """Whether the ``lose_sessions`` switch takes this write: its session is forgotten
        (never on a stateless server: it has none)."""
        if self.server.stateless:
            return False
        with self.journal.transaction() as conn:
            if take(conn, "session_lost", "write") is None:
                return False
            conn.execute(
                "UPDATE mcp_sessions SET forgotten=1 WHERE id=?",
                (call.request.headers.get(SESSION_HEADER),),
            )
        return True

    # -- handlers -----------------------------------------------------------------------------

    def _rpc_error(
        self, rpc_id: object, code: int, message: str, *, status: int = 200
    ) -> Reply:
        body = {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def _result(self, rpc_id: object, result: Mapping[str, Any]) -> Reply:
        body = {"jsonrpc": "2.0", "id": rpc_id, "result": dict(result)}
        return Reply(200, json_body(body), {"Content-Type": "application/json"})

    def _message(self, call: Call) -> Reply:
        message = _message(call.request)
        if message is None or message.get("jsonrpc") != "2.0":
            return self._rpc_error(
                None, PARSE_ERROR, "The body is not one JSON-RPC 2.0 message.", status=400
            )
        method = message.get("method")
        rpc_id = message.get("id")
        if method == "initialize":
            return self._initialize(call, rpc_id, message.get("params"))
        if method == "server/discover":  # the newer era's probe: a client falls back
            return self._rpc_error(rpc_id, METHOD_NOT_FOUND, "Method not found: server/discover.")
        if not isinstance(method, str):
            # A response or an error from the client (to a request this server never sends).
            return Reply(202)
        if "id" not in message:  # a notification: accepted, never answered
            return Reply(202)
        refused = self._session(call)
        if refused is not None:
            return refused
        if method == "ping":
            return self._result(rpc_id, {})
        if method == "tools/list":
            return self._result(rpc_id, {"tools": [t.listed() for t in self.server.tools]})
        if method == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            return self._rpc_error(rpc_id, INVALID_PARAMS, f"Unknown tool: {name!r}.")
        return self._rpc_error(rpc_id, METHOD_NOT_FOUND, f"Method not found: {method}.")

    def _initialize(self, call: Call, rpc_id: object, params: object) -> Reply:
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
        session = f"{self.server.name}-session-{call.seq:06d}"
        reply = self._result(
            rpc_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": f"{self.server.name} (crashpoints fake)", "version": "1"},
            },
        )
        if self.server.stateless:  # no session: every request stands alone
            return reply
        reply.headers[SESSION_HEADER] = session
        label = call.key.label

        def store(conn: Any, _reply: Reply) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO mcp_sessions(id, created, label, version) "
                "VALUES (?, ?, ?, ?)",
                (session, call.now, label, version),
            )

        reply.on_commit = store
        return reply

    def _no_stream(self, call: Call) -> Reply:
        return Reply(405, b"", {"Allow": "POST" if self.server.stateless else "POST, DELETE"})

    def _end(self, call: Call) -> Reply:
        if self.server.stateless:  # as the SDK's stateless transport answers
            return Reply(405, b"", {"Allow": "POST"})
        given = call.request.headers.get(SESSION_HEADER)

        def store(conn: Any, _reply: Reply) -> None:
            conn.execute("UPDATE mcp_sessions SET forgotten=1 WHERE id=?", (given,))

        reply = Reply(200)
        reply.on_commit = store
        return reply

    def _tool_handler(self, tool: _Tool) -> Callable[[Call], Reply]:
        def handle(call: Call) -> Reply:
            message = _message(call.request) or {}
            rpc_id = message.get("id")
            refused = self._session(call)
            if refused is not None:
                return refused
            if tool.writes and self._lost_session(call):
                return self._rpc_error(
                    None, INVALID_REQUEST,
                    f"Session {call.request.headers.get(SESSION_HEADER)} not found (this server "
                    "restarted and no longer knows it): initialize a new session.",
                    status=404,
                )
            params = message.get("params") or {}
            arguments = params.get("arguments", {}) if isinstance(params, dict) else None
            if not isinstance(arguments, dict):
                return self._rpc_error(rpc_id, INVALID_PARAMS, "arguments must be an object.")
            missing = [
                name for name in tool.input_schema.get("required", ()) if name not in arguments
            ]
            if missing:
                return self._tool_error(
                    rpc_id, f"{tool.name}: missing argument(s) {', '.join(missing)}."
                )
            if tool.finds is not None:
                return self._find(call, rpc_id, tool, arguments)
            if tool.read_only:
                return self._text(rpc_id, {"tool": tool.name, "arguments": arguments})
            return self._apply(call, rpc_id, tool, arguments)

        return handle

    def _tool_error(self, rpc_id: object, text: str) -> Reply:
        return self._result(
            rpc_id, {"content": [{"type": "text", "text": text}], "isError": True}
        )

    def _text(self, rpc_id: object, value: Any) -> Reply:
        result: dict[str, Any] = {
            "content": [{"type": "text", "text": json.dumps(value, sort_keys=True)}],
            "isError": False,
        }
        if isinstance(value, dict):
            result["structuredContent"] = value
        else:
            result["structuredContent"] = {"result": value}
        return self._result(rpc_id, result)

    def _apply(
        self, call: Call, rpc_id: object, tool: _Tool, arguments: dict[str, Any]
    ) -> Reply:
        phash = payload_hash({"tool": tool.name, "arguments": arguments})
        if phash is None:
            return self._rpc_error(rpc_id, INVALID_PARAMS, "arguments are not plain JSON.")
        operation_key = phash
        claimed = None
        if tool.dedupe_by is not None and call.settings.idempotency:
            named = {name: arguments.get(name) for name in tool.dedupe_by}
            claimed = operation_key = f"{tool.name}:{json.dumps(named, sort_keys=True)}"
            early = _reserve(
                self, call, claimed, phash,
                in_use=lambda text: self._rpc_error(rpc_id, -32000, text),
                mismatch=lambda text: self._tool_error(
                    rpc_id, f"{tool.name} was already called with {json.dumps(named)} and "
                    f"other arguments: {text}"
                ),
            )
            if early is not None:
                if early.replayed:  # the first call's result, answered to this request's id
                    early.body = json_body({**json.loads(early.body), "id": rpc_id})
                    early.headers.pop("Content-Length", None)
                early.operation_key, early.payload_hash = operation_key, phash
                return early
        object_id = f"{tool.name}_{call.seq:06d}"
        obj = {"id": object_id, "tool": tool.name, "arguments": arguments}
        reply = self._text(rpc_id, obj)
        reply.effect = EffectDraft(tool.name, object_id, obj)
        reply.operation_key, reply.payload_hash = operation_key, phash
        reply.object_id = object_id
        if claimed is not None:
            reply.idempotency_key = claimed
            reply.on_commit = _saver(call, claimed)
        return reply

    def _find(
        self, call: Call, rpc_id: object, tool: _Tool, arguments: dict[str, Any]
    ) -> Reply:
        assert tool.finds is not None
        found = [
            obj for obj in self.lookup_all(call, tool.finds)
            if all(obj.get("arguments", {}).get(k) == v for k, v in arguments.items())
        ]
        reply = self._text(rpc_id, {"found": found})
        if found:
            reply.object_id = str(found[0].get("id"))
        return reply

