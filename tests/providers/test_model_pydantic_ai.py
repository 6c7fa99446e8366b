"""The model provider answers Pydantic AI's own models, unchanged: its OpenAI Chat
Completions and Responses models and its Anthropic model (which streams the Messages API
behind ``agent.run`` when the SDK would refuse a long request whole), run by an ``Agent``
with a tool, whole and through ``agent.run_stream``. (Each run inside ``asyncio.run``:
``run_sync`` keeps an event loop open for the next run, which the suite's warnings-as-errors
would report unclosed at exit.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_providers import ApiKey, Model, Script, call, say, serve
from tests.conftest import ManualClock

pydantic_ai = pytest.importorskip("pydantic_ai", reason="an agents extra")

#: Each of Pydantic AI's model classes for the fake model: its name, and the API it speaks.
MODELS = {
    "openai-chat:gpt-5.5": "chat.completions",
    "openai:gpt-5.5": "responses",  # Pydantic AI's default for openai: names
    "anthropic:claude-sonnet-5-5": "messages",
}


@pytest.fixture
def model(tmp_path: Path, clock: ManualClock) -> Iterator[Model]:
    provider = Model(
        tmp_path / "model.sqlite3", clock=clock,
        keys=[ApiKey("sk-model", "tenant-a", frozenset({"model:read"}))],
        script=Script([call("refund", charge="ch_1", amount=1500),
                       say("Refunded 15 EUR.")]),
    )
    yield provider
    provider.close()


@pytest.fixture
def url(model: Model, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(model) as served:
        # Pydantic AI's providers read these, as they do in production.
        monkeypatch.setenv("OPENAI_BASE_URL", f"{served}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-model")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", served)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-model")
        yield served


def support_agent(name: str, refunds: list[tuple[str, int]]) -> Any:
    agent = pydantic_ai.Agent(name, instructions="You refund orders.",
                              model_settings={"max_retries": 0})

    @agent.tool_plain
    def refund(charge: str, amount: int) -> str:
        """Refund part of a charge (amount in cents)."""
        refunds.append((charge, amount))
        return f"re_{len(refunds)}"

    return agent


@pytest.mark.parametrize("name", MODELS)
def test_an_agent_run_calls_its_tool_and_ends_with_the_scripted_text(
    model: Model, url: str, name: str
) -> None:
    refunds: list[tuple[str, int]] = []
    result = asyncio.run(support_agent(name, refunds).run("Refund order 7, please."))
    assert (result.output, refunds) == ("Refunded 15 EUR.", [("ch_1", 1500)])
    calls = model.calls()
    assert [(c.api, c.turn, c.answer) for c in calls] == [
        (MODELS[name], 0, "refund(charge='ch_1', amount=1500)"),
        (MODELS[name], 1, "'Refunded 15 EUR.'"),
    ]
    # Anthropic's model streams by default: its default max_tokens is the model's maximum,
    # which the anthropic SDK refuses to wait for whole.
    assert [c.streamed for c in calls] == [MODELS[name] == "messages"] * 2


@pytest.mark.parametrize("name", MODELS)
def test_run_stream_gets_the_same_answers_as_events(model: Model, url: str, name: str) -> None:
    refunds: list[tuple[str, int]] = []

    async def streamed() -> str:
        async with support_agent(name, refunds).run_stream("Refund order 7.") as run:
            return await run.get_output()

    assert asyncio.run(streamed()) == "Refunded 15 EUR."
    assert refunds == [("ch_1", 1500)]
    assert [(c.turn, c.streamed) for c in model.calls()] == [(0, True), (1, True)]


def test_the_tool_result_goes_back_to_the_model(model: Model, url: str) -> None:
    seen: list[list[str]] = []

    def respond(conversation: Any) -> Any:
        seen.append(conversation.results("refund"))
        return say("Done.") if conversation.turn else call("refund", charge="ch_1", amount=1)

    model.script = Script(respond)
    asyncio.run(support_agent("anthropic:claude-sonnet-5-5", []).run("Refund order 7."))
    assert seen == [[], ["re_1"]]
