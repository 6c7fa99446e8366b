"""Replay tokens: one compact, shell-safe string naming a schedule exactly, with its seed and
the test it came from (``--crashpoints-replay=TOKEN``, ``crashpoints replay TOKEN``)."""

from __future__ import annotations

import base64
import dataclasses
import json
import zlib

from ..errors import CrashpointsError
from .schedule import Schedule

__all__ = ["Token", "decode_token", "read_token", "replay_token", "to_json"]


def to_json(schedule: Schedule) -> str:
    return json.dumps(schedule.to_dict(), sort_keys=True, separators=(",", ":"))


def replay_token(schedule: Schedule, *, seed: int | None = None, nodeid: str | None = None) -> str:
    """A compact, shell-safe token naming ``schedule`` exactly (``--crashpoints-replay``),
    with the seed and the test it came from."""
    payload = {"schedule": schedule.to_dict(), "seed": seed, "nodeid": nodeid}
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")


@dataclasses.dataclass(frozen=True)
class Token:
    """What a replay token holds."""

    schedule: Schedule
    seed: int | None
    nodeid: str | None


def read_token(token: str) -> Token:
    """The schedule, seed and test in a replay token; a damaged one raises CrashpointsError."""
    try:
        raw = zlib.decompress(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        payload = json.loads(raw)
        return Token(
            Schedule.from_dict(payload["schedule"]), payload.get("seed"), payload.get("nodeid")
        )
    except CrashpointsError:
        raise
    except Exception as exc:
        raise CrashpointsError(
            f"replay token {token[:24]!r}… is damaged ({type(exc).__name__}); copy it again "
            "from the failure report, whole."
        ) from exc


def decode_token(token: str) -> tuple[Schedule, int | None]:
    """The schedule and seed in a replay token; a damaged token raises CrashpointsError."""
    read = read_token(token)
    return read.schedule, read.seed
