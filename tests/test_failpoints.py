"""Fail points: free when disarmed; matched by name, hit number and context when armed."""

from __future__ import annotations

import timeit
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_crashpoints import _failpoints
from pytest_crashpoints._errors import HarnessUsageError
from pytest_crashpoints._failpoints import (
    Count,
    Fault,
    Kill,
    Pause,
    Raise,
    crashpoint,
    crashpoint_context,
    crashpoint_deferred,
)


class Recorder:
    """A channel that records what a worker would tell the harness."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, obj: Any) -> None:
        self.sent.append(obj)

    def recv(self) -> Any:
        raise EOFError


class Injected(Exception):
    pass


@pytest.fixture
def arm() -> Iterator[Any]:
    """Arm fail points in this process (raise and count only: never a kill in the test
    process)."""

    def install(*faults: Fault) -> _failpoints._Armed:
        return _failpoints.install(faults, Recorder())

    yield install
    _failpoints.uninstall()


def empty(name: str, /, **context: object) -> None:
    return None


def test_disarmed_crashpoint_costs_about_an_empty_call() -> None:
    assert _failpoints._armed is None
    crashpoint("A", tool="send_email")

    def best(fn: Any) -> float:
        return min(timeit.repeat(lambda: fn("A", tool="x"), number=20_000, repeat=7))

    assert best(crashpoint) < 3 * best(empty)


def test_raise_on_the_nth_call_matching_the_context(arm: Any) -> None:
    armed = arm(Fault("A", Raise(Injected("boom")), hit=2, when={"tool": "send_email"}))
    crashpoint("A", tool="send_email")
    crashpoint("A", tool="charge")
    crashpoint("B", tool="send_email")
    with pytest.raises(Injected, match="boom"):
        crashpoint("A", tool="send_email")
    crashpoint("A", tool="send_email")
    assert armed.matched == [3]
    assert armed.injected_at == ("A", 3)
    assert [(h.point, h.n) for h in armed.trace] == [
        ("A", 1),
        ("A", 2),
        ("B", 1),
        ("A", 3),
        ("A", 4),
    ]


def test_every_hit_and_count_only(arm: Any) -> None:
    armed = arm(Fault("A", Count(), hit=None), Fault("A", Raise(Injected()), hit=None))
    for _ in range(3):
        with pytest.raises(Injected):
            crashpoint("A")
    assert armed.matched == [3, 3]


def test_context_from_an_enclosing_block(arm: Any) -> None:
    arm(Fault("B", Raise(Injected()), when={"tool": "send_email", "attempt": 2}))
    with crashpoint_context(tool="send_email"):
        crashpoint("B", attempt=1)
        with pytest.raises(Injected):
            crashpoint("B", attempt=2)
    crashpoint("B", tool="other", attempt=2)


def test_a_deferred_action_fires_at_the_next_call_of_any_name(arm: Any) -> None:
    armed = arm(Fault("C", Raise(Injected())))
    crashpoint_deferred("C", source="transport")
    assert armed.pending is not None
    with pytest.raises(Injected):
        crashpoint("ledger.write", op="record_request_id")
    assert armed.injected_at == ("C", 1)
    assert armed.pending is None


def test_pause_without_a_harness_kills_nobody_in_the_test(arm: Any) -> None:
    # Only checks the plan shape here; pauses are exercised with real workers.
    fault = Fault("A", Pause("gate"))
    assert fault.action == Pause("gate")
    assert Fault("A").action == Kill()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"point": ""}, "not a fail point name"),
        ({"point": "A", "hit": 0}, "not a hit number"),
        ({"point": "A", "action": "kill"}, "is not Kill"),
    ],
)
def test_bad_faults_say_what_to_do(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessUsageError, match=message):
        Fault(**kwargs)


def test_importing_the_package_does_not_import_multiprocess_or_httpx() -> None:
    import subprocess
    import sys

    code = (
        "import sys, pytest_crashpoints as p; "
        "assert 'multiprocess' not in sys.modules and 'httpx' not in sys.modules; "
        "p.run_worker, p.CrashTransport; "
        "assert 'multiprocess' in sys.modules and 'httpx' in sys.modules; "
        "assert all(hasattr(p, name) for name in p.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
