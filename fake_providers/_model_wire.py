"""The model provider's wire formats: each API's request read into the script's conversation
(system, user, assistant with its tool calls, tool results) and the script's turn rendered in
that API's own shape: OpenAI Chat Completions (``tool_calls``), OpenAI Responses
(``function_call`` items) and Anthropic Messages (``tool_use`` blocks). What a request asks
that the fake model does not do is a :class:`BadRequest` (a 400 in the API's error format).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from ._provider import Call
from ._script import Message, ModelTurn, ToolCall

__all__ = [
    "BadRequest",
    "call_id",
    "estimate_tokens",
    "json_object",
    "parse_chat",
    "parse_messages",
    "parse_responses",
    "render_chat",
    "render_messages",
    "render_responses",
    "text_of",
    "tool_arguments",
    "tool_names",
    "usage_chat",
    "wire_id",
]


class BadRequest(Exception):
    pass


def estimate_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def text_of(content: Any) -> str:
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
                texts.append(text_of(part.get("content")))
        return "\n".join(texts)
    raise BadRequest(f"message content must be a string or a list of parts, not {content!r}")


def tool_arguments(name: str, raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BadRequest(
                f"the arguments of the tool call {name!r} are not JSON: {raw!r}"
            ) from None
        if isinstance(value, dict):
            return value
    raise BadRequest(f"the arguments of the tool call {name!r} are not a JSON object: {raw!r}")


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return value


def call_id(request_id: str, index: int) -> str:
    return hashlib.sha256(f"{request_id}:{index}".encode()).hexdigest()[:24]


def wire_id(prefix: str, request_id: str) -> str:
    return prefix + hashlib.sha256(request_id.encode()).hexdigest()[:24]


# -- OpenAI Chat Completions ----------------------------------------------------------------


def tool_names(tools: Any, name_of: Callable[[dict[str, Any]], Any]) -> list[str]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise BadRequest("tools must be a list")
    names = []
    for tool in tools:
        name = name_of(json_object(tool, "each tool"))
        if isinstance(name, str) and name:
            names.append(name)
    return names


def parse_chat(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    raw = request.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages is required: a non-empty list of messages")
    messages: list[Message] = []
    for item in raw:
        item = json_object(item, "each message")
        role = item.get("role")
        if role in ("system", "developer"):
            messages.append(Message("system", text_of(item.get("content"))))
        elif role == "user":
            messages.append(Message("user", text_of(item.get("content"))))
        elif role == "assistant":
            calls = []
            for tool_call in item.get("tool_calls") or []:
                function = json_object(json_object(tool_call, "each tool call").get("function"),
                                   "a tool call's function")
                name = str(function.get("name", ""))
                calls.append(ToolCall(name or "?", tool_arguments(name, function.get("arguments")),
                                      str(tool_call.get("id", ""))))
            messages.append(Message("assistant", text_of(item.get("content")), tuple(calls)))
        elif role in ("tool", "function"):
            messages.append(Message("tool", text_of(item.get("content")),
                                    tool_call_id=str(item.get("tool_call_id") or "")))
        else:
            raise BadRequest(f"unknown message role {role!r}")
    tools = tool_names(request.get("tools"),
                        lambda t: (t.get("function") or {}).get("name"))
    tools += tool_names(request.get("functions"), lambda t: t.get("name"))
    return messages, tools


def usage_chat(tokens: tuple[int, int]) -> dict[str, Any]:
    prompt, completion = tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def render_chat(
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
        "id": wire_id("chatcmpl-", call.request_id),
        "object": "chat.completion",
        "created": int(call.wall),
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
        "usage": usage_chat(tokens),
        "system_fingerprint": "fp_crashpoints",
    }


# -- OpenAI Responses -----------------------------------------------------------------------


def parse_responses(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    messages: list[Message] = []
    if request.get("instructions"):
        messages.append(Message("system", text_of(request["instructions"])))
    raw = request.get("input")
    if isinstance(raw, str):
        raw = [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("input is required: a string or a non-empty list of items")

    def assistant(text: str = "", calls: Iterable[ToolCall] = ()) -> None:
        # Consecutive assistant items (a message, function calls) are one answer of the model.
        if messages and messages[-1].role == "assistant":
            last = messages.pop()
            text = "\n".join(t for t in (last.text, text) if t)
            calls = (*last.tool_calls, *calls)
        messages.append(Message("assistant", text, tuple(calls)))

    for item in raw:
        item = json_object(item, "each input item")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            text = text_of(item.get("content"))
            if role in ("system", "developer"):
                messages.append(Message("system", text))
            elif role == "user":
                messages.append(Message("user", text))
            elif role == "assistant":
                assistant(text)
            else:
                raise BadRequest(f"unknown input role {role!r}")
        elif kind == "function_call":
            name = str(item.get("name", ""))
            assistant(calls=[ToolCall(name or "?", tool_arguments(name, item.get("arguments")),
                                      str(item.get("call_id", "")))])
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(Message("tool", output if isinstance(output, str) else
                                    text_of(output), tool_call_id=str(item.get("call_id", ""))))
        # Other items (reasoning, web search results...) carry nothing a script reads.
    tools = tool_names(request.get("tools"),
                        lambda t: t.get("name") if t.get("type") == "function" else None)
    return messages, tools


def render_responses(
    call: Call, request: dict[str, Any], turn: ModelTurn, tokens: tuple[int, int]
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if turn.text:
        output.append({
            "id": wire_id("msg_", call.request_id), "type": "message", "role": "assistant",
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
        "id": wire_id("resp_", call.request_id),
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


def parse_messages(request: dict[str, Any]) -> tuple[list[Message], list[str]]:
    messages: list[Message] = []
    if request.get("system"):
        messages.append(Message("system", text_of(request["system"])))
    raw = request.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages is required: a non-empty list of messages")
    if not isinstance(request.get("max_tokens"), int):
        raise BadRequest("max_tokens is required (an integer)")
    for item in raw:
        item = json_object(item, "each message")
        role, content = item.get("role"), item.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise BadRequest("message content must be a string or a list of blocks")
        if role == "user":
            texts = []
            for block in blocks:
                block = json_object(block, "each content block")
                if block.get("type") == "tool_result":
                    messages.append(Message("tool", text_of(block.get("content")),
                                            tool_call_id=str(block.get("tool_use_id", ""))))
                elif isinstance(block.get("text"), str):
                    texts.append(block["text"])
            if texts:
                messages.append(Message("user", "\n".join(texts)))
        elif role == "assistant":
            texts, calls = [], []
            for block in blocks:
                block = json_object(block, "each content block")
                if block.get("type") == "tool_use":
                    name = str(block.get("name", ""))
                    calls.append(ToolCall(name or "?", tool_arguments(name, block.get("input")),
                                          str(block.get("id", ""))))
                elif isinstance(block.get("text"), str):
                    texts.append(block["text"])
            messages.append(Message("assistant", "\n".join(texts), tuple(calls)))
        else:
            raise BadRequest(f"unknown message role {role!r}")
    tools = tool_names(request.get("tools"), lambda t: t.get("name"))
    return messages, tools


def render_messages(
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
        "id": wire_id("msg_", call.request_id),
        "type": "message",
        "role": "assistant",
        "model": request["model"],
        "content": content,
        "stop_reason": "tool_use" if turn.tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }
