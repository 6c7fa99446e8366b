"""The model provider: the openai and anthropic SDKs, unchanged, get scripted answers; the
script's forms and its mistakes; the journal of answers; the faults on its answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_providers import (
    ApiKey,
    Conversation,
    Model,
    ModelTurn,
    ResponseInfo,
    Script,
    ToolCall,
    call,
    say,
    serve,
)
from pytest_crashpoints.errors import ScriptError
from tests.conftest import ManualClock
from tests.providers.conftest import Connect, auth

REFUND_TOOL = {
    "type": "function",
    "function": {"name": "refund", "parameters": {
        "type": "object", "properties": {"charge": {"type": "string"},
                                         "amount": {"type": "integer"}}}},
}
ASK = [{"role": "user", "content": "Refund my order, please."}]


def refund_script(**options: Any) -> Script:
    return Script([call("refund", charge="ch_1", amount=1500), say("Refunded.")], **options)


@pytest.fixture
def model(tmp_path: Path, clock: ManualClock) -> Iterator[Model]:
    provider = Model(
        tmp_path / "model.sqlite3", clock=clock, script=refund_script(),
        keys=[ApiKey("sk-model", "tenant-a", frozenset({"model:read"})),
              ApiKey("sk-other", "tenant-a", frozenset({"payments:write"}))],
    )
    yield provider
    provider.close()


@pytest.fixture
def url(model: Model) -> Iterator[str]:
    with serve(model) as served:
        yield served


def chat(client: httpx.Client, messages: list[Any], **extra: Any) -> httpx.Response:
    return client.post("/v1/chat/completions", headers=auth("sk-model"),
                       json={"model": "gpt-test", "messages": messages,
                             "tools": [REFUND_TOOL], **extra})


# -- the SDKs, unchanged ----------------------------------------------------------------------


def test_the_openai_sdk_gets_scripted_tool_calls_and_sends_the_results_back(
    model: Model, url: str
) -> None:
    openai = pytest.importorskip("openai", reason="an agents extra")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-model", max_retries=0)
    messages: list[Any] = list(ASK)
    first = client.chat.completions.create(model="gpt-test", messages=messages,
                                           tools=[REFUND_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tool_call,) = choice.message.tool_calls
    assert tool_call.function.name == "refund"
    assert json.loads(tool_call.function.arguments) == {"charge": "ch_1", "amount": 1500}
    assert tool_call.id.startswith("call_")
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tool_call.id, "content": "re_1"}]
    second = client.chat.completions.create(model="gpt-test", messages=messages,
                                            tools=[REFUND_TOOL])
    assert second.choices[0].message.content == "Refunded."
    assert second.choices[0].finish_reason == "stop"
    assert second.usage is not None and second.usage.total_tokens > 0
    client.close()
    assert [(c.turn, c.api, c.answer) for c in model.calls()] == [
        (0, "chat.completions", "refund(charge='ch_1', amount=1500)"),
        (1, "chat.completions", "'Refunded.'"),
    ]
    assert model.calls()[0].tool_calls[0].id == tool_call.id
    assert not any(c.streamed for c in model.calls())


def test_the_openai_responses_api(model: Model, url: str) -> None:
    openai = pytest.importorskip("openai", reason="an agents extra")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-model", max_retries=0)
    tools = [{"type": "function", "name": "refund", "parameters": {"type": "object"}}]
    first = client.responses.create(model="gpt-test", input="Refund my order.", tools=tools,
                                    instructions="You refund orders.")
    (item,) = first.output
    assert (item.type, item.name, json.loads(item.arguments)) == (
        "function_call", "refund", {"charge": "ch_1", "amount": 1500})
    second = client.responses.create(
        model="gpt-test", tools=tools, instructions="You refund orders.",
        input=[{"role": "user", "content": "Refund my order."},
               item.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": item.call_id, "output": "re_1"}],
    )
    assert second.output_text == "Refunded."
    client.close()


def test_the_anthropic_sdk_gets_tool_use_blocks(model: Model, url: str) -> None:
    anthropic = pytest.importorskip("anthropic", reason="an agents extra")
    client = anthropic.Anthropic(base_url=url, api_key="sk-model", max_retries=0)
    tools = [{"name": "refund", "input_schema": {"type": "object"}}]
    first = client.messages.create(model="claude-test", max_tokens=256, tools=tools,
                                   system="You refund orders.", messages=ASK)
    assert first.stop_reason == "tool_use"
    (block,) = first.content
    assert (block.type, block.name, block.input) == (
        "tool_use", "refund", {"charge": "ch_1", "amount": 1500})
    assert block.id.startswith("toolu_")
    second = client.messages.create(
        model="claude-test", max_tokens=256, tools=tools, system="You refund orders.",
        messages=[*ASK, {"role": "assistant", "content": first.content},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": block.id, "content": "re_1"}]}],
    )
    assert (second.stop_reason, second.content[0].text) == ("end_turn", "Refunded.")
    client.close()
    assert model.journal.requests()[0].operation == "messages.create"


# -- streamed answers, read by the SDKs' own stream readers ----------------------------------


def test_a_streamed_chat_completion_is_the_same_answer_in_chunks(model: Model, url: str) -> None:
    openai = pytest.importorskip("openai", reason="an agents extra")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-model", max_retries=0)
    chunks = list(client.chat.completions.create(
        model="gpt-test", messages=ASK, tools=[REFUND_TOOL], stream=True,
        stream_options={"include_usage": True}))
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks[:-1]:
        for tool_call in chunk.choices[0].delta.tool_calls or ():
            into = calls.setdefault(tool_call.index, {"id": "", "name": "", "arguments": ""})
            into["id"] += tool_call.id or ""
            into["name"] += (tool_call.function and tool_call.function.name) or ""
            into["arguments"] += (tool_call.function and tool_call.function.arguments) or ""
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # include_usage
    [recorded] = model.calls()
    assert recorded.streamed
    assert calls == {0: {"id": recorded.tool_calls[0].id, "name": "refund",
                         "arguments": json.dumps({"charge": "ch_1", "amount": 1500})}}
    # The next turn's text, streamed without usage: no usage chunk.
    messages = [*ASK, {"role": "assistant", "tool_calls": [
        {"id": calls[0]["id"], "type": "function",
         "function": {"name": "refund", "arguments": calls[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "re_1"}]
    texts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="gpt-test", messages=messages, tools=[REFUND_TOOL], stream=True)]
    assert "".join(texts) == "Refunded."
    client.close()


def test_a_streamed_response_is_the_whole_response_in_events(model: Model, url: str) -> None:
    openai = pytest.importorskip("openai", reason="an agents extra")
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-model", max_retries=0)
    tools = [{"type": "function", "name": "refund", "parameters": {"type": "object"},
              "strict": False}]
    with client.responses.stream(model="gpt-test", input="Refund my order.",
                                 tools=tools) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.split(".", 1)[1] for e in kinds if "function_call_arguments" in e] == [
        "function_call_arguments.delta", "function_call_arguments.done"]
    (item,) = first.output
    assert (item.type, item.name, json.loads(item.arguments)) == (
        "function_call", "refund", {"charge": "ch_1", "amount": 1500})
    with client.responses.stream(
        model="gpt-test", tools=tools,
        input=[{"role": "user", "content": "Refund my order."},
               item.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": item.call_id, "output": "re_1"}],
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        second = stream.get_final_response()
    assert deltas == ["Refunded."] and second.output_text == "Refunded."
    client.close()


def test_a_streamed_message_is_the_same_blocks_in_events(model: Model, url: str) -> None:
    anthropic = pytest.importorskip("anthropic", reason="an agents extra")
    client = anthropic.Anthropic(base_url=url, api_key="sk-model", max_retries=0)
    tools = [{"name": "refund", "input_schema": {"type": "object"}}]
    with client.messages.stream(model="claude-test", max_tokens=64000, tools=tools,
                                messages=ASK) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert first.stop_reason == "tool_use"
    (block,) = first.content
    assert (block.type, block.name, block.input) == (
        "tool_use", "refund", {"charge": "ch_1", "amount": 1500})
    assert block.id == model.calls()[0].tool_calls[0].id
    with client.messages.stream(
        model="claude-test", max_tokens=64000, tools=tools,
        messages=[*ASK, {"role": "assistant", "content": first.content},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": block.id, "content": "re_1"}]}],
    ) as stream:
        text = "".join(stream.text_stream)
        second = stream.get_final_message()
    assert (text, second.stop_reason) == ("Refunded.", "end_turn")
    assert second.usage.output_tokens == model.calls()[1].completion_tokens
    client.close()


def test_a_streamed_answer_names_the_tools_it_calls(model: Model, connect: Connect) -> None:
    # The model.tool_call point of a crash test is placed from this, streamed or not.
    answer = connect(model).post(
        "/v1/chat/completions", headers=auth("sk-model"),
        json={"model": "m", "messages": ASK, "tools": [REFUND_TOOL], "stream": True})
    assert answer.headers["content-type"] == "text/event-stream"
    assert answer.text.endswith("data: [DONE]\n\n")
    [record] = model.journal.requests()
    assert (record.kind, record.effect_applied) == ("read", False)
    assert [c.streamed for c in model.calls()] == [True]
    info = answer.extensions.get("crashpoints")
    if info is not None:  # in-process: the response object itself
        assert isinstance(info, ResponseInfo) and info.tool_calls == ("refund",)


# -- the script -------------------------------------------------------------------------------


def test_the_same_question_again_gets_the_on_reask_answer(
    model: Model, connect: Connect
) -> None:
    model.script = refund_script(on_reask={0: call("refund", charge="ch_1", amount=2000)})
    client = connect(model)
    answers = [chat(client, ASK).json()["choices"][0]["message"]["tool_calls"][0]
               for _ in range(2)]
    assert [json.loads(a["function"]["arguments"])["amount"] for a in answers] == [1500, 2000]
    assert answers[0]["id"] != answers[1]["id"]  # a new answer names its calls anew
    assert [(c.turn, c.asked) for c in model.calls()] == [(0, 0), (0, 1)]
    assert model.calls()[0].digest == model.calls()[1].digest


def test_a_function_script_sees_the_conversation(model: Model, connect: Connect) -> None:
    seen: list[Conversation] = []

    def respond(conversation: Conversation) -> ModelTurn:
        seen.append(conversation)
        if conversation.turn == 0:
            return call("refund", charge="ch_1", amount=1500)
        return say(f"Done: {conversation.results('refund')[0]}")

    model.script = Script(respond)
    client = connect(model)
    first = chat(client, ASK).json()["choices"][0]["message"]
    answer = chat(client, [*ASK, first, {"role": "tool", "tool_call_id":
                                         first["tool_calls"][0]["id"], "content": "re_9"}])
    assert answer.json()["choices"][0]["message"]["content"] == "Done: re_9"
    assert [c.turn for c in seen] == [0, 1]
    assert seen[1].tools == ("refund",)
    assert seen[1].last("user") is not None


def test_the_digest_ignores_the_ids_the_model_gave_its_calls() -> None:
    def asked(call_id: str) -> str:
        return Conversation(
            (_user("hi"), _assistant(ToolCall("refund", {"amount": 1}, call_id)),
             _tool("ok", call_id)),
            ("refund",), "chat.completions", "m",
        ).digest

    assert asked("call_a") == asked("call_b")
    other = Conversation((_user("hello"),), ("refund",), "chat.completions", "m").digest
    assert other != asked("call_a")


def _user(text: str) -> Any:
    from fake_providers import Message

    return Message("user", text)


def _assistant(*calls: ToolCall) -> Any:
    from fake_providers import Message

    return Message("assistant", "", calls)


def _tool(text: str, call_id: str) -> Any:
    from fake_providers import Message

    return Message("tool", text, tool_call_id=call_id)


@pytest.mark.parametrize(
    ("script", "why"),
    [
        (Script([say("only one")]), "ran out of turns: the agent asked for turn 1"),
        (Script([call("delete_everything")]), "calls 'delete_everything', which the request "
                                              "does not offer (it offers refund)"),
        (Script(lambda c: 1 / 0), "the script function raised ZeroDivisionError"),  # type: ignore[arg-type,return-value]
        (Script(lambda c: "text"), "returned 'text' for turn"),  # type: ignore[arg-type,return-value]
        (None, "the model has no script"),
    ],
)
def test_a_script_with_no_answer_is_a_400_that_says_why(
    model: Model, connect: Connect, script: Script | None, why: str
) -> None:
    model.script = script
    client = connect(model)
    turn0 = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]}
    messages = [*ASK, turn0, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    answer = chat(client, messages if "ran out" in why else ASK)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "script_error" and why in error["message"]
    (record,) = model.calls()
    assert record.error is not None and why in record.error


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: Script([]), "the script has no turns"),
        (lambda: Script(["hello"]), "must be ModelTurn objects"),  # type: ignore[list-item]
        (lambda: Script({"a": 1}), "a list of turns or a function"),  # type: ignore[arg-type]
        (lambda: Script([say("x")], on_reask={3: say("y")}), "names a turn the script does "
                                                            "not have"),
        (lambda: Script([say("x")], on_reask={0: []}), "a ModelTurn or a non-empty list"),
        (lambda: call("refund", amount=float("nan")), "are not JSON"),
        (lambda: ModelTurn(), "says nothing"),
        (lambda: call(""), "needs a tool name"),
    ],
)
def test_a_malformed_script_is_refused_with_what_to_do(make: Any, why: str) -> None:
    with pytest.raises(ScriptError, match=why):
        make()


def test_on_reask_can_answer_each_repeat_differently(model: Model, connect: Connect) -> None:
    model.script = refund_script(on_reask={0: [call("refund", charge="ch_1", amount=2),
                                               call("refund", charge="ch_1", amount=3)]})
    client = connect(model)
    amounts = [
        json.loads(chat(client, ASK).json()["choices"][0]["message"]["tool_calls"][0]
                   ["function"]["arguments"])["amount"]
        for _ in range(4)
    ]
    assert amounts == [1500, 2, 3, 3]


# -- the wire ---------------------------------------------------------------------------------


def test_keys_scopes_and_bad_requests(model: Model, connect: Connect) -> None:
    client = connect(model)
    body = {"model": "m", "messages": ASK, "tools": [REFUND_TOOL]}
    assert client.post("/v1/chat/completions", json=body).status_code == 401
    assert client.post("/v1/chat/completions", json=body,
                       headers={"x-api-key": "sk-model"}).status_code == 200
    refused = client.post("/v1/chat/completions", json=body, headers=auth("sk-other"))
    assert refused.status_code == 403 and "model:read" in refused.json()["error"]["message"]
    no_model = client.post("/v1/chat/completions", json={"messages": ASK},
                           headers=auth("sk-model"))
    assert no_model.status_code == 400 and "model is required" in no_model.text
    assert client.post("/chat/completions", json=body, headers=auth("sk-model")).status_code \
        == 200  # also without /v1, as some clients are configured


def test_an_answer_is_a_read_that_names_the_tools_it_calls(model: Model, connect: Connect) -> None:
    model.keys.set_signing_secret("s")
    from fake_providers import derive_key

    worker_key = derive_key("sk-model", "worker-1", signing_secret="s")
    answer = connect(model).post(
        "/v1/chat/completions", headers=auth(worker_key),
        json={"model": "m", "messages": ASK, "tools": [REFUND_TOOL]})
    [record] = model.journal.requests()
    assert (record.kind, record.effect_applied, record.label) == ("read", False, "worker-1")
    assert record.payload_hash == model.calls()[0].digest
    assert model.journal.effects() == []
    info = answer.extensions.get("crashpoints")
    if info is not None:  # in-process: the response object itself
        assert isinstance(info, ResponseInfo) and info.tool_calls == ("refund",)
    assert model.notes() == {record.request_id: "turn 0: refund(charge='ch_1', amount=1500)"}


def test_faults_act_on_the_models_answers(model: Model, connect: Connect) -> None:
    client = connect(model)
    model.faults.rate_limits(1, on="writes", retry_after=7.0)
    limited = chat(client, ASK)
    assert (limited.status_code, limited.headers["Retry-After"]) == (429, "7")
    assert limited.json()["error"]["type"] == "rate_limit_error"
    model.faults.server_errors(1, on="writes", status=503)
    assert chat(client, ASK).status_code == 503
    assert model.calls() == []  # refused before answering: no turn made
    model.faults.lose_responses(1)
    with pytest.raises(httpx.TransportError):
        chat(client, ASK)
    [lost] = model.calls()  # made, journaled, and lost: the next ask is a re-ask
    assert lost.asked == 0
    assert chat(client, ASK).status_code == 200
    assert [c.asked for c in model.calls()] == [0, 1]
    model.faults.write_timeouts(1)
    with pytest.raises(httpx.TransportError):
        chat(client, ASK)
    assert [r.fault for r in model.journal.requests()] == [
        "rate_limit", "server_error", "response_lost", None, "write_timeout"]


def test_a_body_nested_thousands_deep_is_a_400_not_a_500(url: str) -> None:
    deep = b'{"model": "gpt-test", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post(
            "/v1/chat/completions",
            headers={**auth("sk-model"), "Content-Type": "application/json"},
            content=deep,
        )
    assert answer.status_code == 400, answer.text
    assert "nested too deep" in answer.text


def test_an_openapi_document_of_the_wrong_shape_is_a_value_error_in_words() -> None:
    from fake_providers import openapi

    for document in (
        {"openapi": "3.0.0", "paths": ["not", "an", "object"]},
        {"openapi": "3.0.0", "paths": {"/orders": "not an object"}},
        {"openapi": "3.0.0", "paths": {"/orders": {"post": ["not", "an", "operation"]}}},
    ):
        with pytest.raises(ValueError, match="OpenAPI document is malformed"):
            openapi(document)
