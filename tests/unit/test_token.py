"""Replay tokens are copied from CI logs: every field of one is checked before it is used."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

import pytest

from pytest_crashpoints import CrashpointsError
from pytest_crashpoints.harness import (
    Advance,
    Deliver,
    KillAt,
    Recover,
    Schedule,
    read_token,
    replay_token,
)


def forge(payload: Any) -> str:
    raw = json.dumps(payload).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


def token_with(*steps: dict[str, Any], nodeid: object = "t.py::test_x", seed: object = 1) -> str:
    return forge({"schedule": {"version": 1, "steps": list(steps)}, "seed": seed, "nodeid": nodeid})


def test_a_token_of_every_step_reads_back() -> None:
    schedule = Schedule(
        (Deliver(0, KillAt("B", 2), duplicate="after"), Advance(120), Recover(KillAt("C")))
    )
    token = replay_token(schedule, seed=7, nodeid="crash/test_a.py::TestX::test_y[1-a b]")
    read = read_token(token)
    assert (read.schedule, read.seed, read.nodeid) == (
        schedule,
        7,
        "crash/test_a.py::TestX::test_y[1-a b]",
    )


@pytest.mark.parametrize(
    ("nodeid", "why"),
    [
        ("--basetemp=victim", "is not a test's node id"),
        ("-pevil_plugin", "is not a test's node id"),
        ("@args.txt", "is not a test's node id"),
        ("", "is not a test's node id"),
        ("t.py::test_x\n--basetemp=x", "is not a test's node id"),
        ("/etc/passwd::x", "is not a path inside the rootdir"),
        ("../outside/test_x.py::test", "is not a path inside the rootdir"),
        ("crash/../../x.py", "is not a path inside the rootdir"),
        (5, "is not a string"),
        (["t.py"], "is not a string"),
    ],
)
def test_a_forged_node_id_is_refused_in_one_line(nodeid: object, why: str) -> None:
    with pytest.raises(CrashpointsError, match="replay token refused") as info:
        read_token(token_with({"step": "Deliver", "message": 0}, nodeid=nodeid))
    assert why in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ({"step": "Advance", "seconds": -50}, "seconds=-50; it must be a finite number"),
        ({"step": "Advance", "seconds": "NaN"}, "seconds='NaN', which is not of its type"),
        ({"step": "Advance", "seconds": True}, "seconds=True, which is not of its type"),
        ({"step": "Deliver", "message": -1}, "message=-1; it must be a message index"),
        ({"step": "Deliver", "message": "0"}, "message='0', which is not of its type"),
        ({"step": "Deliver", "message": 0, "kill": {"point": "B", "hit": 0}}, "hit=0; it must"),
        ({"step": "Deliver", "message": 0, "kill": {"point": "", "hit": 1}}, "an empty point"),
        ({"step": "Deliver", "message": 0, "duplicate": "twice"}, "duplicate='twice', which"),
        ({"step": "LookupTimeouts", "provider": "email", "calls": 0}, "calls=0; it must"),
        ({"step": "ChangeAuthority", "message": 0, "change": "rm -rf"}, "change='rm -rf'"),
        ({"step": "Recover", "kill": {"point": 3}}, "point=3, which is not of its type"),
        ({"step": "LoseResponse", "provider": "email", "nth": 1, "variant": "eof"}, "variant="),
        ({"step": "Refuse", "provider": "email", "nth": 1, "variant": 500}, "variant=500"),
        ({"step": "SearchLag", "provider": "email", "seconds": -1}, "seconds=-1; it must"),
        (
            {"step": "Deliver", "message": 0, "midway": {"point": "A", "hit": 2, "change": "x"}},
            "midway has change='x'",
        ),
        ({"step": "Recover", "racing": "yes"}, "racing='yes', which is not of its type"),
    ],
)
def test_a_forged_step_field_is_refused_in_one_line(step: dict[str, Any], why: str) -> None:
    with pytest.raises(CrashpointsError, match="replay token refused") as info:
        read_token(token_with(step))
    assert why in str(info.value) and "\n" not in str(info.value)


def test_infinite_and_nan_seconds_are_refused() -> None:
    # Python's json writes and reads Infinity and NaN: a forged token can carry them.
    for value in (float("inf"), float("nan")):
        with pytest.raises(CrashpointsError, match="it must be a finite number of seconds"):
            read_token(token_with({"step": "Advance", "seconds": value}))


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"schedule": {"version": 1, "steps": []}, "seed": -1}, "seed -1 is not a whole number"),
        ({"schedule": {"version": 1, "steps": []}, "seed": "1"}, "seed '1' is not a whole number"),
        ({"schedule": {"version": 1, "steps": []}, "argv": ["-x"]}, "unknown field(s) 'argv'"),
    ],
)
def test_a_forged_seed_or_field_is_refused(payload: dict[str, Any], why: str) -> None:
    with pytest.raises(CrashpointsError, match="replay token refused") as info:
        read_token(forge(payload))
    assert why in str(info.value)


@pytest.mark.parametrize("token", ["garbage", "", "   ", forge([1, 2]), forge({"seed": 1})])
def test_garbage_is_a_damaged_token_in_plain_words(token: str) -> None:
    with pytest.raises(CrashpointsError) as info:
        read_token(token)
    message = str(info.value)
    assert "copy it" in message and "\n" not in message
    assert "Error" not in message  # no exception class names: plain words


def test_a_token_asking_for_more_harness_time_than_a_year_is_refused() -> None:
    with pytest.raises(CrashpointsError, match=r"seconds=1e\+308; it must be a finite number"):
        read_token(token_with({"step": "Advance", "seconds": 1e308}))


def test_a_token_of_too_many_steps_is_refused_before_any_is_built() -> None:
    steps = [{"step": "Advance", "seconds": 1.0}] * 1_000
    with pytest.raises(CrashpointsError, match="1000 steps"):
        read_token(token_with(*steps))
    with pytest.raises(CrashpointsError, match="expands to more than"):
        read_token(token_with(*steps * 20))  # 20,000 steps: refused before it is read


def test_a_token_that_inflates_to_megabytes_is_refused_without_inflating_it() -> None:
    import resource

    # 40 MB of JSON whitespace, compressed a megabyte at a time (never whole in memory here).
    deflater = zlib.compressobj(9)
    parts = [deflater.compress(b'{"schedule": {"version": 1, "steps": []}, "x": "')]
    parts += [deflater.compress(b" " * 1_000_000) for _ in range(40)]
    parts.append(deflater.compress(b'"}') + deflater.flush())
    bomb = base64.urlsafe_b64encode(b"".join(parts)).decode().rstrip("=")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(CrashpointsError, match="expands to more than"):
        read_token(bomb)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 20 * 1024  # never 40 MB in memory


def test_a_deeply_nested_token_is_refused_before_it_is_parsed() -> None:
    raw = b"[" * 100_000 + b"]" * 100_000
    token = base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")
    with pytest.raises(CrashpointsError, match="nested 100000 deep"):
        read_token(token)
