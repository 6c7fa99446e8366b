"""Fail points: free when disarmed; matched by name, hit number and context when armed."""

from __future__ import annotations

import timeit
from typing import Any

import pytest

from pytest_crashpoints import CrashTransport, crashpoint, crashpoint_context
from pytest_crashpoints._inject.failpoints import Count, Fault, Kill, Pause, Raise
from pytest_crashpoints._process.outcome import Raised
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessUsageError


class Injected(Exception):
    pass


def empty(name: str, /, **context: object) -> None:
    return None


def test_disarmed_crashpoint_costs_about_an_empty_call() -> None:
    assert crashpoint("A", tool="send_email") is None

    def best(fn: Any) -> float:
        return min(timeit.repeat(lambda: fn("A", tool="x"), number=20_000, repeat=7))

    assert best(crashpoint) < 3 * best(empty)


def _calls(calls: list[tuple[str, dict[str, object]]]) -> None:
    for name, context in calls:
        try:
            crashpoint(name, **context)
        except Injected:
            continue


def test_raise_on_the_nth_call_matching_the_context() -> None:
    def worker() -> None:
        crashpoint("A", tool="send_email")
        crashpoint("A", tool="charge")
        crashpoint("B", tool="send_email")
        try:
            crashpoint("A", tool="send_email")
        except Injected as exc:
            assert str(exc) == "boom"
        else:
            raise AssertionError("the third matching call did not raise")
        crashpoint("A", tool="send_email")

    outcome = run_worker(
        worker, faults=[Fault("A", Raise(Injected("boom")), hit=2, when={"tool": "send_email"})]
    )
    assert outcome.kind == "completed", outcome
    assert outcome.matched == (3,)
    assert [(h.point, h.n) for h in outcome.hits] == [
        ("A", 1),
        ("A", 2),
        ("B", 1),
        ("A", 3),
        ("A", 4),
    ]


def test_the_injected_exception_is_told_apart_from_the_workers_own() -> None:
    def worker() -> None:
        crashpoint("A")

    outcome = run_worker(worker, faults=[Fault("A", Raise(Injected("boom")))])
    assert isinstance(outcome, Raised) and outcome.injected_at == ("A", 1), outcome


def test_every_hit_and_count_only() -> None:
    def worker() -> None:
        _calls([("A", {})] * 3)

    outcome = run_worker(
        worker, faults=[Fault("A", Count(), hit=None), Fault("A", Raise(Injected()), hit=None)]
    )
    assert outcome.kind == "completed", outcome
    assert outcome.matched == (3, 3)


def test_context_from_an_enclosing_block() -> None:
    def worker() -> list[str]:
        raised = []
        with crashpoint_context(tool="send_email"):
            for attempt in (1, 2):
                try:
                    crashpoint("B", attempt=attempt)
                except Injected:
                    raised.append(f"attempt {attempt}")
        try:
            crashpoint("B", tool="other", attempt=2)
        except Injected:
            raised.append("other")
        return raised

    outcome = run_worker(
        worker, faults=[Fault("B", Raise(Injected()), when={"tool": "send_email", "attempt": 2})]
    )
    assert outcome.kind == "completed" and outcome.value == ["attempt 2"], outcome


def test_a_deferred_c_fires_at_the_next_fail_point_of_any_name() -> None:
    import httpx

    def worker() -> str:
        inner = httpx.MockTransport(lambda request: httpx.Response(200, text="ok"))
        client = httpx.Client(transport=CrashTransport(inner, points=("C",)))
        response = client.get("https://provider.test/x")  # C is counted here, deferred
        assert response.text == "ok"
        crashpoint("ledger.write", op="record_request_id")  # ... and fires here
        return "not reached"

    outcome = run_worker(worker, faults=[Fault("C", Raise(Injected()))])
    assert isinstance(outcome, Raised) and outcome.injected_at == ("C", 1), outcome
    assert [h.point for h in outcome.hits] == ["C"]  # the action fires before the next count


def test_pause_and_kill_are_plain_data() -> None:
    # Only checks the plan shape here; pauses and kills are exercised with real workers.
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
        "import pytest_crashpoints.harness as h; h.run_case, p.CrashTransport; "
        "assert 'multiprocess' in sys.modules and 'httpx' in sys.modules; "
        "assert all(hasattr(p, name) for name in p.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
