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

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from pytest_crashpoints.errors import ScriptError

from ._model_stream import stream_body
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


class _BadRequest(Exception):
    pass


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _text_of(content: Any) -> str:
    """The text of a message content: a string, or a list of text parts of any API."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") in ("tool_result",):
                texts.append(_text_of(part.get("content")))
        return "\n".join(texts)
    raise _BadRequest(f"message content must be a string or a list of parts, not {content!r}")


def _arguments(name: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise _BadRequest(
                f"the arguments of the tool call {name!r} are not JSON: {raw!r}"
            ) from None
        if isinstance(value, dict):
            return value
    raise _BadRequest(f"the arguments of the tool call {name!r} are not a JSON object: {raw!r}")


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _BadRequest(f"{what} must be a JSON object")
    return value


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
        return self._generate(call, "chat.completions", _parse_chat, _render_chat)

    def _responses(self, call: Call) -> Reply:
        return self._generate(call, "responses", _parse_responses, _render_responses)

    def _messages(self, call: Call) -> Reply:
        return self._generate(call, "messages", _parse_messages, _render_messages)

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
        except _BadRequest as exc:
            return self.error(400, f"{exc}.", code="invalid_request")
        conversation = Conversation(tuple(messages), tuple(tools), api, model)
        digest = conversation.digest
        conversation = Conversation(
            conversation.messages, conversation.tools, api, model, asked=self._asked(digest)
        )
        prompt_tokens = _tokens(json.dumps(body.get("messages") or body.get("input") or ""))
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
        completion_tokens = _tokens((turn.text or "") + json.dumps(
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
    its messages and its tools. Raises :class:`_BadRequest` for what this fake model does
    not do (keep conversations, answer more than one choice)."""
    request = _object(body, "the request body")
    if request.get("previous_response_id") or request.get("conversation"):
        raise _BadRequest(
            "this fake model keeps no conversations: send the whole input each time "
            "(no previous_response_id or conversation)"
        )
    if request.get("n") not in (None, 1):
        raise _BadRequest("this fake model answers one choice: leave n at 1")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise _BadRequest("model is required (the name of a model, any string)")
    messages, tools = parse(request)
    return request, model, messages, tools


def _named_calls(
    calls: Iterable[ToolCall], api: str, request_id: str
) -> tuple[ToolCall, ...]:
    """The script's tool ``calls`` with the ids ``api`` gives them in the answer to request
    ``request_id`` (``toolu_...`` for Anthropic's, ``call_...`` for OpenAI's)."""
    prefix = "toolu_" if api == "messages" else "call_"
    return tuple(
        ToolCall(c.name, c.arguments, prefix + _call_id(request_id, index))
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


def _call_id(request_id: str, index: int) -> str:
    return hashlib.sha256(f"{request_id}:{index}".encode()).hexdigest()[:24]


def _id(prefix: str, request_id: str) -> str:
    return prefix + hashlib.sha256(request_id.encode()).hexdigest()[:24]


# -- OpenAI Chat Completions ----------------------------------------------------------------


def _tool_names(tools: Any, name_of: Callable[[dict[str, Any]], Any]) -> list[str]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise _BadRequest("tools must be a list")
    names = []
    for tool in tools:
        name = name_of(_object(tool, "each tool"))
        if isinstance(name, str) and name:
            names.append(name)
    return names


def _parse_chat(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    raw = request.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _BadRequest("messages is required: a non-empty list of messages")
    messages: list[Message] = []
    for item in raw:
        item = _object(item, "each message")
        role = item.get("role")
        if role in ("system", "developer"):
            messages.append(Message("system", _text_of(item.get("content"))))
        elif role == "user":
            messages.append(Message("user", _text_of(item.get("content"))))
        elif role == "assistant":
            calls = []
            for tool_call in item.get("tool_calls") or []:
                function = _object(_object(tool_call, "each tool call").get("function"),
                                   "a tool call's function")
                name = str(function.get("name", ""))
                calls.append(ToolCall(name or "?", _arguments(name, function.get("arguments")),
                                      str(tool_call.get("id", ""))))
            messages.append(Message("assistant", _text_of(item.get("content")), tuple(calls)))
        elif role in ("tool", "function"):
            messages.append(Message("tool", _text_of(item.get("content")),
                                    tool_call_id=str(item.get("tool_call_id") or "")))
        else:
            raise _BadRequest(f"unknown message role {role!r}")
    tools = _tool_names(request.get("tools"),
                        lambda t: (t.get("function") or {}).get("name"))
    tools += _tool_names(request.get("functions"), lambda t: t.get("name"))
    return messages, tools


def _usage_chat(tokens: tuple[int, int]) -> dict[str, Any]:
    prompt, completion = tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def _render_chat(
    call: Call, request: dict[str, Any], turn: ModelTurn, tokens: tuple[int, int]
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))}}
            for c in turn.tool_calls
        ]
    return {
        "id": _id("chatcmpl-", call.request_id),
        "object": "chat.completion",
        "created": int(call.wall),
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
        "usage": _usage_chat(tokens),
        "system_fingerprint": "fp_crashpoints",
    }


# -- OpenAI Responses -----------------------------------------------------------------------


def _parse_responses(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    messages: list[Message] = []
    if request.get("instructions"):
        messages.append(Message("system", _text_of(request["instructions"])))
    raw = request.get("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise _BadRequest("input is required: a string or a non-empty list of items")

    def assistant(text: str = "", calls: Iterable[ToolCall] = ()) -> None:
        # Consecutive assistant items (a message, function calls) are one answer of the model.
        if messages and messages[-1].role == "assistant":
            last = messages.pop()
            text = "\n".join(t for t in (last.text, text) if t)
            calls = (*last.tool_calls, *calls)
        messages.append(Message("assistant", text, tuple(calls)))

    for item in raw:
        item = _object(item, "each input item")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = _text_of(item.get("content"))
            if role in ("system", "developer"):
                messages.append(Message("system", text))
            elif role == "user":
                messages.append(Message("user", text))
            elif role == "assistant":
                assistant(text)
            else:
                raise _BadRequest(f"unknown input role {role!r}")
        elif kind == "function_call":
            name = str(item.get("name", ""))
            assistant(calls=[ToolCall(name or "?", _arguments(name, item.get("arguments")),
                                      str(item.get("call_id", "")))])
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(Message("tool", output if isinstance(output, str) else
                                    _text_of(output), tool_call_id=str(item.get("call_id", ""))))
        # Other items (reasoning, web search results...) carry nothing a script reads.
    tools = _tool_names(request.get("tools"),
                        lambda t: t.get("name") if t.get("type") == "function" else None)
    return messages, tools


def _render_responses(
    call: Call, request: dict[str, Any], turn: ModelTurn, tokens: tuple[int, int]
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.text:
        output.append({
            "id": _id("msg_", call.request_id), "type": "message", "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
        })
    for c in turn.tool_calls:
        output.append({
            "id": "fc_" + c.id.removeprefix("call_"), "type": "function_call", "call_id": c.id,
            "name": c.name, "arguments": json.dumps(dict(c.arguments)), "status": "completed",
        })
    prompt, completion = tokens
    return {
        "id": _id("resp_", call.request_id),
        "object": "response",
        "created_at": float(int(call.wall)),
        "status": "completed",
        "model": request["model"],
        "output": output,
        "instructions": request.get("instructions"),
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
        "metadata": request.get("metadata") or {},
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": prompt, "output_tokens": completion,
            "total_tokens": prompt + completion,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


# -- Anthropic Messages ---------------------------------------------------------------------


def _parse_messages(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    messages: list[Message] = []
    if request.get("system"):
        messages.append(Message("system", _text_of(request["system"])))
    raw = request.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _BadRequest("messages is required: a non-empty list of messages")
    if not isinstance(request.get("max_tokens"), int):
        raise _BadRequest("max_tokens is required (an integer)")
    for item in raw:
        item = _object(item, "each message")
        role, content = item.get("role"), item.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise _BadRequest("message content must be a string or a list of blocks")
        if role == "user":
            texts = []
            for block in blocks:
                block = _object(block, "each content block")
                if block.get("type") == "tool_result":
                    messages.append(Message("tool", _text_of(block.get("content")),
                                            tool_call_id=str(block.get("tool_use_id", ""))))
                elif isinstance(block.get("text"), str):
                    texts.append(block["text"])
            if texts:
                messages.append(Message("user", "\n".join(texts)))
        elif role == "assistant":
            texts, calls = [], []
            for block in blocks:
                block = _object(block, "each content block")
                if block.get("type") == "tool_use":
                    name = str(block.get("name", ""))
                    calls.append(ToolCall(name or "?", _arguments(name, block.get("input")),
                                          str(block.get("id", ""))))
                elif isinstance(block.get("text"), str):
                    texts.append(block["text"])
            messages.append(Message("assistant", "\n".join(texts), tuple(calls)))
        else:
            raise _BadRequest(f"unknown message role {role!r}")
    tools = _tool_names(request.get("tools"), lambda t: t.get("name"))
    return messages, tools


def _render_messages(
    call: Call, request: dict[str, Any], turn: ModelTurn, tokens: tuple[int, int]
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for c in turn.tool_calls:
        content.append({"type": "tool_use", "id": c.id, "name": c.name,
                        "input": dict(c.arguments)})
    prompt, completion = tokens
    return {
        "id": _id("msg_", call.request_id),
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }
