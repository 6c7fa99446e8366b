"""model: a scripted language model behind the OpenAI and Anthropic APIs.

Endpoints (JSON; every answer carries ``x-request-id`` and ``request-id``)::

    POST /v1/chat/completions   OpenAI Chat Completions (also /chat/completions)   model:read
    POST /v1/responses          OpenAI Responses (also /responses)                 model:read
    POST /v1/messages           Anthropic Messages                                  model:read

so that the ``openai`` SDK (``base_url=<server>/v1``) and the ``anthropic`` SDK
(``base_url=<server>``) run unchanged against it. Keys go in ``Authorization: Bearer <key>``
(OpenAI) or ``x-api-key: <key>`` (Anthropic). A request with ``stream: true`` gets the same
answer as the API's server-sent events (``_model_stream.py``).

Every answer comes from the provider's :class:`~fake_providers.Script` (``Model(...,
script=...)`` or ``model.script = ...``): the conversation the request carries is normalized
(system, user, assistant with its tool calls, tool results) and the script answers one turn,
which is rendered in the API's own format: ``tool_calls`` (Chat Completions),
``function_call`` items (Responses), ``tool_use`` blocks (Messages). Tool call ids are
derived from the request id: the same schedule gives the same ids, and a question asked again
gets new ones, as a real model's would be.

A model call is a read: it applies no effect, and its journal row is kind ``read`` (payload
hash: the conversation's digest). Its answer is also recorded in the ``model_calls`` table of
the journal (:meth:`Model.calls`): API, model name, digest, turn index, how many times the
same question was answered before (``asked``), the text and tool calls, estimated tokens
(four characters a token), and the script's error if it had no answer. The fault switches act
on its generations as on writes: ``server_errors``, ``rate_limits`` (429 with
``Retry-After``) and ``write_timeouts`` refuse one before it is made; ``lose_responses``
makes it (journaled, a question answered) and loses the answer.

Errors use one body both SDKs read: ``{"type": "error", "error": {"type", "message", "code",
"param"}}``. A script with no answer (a turn it does not have, a tool the request does not
offer, a function that raised) is a 400 with ``code: "script_error"``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from pytest_crashpoints.errors import ScriptError

from ._model_stream import stream_body
from ._model_wire import (
    BadRequest,
    call_id,
    estimate_tokens,
    json_object,
    parse_chat,
    parse_messages,
    parse_responses,
    render_chat,
    render_messages,
    render_responses,
)
from ._provider import Call, Provider, Reply, Route, json_body
from ._script import Conversation, Message, ModelTurn, Script, ToolCall

__all__ = ["Model", "ModelCall"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS model_calls(
    request_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, time REAL NOT NULL, api TEXT NOT NULL,
    model TEXT NOT NULL, label TEXT, digest TEXT NOT NULL, turn INTEGER NOT NULL,
    asked INTEGER NOT NULL, text TEXT, tool_calls TEXT NOT NULL, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, error TEXT, streamed INTEGER NOT NULL)
"""
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}


@dataclass(frozen=True)
class ModelCall:
    """One answer the model made (or could not make), as its journal recorded it.

    ``api``: ``"chat.completions"``, ``"responses"`` or ``"messages"``; ``model``: the model
    the request named; ``label``: the label of the derived key that asked (the process);
    ``digest``: the conversation's digest (the same question, the same digest); ``turn``: how
    many answers of the model the conversation held; ``asked``: how many times the same
    question was answered before; ``text`` and ``tool_calls``: the answer (with the ids the
    model gave the calls); ``prompt_tokens``, ``completion_tokens``: estimates (four characters
    a token); ``error``: why the script had no answer (then nothing was answered);
    ``streamed``: whether the request asked for the answer as a stream of events.
    """

    request_id: str
    seq: int
    time: float
    api: str
    model: str
    label: str | None
    digest: str
    turn: int
    asked: int
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    prompt_tokens: int
    completion_tokens: int
    error: str | None
    streamed: bool = False

    @property
    def answer(self) -> str:
        """The answer in a few words: ``refund(amount=1500)``, or its text."""
        if self.error:
            return f"no answer: {self.error}"
        return str(ModelTurn(self.text, tuple(ToolCall(c.name, c.arguments) for c in
                                              self.tool_calls)))


class Model(Provider):
    """The model provider: answers the OpenAI and Anthropic APIs from a script. See the
    module docstring. ``script``: the :class:`~fake_providers.Script` that answers (settable
    later as ``model.script``); the other arguments as for every provider."""

    name = "model"
    default_base_url = "https://model.crashpoints.test"
    request_id_prefix = "req_model_"
    has_lookup = False
    has_search = False
    is_model: ClassVar[bool] = True

    def __init__(self, journal_path: Any, *, script: Script | None = None, **kwargs: Any) -> None:
        super().__init__(journal_path, **kwargs)
        if script is not None and not isinstance(script, Script):
            raise ScriptError(f"script must be a fake_providers.Script, not {script!r}.")
        self.script = script
        with self.journal.transaction() as conn:
            conn.execute(_SCHEMA)

    def routes(self) -> list[Route]:
        def route(pattern: str, operation: str, handler: Callable[[Call], Reply]) -> Route:
            return Route("POST", re.compile(pattern), operation, "read", "model:read", handler,
                         generates=True)

        return [
            route(r"(?:/v1)?/chat/completions", "chat.completions.create", self._chat),
            route(r"(?:/v1)?/responses", "responses.create", self._responses),
            route(r"/v1/messages", "messages.create", self._messages),
        ]

    def credential(self, request: httpx.Request) -> str | None:
        anthropic: str | None = request.headers.get("x-api-key")  # Anthropic's header
        if anthropic is not None:
            return anthropic.strip() or None
        return super().credential(request)

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        body = {"type": "error",
                "error": {"type": kind, "message": message, "code": code, "param": None}}
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    # -- the journal of answers --------------------------------------------------------------

    def calls(self, *, label: str | None = None) -> list[ModelCall]:
        """Every answer the model made (or could not make), in order; ``label`` selects the
        calls of one derived key (one process)."""
        where, args = ("WHERE label=?", (label,)) if label is not None else ("", ())
        with self.journal.connection() as conn:
            rows = conn.execute(f"SELECT * FROM model_calls {where} ORDER BY seq", args).fetchall()
        return [_call_record(row) for row in rows]

    def notes(self) -> dict[str, str]:
        notes = {}
        for record in self.calls():
            again = f", asked again ({_ordinal(record.asked + 1)} time)" if record.asked else ""
            notes[record.request_id] = f"turn {record.turn}{again}: {record.answer}"
        return notes

    def _asked(self, digest: str) -> int:
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM model_calls WHERE digest=? AND error IS NULL", (digest,)
            ).fetchone()
        return int(row[0])

    # -- the three APIs ----------------------------------------------------------------------

    def _chat(self, call: Call) -> Reply:
        return self._generate(call, "chat.completions", parse_chat, render_chat)

    def _responses(self, call: Call) -> Reply:
        return self._generate(call, "responses", parse_responses, render_responses)

    def _messages(self, call: Call) -> Reply:
        return self._generate(call, "messages", parse_messages, render_messages)

    def _generate(
        self,
        call: Call,
        api: str,
        parse: Callable[[dict[str, Any]], tuple[list[Message], list[str]]],
        render: Callable[[Call, dict[str, Any], ModelTurn, tuple[int, int]], dict[str, Any]],
    ) -> Reply:
        try:
            body = json.loads(call.request.content.decode("utf-8") or "null")
        except (UnicodeDecodeError, ValueError):
            return self.error(400, "The request body is not valid JSON.", code="invalid_json")
        try:
            request, model, messages, tools = _read_request(body, parse)
        except BadRequest as exc:
            return self.error(400, f"{exc}.", code="invalid_request")
        conversation = Conversation(tuple(messages), tuple(tools), api, model)
        digest = conversation.digest
        conversation = Conversation(
            conversation.messages, conversation.tools, api, model, asked=self._asked(digest)
        )
        prompt_tokens = estimate_tokens(json.dumps(body.get("messages") or body.get("input") or ""))
        key = call.key
        record: dict[str, Any] = {
            "request_id": call.request_id, "seq": call.seq, "time": call.now, "api": api,
            "model": model, "label": key.label, "digest": digest, "turn": conversation.turn,
            "asked": conversation.asked, "text": None, "tool_calls": "[]",
            "prompt_tokens": prompt_tokens, "completion_tokens": 0, "error": None,
            "streamed": int(bool(request.get("stream"))),
        }
        try:
            turn = self._answer(conversation)
        except ScriptError as exc:
            record["error"] = str(exc)
            reply = self.error(400, f"crashpoints script: {exc}", code="script_error")
            reply.payload_hash = digest
            reply.on_commit = _store(record)
            return reply
        named = _named_calls(turn.tool_calls, api, call.request_id)
        turn = ModelTurn(turn.text, named)
        completion_tokens = estimate_tokens((turn.text or "") + json.dumps(
            [[c.name, dict(c.arguments)] for c in named]))
        record.update(
            text=turn.text,
            tool_calls=json.dumps([[c.id, c.name, dict(c.arguments)] for c in named]),
            completion_tokens=completion_tokens,
        )
        answer = render(call, request, turn, (prompt_tokens, completion_tokens))
        body, content_type = json_body(answer), "application/json"
        if request.get("stream"):
            body, content_type = stream_body(api, answer, request), "text/event-stream"
        return Reply(
            200,
            body,
            {"Content-Type": content_type, "request-id": call.request_id},
            payload_hash=digest,
            tool_calls=tuple(c.name for c in named),
            on_commit=_store(record),
        )

    def _answer(self, conversation: Conversation) -> ModelTurn:
        """The script's turn for ``conversation``. Raises :class:`ScriptError` when the
        model has no script, or the script no answer."""
        if self.script is None:
            raise ScriptError(
                "the model has no script: give one (crashpoints.run(..., model=Script(...)) "
                "in a crash test, Model(..., script=...) or model.script = ... otherwise)."
            )
        return self.script.answer(conversation)


def _read_request(
    body: Any, parse: Callable[[dict[str, Any]], tuple[list[Message], list[str]]]
) -> tuple[dict[str, Any], str, list[Message], list[str]]:
    """The request ``body`` read with its API's ``parse``: the request, the model it names,
    its messages and its tools. Raises :class:`BadRequest` for what this fake model does
    not do (keep conversations, answer more than one choice)."""
    request = json_object(body, "the request body")
    if request.get("previous_response_id") or request.get("conversation"):
        raise BadRequest(
            "this fake model keeps no conversations: send the whole input each time "
            "(no previous_response_id or conversation)"
        )
    if request.get("n") not in (None, 1):
        raise BadRequest("this fake model answers one choice: leave n at 1")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model is required (the name of a model, any string)")
    messages, tools = parse(request)
    return request, model, messages, tools


def _named_calls(
    calls: Iterable[ToolCall], api: str, request_id: str
) -> tuple[ToolCall, ...]:
    """The script's tool ``calls`` with the ids ``api`` gives them in the answer to request
    ``request_id`` (``toolu_...`` for Anthropic's, ``call_...`` for OpenAI's)."""
    prefix = "toolu_" if api == "messages" else "call_"
    return tuple(
        ToolCall(c.name, c.arguments, prefix + call_id(request_id, index))
        for index, c in enumerate(calls)
    )


def _store(record: dict[str, Any]) -> Callable[[sqlite3.Connection, Reply], None]:
    def store(conn: sqlite3.Connection, reply: Reply) -> None:
        conn.execute(
            f"INSERT INTO model_calls({', '.join(record)}) "
            f"VALUES ({', '.join(':' + name for name in record)})",
            record,
        )

    return store


def _call_record(row: sqlite3.Row) -> ModelCall:
    return ModelCall(
        request_id=row["request_id"], seq=row["seq"], time=row["time"], api=row["api"],
        model=row["model"], label=row["label"], digest=row["digest"], turn=row["turn"],
        asked=row["asked"], text=row["text"],
        tool_calls=tuple(ToolCall(name, args, call_id)
                         for call_id, name, args in json.loads(row["tool_calls"])),
        prompt_tokens=row["prompt_tokens"], completion_tokens=row["completion_tokens"],
        error=row["error"], streamed=bool(row["streamed"]),
    )


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


