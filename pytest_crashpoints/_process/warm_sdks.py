"""Caches an SDK fills on first use, filled once in the harness's process before it forks.

A forked worker starts with what its parent had: modules imported, and whatever those modules
cached. The model SDKs build their response parsers lazily: the first answer an ``openai`` or
``anthropic`` client parses builds pydantic schemas for the response's models and a type
adapter for the union of its output items, about 50 ms of CPU on a quiet machine and several
times that on a busy one. Every worker of a case, and every case, paid it again: in the
Agents SDK's crash test it was two fifths of the workers' time.

:func:`warm_sdk_caches` parses one answer of each kind through the SDK's own parser (the
function its client calls on every answer), in the parent, for the SDKs the parent has
already imported (none is imported here). The answers are what the fake model sends (a text
and a tool call), so the parsers built are the ones the workers use. It changes no behaviour:
the schemas are the same ones the worker would build, only built once. A failure to warm
(another SDK version, a changed private module) is ignored: the worker builds them itself.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any

__all__ = ["warm_sdk_caches"]

_USAGE = {"input_tokens": 1, "output_tokens": 1}

#: By SDK: the module of its parser, the response types, and an answer of each.
_ANSWERS: dict[str, tuple[str, tuple[tuple[str, str, dict[str, Any]], ...]]] = {
    "openai": ("openai._models", (
        ("openai.types.responses", "Response", {
            "id": "resp_0", "object": "response", "created_at": 0, "model": "m",
            "status": "completed", "parallel_tool_calls": True, "tool_choice": "auto",
            "tools": [],
            "output": [
                {"type": "message", "id": "msg_0", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "ok", "annotations": []}]},
                {"type": "function_call", "id": "fc_0", "call_id": "call_0", "name": "f",
                 "arguments": "{}", "status": "completed"},
            ],
            "usage": {**_USAGE, "total_tokens": 2, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        }),
        ("openai.types.chat", "ChatCompletion", {
            "id": "chatcmpl_0", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "ok",
                "tool_calls": [{"id": "call_0", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }),
    )),
    "anthropic": ("anthropic._models", (
        ("anthropic.types", "Message", {
            "id": "msg_0", "type": "message", "role": "assistant", "model": "m",
            "stop_reason": "tool_use", "stop_sequence": None, "usage": _USAGE,
            "content": [{"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "toolu_0", "name": "f", "input": {}}],
        }),
    )),
}


def warm_sdk_caches() -> int:
    """Parse one answer of each kind with each model SDK already imported; return how many
    were parsed (see the module docstring)."""
    parsed = 0
    for sdk, (parser_module, answers) in _ANSWERS.items():
        if sdk not in sys.modules:
            continue
        for module, name, answer in answers:
            with contextlib.suppress(Exception):
                construct = importlib.import_module(parser_module).construct_type
                construct(type_=getattr(importlib.import_module(module), name), value=answer)
                parsed += 1
    return parsed
