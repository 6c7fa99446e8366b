"""The model's answer as a stream of server-sent events, as each API streams one.

A request with ``stream: true`` gets the same answer the whole response would carry, cut into
the events its API sends (``Content-Type: text/event-stream``), so that the SDKs' stream
readers, and the frameworks that stream by default (Pydantic AI streams Anthropic's Messages
when the SDK would refuse a long non-streamed request), run unchanged:

- Chat Completions: ``chat.completion.chunk`` objects in ``data:`` lines (a role chunk, the
  text, each tool call's name and then its arguments, the finish reason; a last chunk with
  the usage when ``stream_options.include_usage`` asks for it), then ``data: [DONE]``;
- Responses: ``response.created``, ``response.in_progress``, each output item added, its
  text or arguments as one delta and done, the item done, then ``response.completed`` with
  the whole response; every event numbered (``sequence_number``);
- Messages: ``message_start``, each content block started, its text or input JSON as one
  delta, stopped, then ``message_delta`` (stop reason, output tokens) and ``message_stop``.

The stream is written at once, whole: what a crash test needs of it is the answer, and its
crash points (``model.tool_call``, a lost answer) act on the response as a whole.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

__all__ = ["stream_body"]

#: Each API's events: ``(event name or None, data)``; a ``str`` data is written as it is.
_Event = tuple[str | None, dict[str, Any] | str]


def stream_body(api: str, answer: dict[str, Any], request: dict[str, Any]) -> bytes:
    """The server-sent events that stream ``answer`` (the whole response the ``api``,
    ``"chat.completions"``, ``"responses"`` or ``"messages"``, answers ``request`` with)."""
    events = {"chat.completions": _chat, "responses": _responses, "messages": _messages}[api]
    lines = []
    for name, data in events(answer, request):
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        lines.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(lines).encode("utf-8")


# -- Chat Completions ------------------------------------------------------------------------


def _chat(answer: dict[str, Any], request: dict[str, Any]) -> Iterator[_Event]:
    options = request.get("stream_options")
    usage = isinstance(options, dict) and bool(options.get("include_usage"))
    (choice,) = answer["choices"]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> _Event:
        data = {key: answer[key] for key in ("id", "created", "model", "system_fingerprint")}
        data["object"] = "chat.completion.chunk"
        data["choices"] = [{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish}]
        if usage:
            data["usage"] = None
        return None, data

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, tool_call in enumerate(message.get("tool_calls") or ()):
        function = tool_call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": tool_call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": index,
                                     "function": {"arguments": function["arguments"]}}]})
    yield chunk({}, choice["finish_reason"])
    if usage:
        _, last = chunk({})
        assert isinstance(last, dict)
        last["choices"], last["usage"] = [], answer["usage"]
        yield None, last
    yield None, "[DONE]"


# -- Responses -------------------------------------------------------------------------------


def _responses(answer: dict[str, Any], request: dict[str, Any]) -> Iterator[_Event]:
    sequence = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> _Event:
        return kind, {"type": kind, "sequence_number": next(sequence), **fields}

    started = {**copy.deepcopy(answer), "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(answer["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "content": []})
            for part_index, part in enumerate(item["content"]):
                at = {**where, "content_index": part_index}
                yield event("response.content_part.added", **at, part={**part, "text": ""})
                yield event("response.output_text.delta", **at, delta=part["text"], logprobs=[])
                yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
                yield event("response.content_part.done", **at, part=part)
        else:
            yield event("response.output_item.added", output_index=index,
                        item={**item, "status": "in_progress", "arguments": ""})
            yield event("response.function_call_arguments.delta", **where,
                        delta=item["arguments"])
            yield event("response.function_call_arguments.done", **where,
                        arguments=item["arguments"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=answer)


# -- Anthropic Messages ----------------------------------------------------------------------


def _messages(answer: dict[str, Any], request: dict[str, Any]) -> Iterator[_Event]:
    def event(kind: str, **fields: Any) -> _Event:
        return kind, {"type": kind, **fields}

    usage = answer["usage"]
    started = {**answer, "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {**usage, "output_tokens": 1}}
    yield event("message_start", message=started)
    for index, block in enumerate(answer["content"]):
        if block["type"] == "text":
            yield event("content_block_start", index=index,
                        content_block={"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield event("content_block_start", index=index,
                        content_block={**block, "input": {}})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event("content_block_delta", index=index, delta=delta)
        yield event("content_block_stop", index=index)
    yield event("message_delta",
                delta={"stop_reason": answer["stop_reason"], "stop_sequence": None},
                usage={"output_tokens": usage["output_tokens"]})
    yield event("message_stop")
