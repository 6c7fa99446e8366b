"""MCP tool annotations checked as invariants: each check fires on a tool that breaks its
claim, and stays quiet on one that keeps it (or makes none)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from pytest_crashpoints import CrashpointsError, mcp_annotations


def effect(message: int, request_id: str, payload: str = "p1") -> Any:
    return types.SimpleNamespace(
        message=message, provider="email", kind="mail.send", payload_hash=payload,
        request_id=request_id, sender=f"worker-{request_id}",
    )


def expected(message: int, payload: str = "p1") -> Any:
    return types.SimpleNamespace(
        message=message, provider="email", operation="mail.send", payload_hash=payload
    )


def evidence(effects: list[Any], fault_free: list[Any]) -> Any:
    return types.SimpleNamespace(effects=tuple(effects), expected_effects=tuple(fault_free))


CLAIMS = {
    "send_email": {"idempotentHint": True},
    "notify": {"idempotentHint": False},
    "lookup": {"readOnlyHint": True},
}
MESSAGES = [{"tool": "send_email"}, {"tool": "notify"}, {"tool": "lookup"}]


def run(checks: list[Any], seen: Any) -> dict[str, list[str]]:
    return {check.__name__: list(check(seen)) for check in checks}


def test_a_tool_that_says_idempotent_and_acts_twice_is_named() -> None:
    checks = mcp_annotations(CLAIMS, MESSAGES)
    found = run(checks, evidence([effect(0, "r1"), effect(0, "r2")], [expected(0)]))
    [said] = found["mcp_idempotent_hint"]
    assert "send_email says idempotentHint: true" in said and "2 times (r1 by" in said
    assert found["mcp_read_only_hint"] == []


def test_a_tool_that_claims_nothing_is_not_held_to_it() -> None:
    checks = mcp_annotations(CLAIMS, MESSAGES)
    found = run(checks, evidence([effect(1, "r1"), effect(1, "r2")], [expected(1)]))
    assert found == {"mcp_read_only_hint": [], "mcp_idempotent_hint": []}  # invariant 1's job


def test_a_kept_claim_passes() -> None:
    checks = mcp_annotations(CLAIMS, MESSAGES)
    once = evidence([effect(0, "r1")], [expected(0)])
    assert run(checks, once) == {"mcp_read_only_hint": [], "mcp_idempotent_hint": []}
    # Other arguments are another effect, not the same call again.
    two = evidence([effect(0, "r1", "p1"), effect(0, "r2", "p2")], [expected(0), expected(0)])
    assert run(checks, two)["mcp_idempotent_hint"] == []


def test_a_read_only_tool_that_changes_something_is_named() -> None:
    checks = mcp_annotations(CLAIMS, MESSAGES)
    [said] = run(checks, evidence([effect(2, "r9")], []))["mcp_read_only_hint"]
    assert said.startswith("lookup says readOnlyHint: true, but message 2's call made mail.send")


def test_the_annotations_are_read_from_a_server_as_the_sdk_lists_them() -> None:
    class Server:
        async def list_tools(self) -> list[Any]:
            hints = types.SimpleNamespace(read_only_hint=None, idempotent_hint=True)
            return [types.SimpleNamespace(name="send_email", annotations=hints)]

    [_, idempotent] = mcp_annotations(Server(), [{"tool": "send_email"}])
    assert list(idempotent(evidence([effect(0, "a"), effect(0, "b")], [expected(0)])))


def test_a_tool_listed_with_no_annotations_is_held_to_nothing() -> None:
    """A tool that declares no annotations (``annotations`` absent: ``None``) claims nothing:
    a second effect of its call is invariant 1's to judge, not an annotation's."""

    class Server:
        async def list_tools(self) -> list[Any]:
            return [types.SimpleNamespace(name="send_email", annotations=None)]

    checks = mcp_annotations(Server(), [{"tool": "send_email"}])
    twice = evidence([effect(0, "a"), effect(0, "b")], [expected(0)])
    assert run(checks, twice) == {"mcp_read_only_hint": [], "mcp_idempotent_hint": []}


@pytest.mark.parametrize(
    ("tools", "messages", "message"),
    [
        (CLAIMS, [{"to": "x"}], "message 0 has no 'tool' naming the tool it calls"),
        (CLAIMS, [{"tool": "fax"}], "message 0 calls 'fax', which the server does not list"),
        (42, [], "takes an MCP server"),
    ],
)
def test_bad_input_says_what_is_wrong(tools: Any, messages: Any, message: str) -> None:
    with pytest.raises(CrashpointsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mcp_annotations(tools, messages)
