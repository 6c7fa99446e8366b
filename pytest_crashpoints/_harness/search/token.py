"""Replay tokens: one compact, shell-safe string naming a schedule exactly, with its seed and
the test it came from (``--crashpoints-replay=TOKEN``, ``crashpoints replay TOKEN``)."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import shlex
import types
import typing
import zlib
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

from ...errors import CrashpointsError
from ..case.schedule import _STEP_TYPES, Schedule

__all__ = [
    "Token",
    "check_messages",
    "check_nodeid",
    "decode_token",
    "read_token",
    "replay_command",
    "replay_token",
    "to_json",
]


#: What a replay token may hold, checked before anything is expanded or built: a token is
#: text from a log anyone may write to. (A real schedule has a few steps and is well under a
#: kilobyte; the harness's own clock moves a few hours in a case.)
MAX_TOKEN_CHARS = 64 * 1024
MAX_DECOMPRESSED = 256 * 1024
MAX_STEPS = 256
MAX_DEPTH = 8
#: The largest ``Advance`` a token may ask for: a year of harness seconds.
MAX_ADVANCE = 366 * 24 * 3600.0


def to_json(schedule: Schedule) -> str:
    return json.dumps(schedule.to_dict(), sort_keys=True, separators=(",", ":"))


def replay_token(schedule: Schedule, *, seed: int | None = None, nodeid: str | None = None) -> str:
    """A compact, shell-safe token naming ``schedule`` exactly (``--crashpoints-replay``),
    with the seed and the test it came from."""
    payload = {"schedule": schedule.to_dict(), "seed": seed, "nodeid": nodeid}
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


def replay_command(nodeid: str, token: str) -> str:
    """The command that runs ``token``'s schedule against the test ``nodeid``."""
    return f"pytest {shlex.quote(nodeid)} --crashpoints-replay={token}"


@dataclasses.dataclass(frozen=True)
class Token:
    """What a replay token holds."""

    schedule: Schedule
    seed: int | None
    nodeid: str | None


def read_token(token: str) -> Token:
    """The schedule, seed and test in a replay token.

    Every field is checked, since tokens are copied from logs anyone may write to: a damaged
    or forged token raises CrashpointsError, one line naming the field. A step's message index
    is checked against the test's messages only when it runs (:func:`check_messages`).
    """
    if not isinstance(token, str) or not token.strip():
        raise CrashpointsError(
            "the replay token is empty; copy it again from the failure report, whole."
        )
    if len(token) > MAX_TOKEN_CHARS:
        raise _forged(f"it is {len(token)} characters long (a token is at most {MAX_TOKEN_CHARS})")
    try:
        inflater = zlib.decompressobj()
        compressed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        raw = inflater.decompress(compressed, MAX_DECOMPRESSED)
        if inflater.unconsumed_tail or len(raw) >= MAX_DECOMPRESSED:
            raise _forged(f"it expands to more than {MAX_DECOMPRESSED} bytes")
        if not inflater.eof:
            raise zlib.error("truncated")
        depth = _nesting(raw)
        if depth > MAX_DEPTH:
            raise _forged(f"its content is nested {depth} deep (a schedule is {MAX_DEPTH} at most)")
        payload = json.loads(raw)
    except CrashpointsError:
        raise
    except Exception as exc:
        raise CrashpointsError(
            f"replay token {token[:24]!r}… is damaged ({_plain(exc)}); copy it again "
            "from the failure report, whole."
        ) from None
    if not isinstance(payload, dict) or "schedule" not in payload:
        raise CrashpointsError(
            f"replay token {token[:24]!r}… is damaged (it holds no schedule); copy it again "
            "from the failure report, whole."
        )
    unknown = sorted(set(payload) - {"schedule", "seed", "nodeid"})
    if unknown:
        raise _forged(f"it has unknown field(s) {', '.join(map(repr, unknown))}")
    seed, nodeid = payload.get("seed"), payload.get("nodeid")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise _forged(f"its seed {seed!r} is not a whole number of 0 or more")
    if nodeid is not None:
        check_nodeid(nodeid)
    steps = payload["schedule"].get("steps") if isinstance(payload["schedule"], dict) else None
    if isinstance(steps, list) and len(steps) > MAX_STEPS:
        raise _forged(f"its schedule has {len(steps)} steps (a schedule has {MAX_STEPS} at most)")
    for index, item in enumerate(steps if isinstance(steps, list) else ()):
        # Before a step is built (its own checks would name the problem less plainly).
        name = item.get("step") if isinstance(item, dict) else None
        kind = _STEP_TYPES.get(name) if isinstance(name, str) else None
        if kind is not None:
            _check_fields(f"step {index} ({kind.__name__})", kind, item)
    return Token(Schedule.from_dict(payload["schedule"]), seed, nodeid)


def check_nodeid(nodeid: object) -> str:
    """``nodeid`` if it is a test's node id as pytest writes it: a relative path inside the
    rootdir, then ``::`` parts; never an option (``-``), an arguments file (``@``), an absolute
    path, a ``..`` or a control character. Raises CrashpointsError otherwise."""
    if not isinstance(nodeid, str):
        raise _forged(f"its node id {nodeid!r} is not a string")
    path = nodeid.partition("::")[0]
    if not path or nodeid[0] in "-@" or any(not ch.isprintable() for ch in nodeid):
        raise _forged(f"its node id {nodeid!r} is not a test's node id")
    parts = PurePosixPath(path).parts
    if path.startswith(("/", "\\")) or PureWindowsPath(path).drive or ".." in parts:
        raise _forged(f"its node id {nodeid!r} is not a path inside the rootdir")
    return nodeid


def check_messages(schedule: Schedule, count: int) -> None:
    """Raise CrashpointsError if a step of ``schedule`` names a message a test with ``count``
    messages does not have."""
    for step in schedule.steps:
        message = getattr(step, "message", None)
        if isinstance(message, int) and message >= count:
            raise CrashpointsError(
                f"the replay token's schedule names message {message}, but this test has "
                f"{count} message(s) (0 to {count - 1}); the token is from another test or "
                "another version of it."
            )


def _forged(why: str) -> CrashpointsError:
    return CrashpointsError(
        f"replay token refused: {why}; copy the token again from the failure report, whole."
    )


def _plain(exc: Exception) -> str:
    if isinstance(exc, zlib.error | binascii.Error | ValueError):
        return "not the text of a replay token"
    return type(exc).__name__


# Checks on a step's fields by name, beyond their types: what a forged token could put there.
_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "message": (lambda v: v >= 0, "a message index of 0 or more"),
    "hit": (lambda v: v >= 1, "a hit of 1 or more"),
    "calls": (lambda v: v >= 1, "a number of calls of 1 or more"),
    "seconds": (
        lambda v: math.isfinite(v) and 0 <= v <= MAX_ADVANCE,
        f"a finite number of seconds from 0 to {MAX_ADVANCE:.0f} (a year)",
    ),
}


def _nesting(raw: bytes) -> int:
    """How deep the arrays and objects of JSON text ``raw`` nest (brackets inside strings
    are not counted), without parsing it: a bound before ``json.loads`` recurses."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _check_fields(where: str, kind: type[Any], fields: Mapping[str, Any]) -> None:
    """Check each field a token gives a schedule step of type ``kind`` (or a KillAt or
    Midway in it) against its annotation, and the numbers in :data:`_RANGES`."""
    hints = typing.get_type_hints(kind)
    for field in dataclasses.fields(kind):
        if field.name not in fields:
            continue
        value = fields[field.name]
        hint = hints.get(field.name, object)
        nested = [t for t in _options(hint) if isinstance(t, type) and dataclasses.is_dataclass(t)]
        if nested and isinstance(value, dict):
            _check_fields(f"{where} {field.name}", nested[0], value)
            continue
        if not _fits(value, hint):
            raise _forged(f"{where} has {field.name}={value!r}, which is not of its type")
        if field.name in _RANGES and isinstance(value, int | float):
            ok, what = _RANGES[field.name]
            if not ok(value):
                raise _forged(f"{where} has {field.name}={value!r}; it must be {what}")
        if isinstance(value, str) and not value:
            raise _forged(f"{where} has an empty {field.name}")


def _options(hint: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(hint)
    return (hint,)


def _fits(value: object, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type (the plain types a schedule step uses; an
    annotation this does not know is taken as fitting)."""
    origin = typing.get_origin(hint)
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return any(
            value == option and type(value) is type(option) for option in typing.get_args(hint)
        )
    if origin is typing.Union or origin is types.UnionType:
        return any(_fits(value, option) for option in typing.get_args(hint))
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if (isinstance(hint, type) and hint in (str, bool)) or dataclasses.is_dataclass(hint):
        return isinstance(value, hint)  # type: ignore[arg-type]
    return True


def decode_token(token: str) -> tuple[Schedule, int | None]:
    """The schedule and seed in a replay token; a damaged token raises CrashpointsError."""
    read = read_token(token)
    return read.schedule, read.seed
