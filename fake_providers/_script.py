"""What the fake model answers: a script of turns, or a function of the conversation.

A :class:`Script` decides every answer of the :class:`~fake_providers.Model` provider. It sees
the conversation the agent sent (normalized from whichever API it used: OpenAI's Chat
Completions or Responses, Anthropic's Messages) as a :class:`Conversation` and answers one
:class:`ModelTurn`: some text, some tool calls, or both.

Two forms, both deterministic:

- a list of turns, ``Script([call("refund", amount=1500), say("Done.")])``: the answer to a
  conversation that already holds *k* answers of the model is turn *k*;
- a function, ``Script(lambda conversation: ...)``, from the conversation to the turn.

A question asked again (the same conversation, e.g. by an agent restarted after a crash) is
answered by ``on_reask`` when it has an entry for that turn: ``Script([...],
on_reask={0: call("refund", amount=2000)})`` picks another amount the second time, the way a
sampled model may. ``conversation.asked`` says how many times the same question was answered
before, for a function script to decide itself.

Everything the script gets wrong (a turn it does not have, a tool the request does not offer,
a function that raises) is answered 400 with the reason and recorded in the model's journal;
the crash harness turns it into one line that fails the test (:class:`ScriptError`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from pytest_crashpoints.errors import ScriptError

__all__ = [
    "Conversation",
    "Message",
    "ModelTurn",
    "Script",
    "ToolCall",
    "call",
    "say",
]

Role = Literal["system", "user", "assistant", "tool"]


def _json_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One tool call the model makes: the tool's ``name`` and its ``arguments`` (a JSON
    object). ``id`` is the id the model gave it in an answer it already sent (empty in a
    script: the provider names each call when it answers)."""

    name: str
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ScriptError(f"a tool call needs a tool name (a non-empty string), not "
                              f"{self.name!r}.")
        if not isinstance(self.arguments, Mapping):
            raise ScriptError(
                f"the arguments of the tool call {self.name!r} must be a mapping (a JSON "
                f"object), not {type(self.arguments).__name__}."
            )
        try:
            json.dumps(dict(self.arguments), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ScriptError(
                f"the arguments of the tool call {self.name!r} are not JSON ({exc}); use "
                "strings, numbers, booleans, None, lists and dicts."
            ) from None

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.name}({args})"


@dataclasses.dataclass(frozen=True)
class ModelTurn:
    """One answer of the model: ``text``, ``tool_calls``, or both (at least one)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()

    def __post_init__(self) -> None:
        if self.text is not None and not isinstance(self.text, str):
            raise ScriptError(f"a model turn's text must be a string, not {self.text!r}.")
        calls = tuple(self.tool_calls)
        if not all(isinstance(c, ToolCall) for c in calls):
            raise ScriptError(
                "a model turn's tool_calls must be ToolCall objects (use call(name, **args))."
            )
        object.__setattr__(self, "tool_calls", calls)
        if not calls and not self.text:
            raise ScriptError(
                "a model turn says nothing: give it text (say('...')) or a tool call "
                "(call('tool', ...))."
            )

    def __str__(self) -> str:
        parts = [str(c) for c in self.tool_calls]
        if self.text:
            shown = self.text if len(self.text) <= 60 else self.text[:57] + "..."
            parts.append(repr(shown))
        return ", ".join(parts)

    def also(self, other: ModelTurn) -> ModelTurn:
        """This turn and ``other`` in one answer (parallel tool calls, or text with calls)."""
        text = " ".join(t for t in (self.text, other.text) if t) or None
        return ModelTurn(text, self.tool_calls + other.tool_calls)


def say(text: str) -> ModelTurn:
    """A turn that answers ``text`` and calls no tool (the end of the agent's loop)."""
    return ModelTurn(text=text)


def call(name: str, /, **arguments: Any) -> ModelTurn:
    """A turn that calls the tool ``name`` with ``arguments``; join calls with ``.also()``."""
    return ModelTurn(tool_calls=(ToolCall(name, arguments),))


@dataclasses.dataclass(frozen=True)
class Message:
    """One message of a conversation, the same whatever API carried it.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a tool's result, answering
    the call ``tool_call_id``); ``text`` its text; ``tool_calls`` the calls of an assistant
    message.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Conversation:
    """What the agent sent the model, as the script sees it.

    ``messages``: the conversation so far; ``tools``: the names of the tools the request
    offers; ``turn``: how many answers of the model the conversation already holds (the
    index of the turn to answer); ``asked``: how many times this same question was answered
    before (0 the first time; an agent restarted after a crash asks again); ``api``:
    ``"chat.completions"``, ``"responses"`` or ``"messages"``; ``model``: the model the
    request named.
    """

    messages: tuple[Message, ...]
    tools: tuple[str, ...]
    api: str
    model: str
    asked: int = 0

    @property
    def turn(self) -> int:
        return sum(1 for m in self.messages if m.role == "assistant")

    @property
    def digest(self) -> str:
        """A name of the question: the same conversation (and tools) has the same digest,
        whatever ids the model gave its earlier tool calls."""
        ordinal: dict[str, int] = {}

        def named(call_id: str | None) -> int | None:
            if not call_id:
                return None
            return ordinal.setdefault(call_id, len(ordinal))

        canonical = [
            {
                "role": m.role,
                "text": m.text,
                "calls": [
                    {"name": c.name, "arguments": dict(c.arguments), "id": named(c.id)}
                    for c in m.tool_calls
                ],
                "answers": named(m.tool_call_id),
            }
            for m in self.messages
        ]
        text = _json_text({"messages": canonical, "tools": sorted(self.tools)})
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def last(self, role: Role) -> Message | None:
        """The last message of ``role``, if any."""
        return next((m for m in reversed(self.messages) if m.role == role), None)

    def results(self, tool: str | None = None) -> list[str]:
        """The texts of the tool results in the conversation (of the calls to ``tool``)."""
        names = {c.id: c.name for m in self.messages for c in m.tool_calls if c.id}
        return [
            m.text
            for m in self.messages
            if m.role == "tool" and (tool is None or names.get(m.tool_call_id or "") == tool)
        ]


Respond = Callable[[Conversation], ModelTurn]
Reasks = Mapping[int, "ModelTurn | Sequence[ModelTurn]"]


class Script:
    """The fake model's answers: ``Script(turns_or_function, *, on_reask=None)``.

    ``turns_or_function``: a non-empty sequence of :class:`ModelTurn` (turn *k* answers a
    conversation that holds *k* answers of the model), or a function from the
    :class:`Conversation` to a :class:`ModelTurn`. ``on_reask``: maps a turn index to the
    answer to give when that same question is asked again (a sequence: the 2nd, 3rd, ...
    asks; the last one repeats). Raises :class:`ScriptError` for anything else.
    """

    def __init__(
        self, turns: Sequence[ModelTurn] | Respond, *, on_reask: Reasks | None = None
    ) -> None:
        self._respond: Respond | None = None
        self._turns: tuple[ModelTurn, ...] = ()
        if callable(turns):
            self._respond = turns
        elif isinstance(turns, Iterable) and not isinstance(turns, (str, bytes, Mapping)):
            self._turns = tuple(turns)
            bad = [t for t in self._turns if not isinstance(t, ModelTurn)]
            if bad:
                raise ScriptError(
                    f"a script's turns must be ModelTurn objects (say('...') or call('tool', "
                    f"...)), not {bad[0]!r}."
                )
            if not self._turns:
                raise ScriptError(
                    "the script has no turns: give at least one (say('...') or call(...))."
                )
        else:
            raise ScriptError(
                f"a script is a list of turns or a function of the conversation, not "
                f"{type(turns).__name__}."
            )
        self._reasks: dict[int, tuple[ModelTurn, ...]] = {}
        for index, answers in dict(on_reask or {}).items():
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise ScriptError(f"on_reask keys are turn indexes (0, 1, ...), not {index!r}.")
            many = (answers,) if isinstance(answers, ModelTurn) else tuple(answers)
            if not many or not all(isinstance(a, ModelTurn) for a in many):
                raise ScriptError(
                    f"on_reask[{index}] must be a ModelTurn or a non-empty list of them."
                )
            if self._turns and index >= len(self._turns):
                raise ScriptError(
                    f"on_reask[{index}] names a turn the script does not have (it has "
                    f"{len(self._turns)}: 0 to {len(self._turns) - 1})."
                )
            self._reasks[index] = many

    def __repr__(self) -> str:
        if self._respond is not None:
            return f"Script({getattr(self._respond, '__name__', self._respond)!r})"
        return f"Script({len(self._turns)} turn(s))"

    def answer(self, conversation: Conversation) -> ModelTurn:
        """The turn that answers ``conversation``. Raises :class:`ScriptError` saying what
        is wrong when the script has no answer for it."""
        turn, asked = conversation.turn, conversation.asked
        reasks = self._reasks.get(turn)
        if asked and reasks:
            chosen = reasks[min(asked, len(reasks)) - 1]
        elif self._respond is not None:
            try:
                chosen = self._respond(conversation)
            except ScriptError:
                raise
            except Exception as exc:
                raise ScriptError(
                    f"the script function raised {type(exc).__name__}: {exc} (turn {turn})."
                ) from exc
            if not isinstance(chosen, ModelTurn):
                raise ScriptError(
                    f"the script function returned {chosen!r} for turn {turn}, not a ModelTurn "
                    "(return say('...') or call('tool', ...))."
                )
        elif turn >= len(self._turns):
            raise ScriptError(
                f"the script ran out of turns: the agent asked for turn {turn} (its conversation "
                f"holds {turn} answer(s) of the model) and the script has {len(self._turns)}; "
                "add a turn, or end the agent's loop with a turn that calls no tool "
                "(say('...'))."
            )
        else:
            chosen = self._turns[turn]
        offered = set(conversation.tools)
        unknown = [c.name for c in chosen.tool_calls if c.name not in offered]
        if unknown:
            what = ", ".join(sorted(offered)) or "no tools"
            raise ScriptError(
                f"turn {turn} of the script calls {unknown[0]!r}, which the request does not "
                f"offer (it offers {what}); name one of the agent's tools."
            )
        return chosen
