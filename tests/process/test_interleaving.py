"""Forced interleavings and duplicate delivery (D)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Kill, Raise
from pytest_crashpoints._process.delivery import (
    deliver_concurrently,
    redeliver_after_crash,
    redeliver_after_success,
)
from pytest_crashpoints._process.interleaving import run_interleaved
from pytest_crashpoints._process.outcome import Completed, Killed, Raised
from pytest_crashpoints.errors import HarnessError, HarnessUsageError, WorkerNotPaused


def append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def test_two_workers_follow_the_forced_order_every_time(tmp_path: Path) -> None:
    def worker(name: str, log: Path) -> None:
        crashpoint("claim")
        append(log, f"{name} claimed")
        crashpoint("send")
        append(log, f"{name} sent")

    order = [(1, "claim"), (0, "claim"), (0, "send"), (1, "send"), (1, None), (0, None)]
    expected = ["w0 claimed", "w1 claimed", "w1 sent", "w0 sent"]
    for run in range(50):
        log = tmp_path / f"log{run}"
        outcomes = run_interleaved(
            [lambda log=log: worker("w0", log), lambda log=log: worker("w1", log)],
            order,
            timeout=20,
        )
        assert all(isinstance(o, Completed) for o in outcomes), outcomes
        assert log.read_text().splitlines() == expected, f"run {run}"


def test_a_gate_the_worker_completes_without_is_an_error() -> None:
    with pytest.raises(WorkerNotPaused, match="without reaching gate"):
        run_interleaved([lambda: None], [(0, "never")], timeout=10)


def test_a_killed_worker_skips_its_remaining_steps() -> None:
    outcomes = run_interleaved(
        [lambda: crashpoint("A"), lambda: crashpoint("A")],
        [(0, "A"), (1, "A"), (0, None), (1, None)],
        faults=[[Fault("A", Kill())], []],
        timeout=10,
    )
    assert isinstance(outcomes[0], Killed)
    assert isinstance(outcomes[1], Completed)


@pytest.mark.parametrize(
    ("order", "message"),
    [([(2, "A")], "names worker 2"), ([(0, None), (0, "A")], "after worker 0 was run")],
)
def test_bad_orders_are_refused(order: list[tuple[int, str | None]], message: str) -> None:
    with pytest.raises(HarnessUsageError, match=message):
        run_interleaved([lambda: None, lambda: None], order)


def handle_invoice(message: dict[str, str]) -> str:
    """A naive handler: checks, then sends, then records (a check-then-act race)."""
    db = sqlite3.connect(message["db"], isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS sent (key TEXT)")
    seen = db.execute("SELECT count(*) FROM sent WHERE key = ?", (message["key"],)).fetchone()
    crashpoint("checked")
    if seen[0]:
        return "skipped"
    append(Path(message["journal"]), message["key"])
    crashpoint("sent")
    db.execute("INSERT INTO sent VALUES (?)", (message["key"],))
    return "sent"


@pytest.fixture
def message(tmp_path: Path) -> dict[str, str]:
    return {
        "key": "invoice:7:send",
        "db": str(tmp_path / "worker.sqlite3"),
        "journal": str(tmp_path / "journal"),
    }


def journal(message: dict[str, str]) -> list[str]:
    path = Path(message["journal"])
    return path.read_text().splitlines() if path.exists() else []


def test_redelivery_after_success(message: dict[str, str]) -> None:
    result = redeliver_after_success(handle_invoice, message, timeout=10)
    assert isinstance(result.first, Completed) and result.first.value == "sent"
    assert isinstance(result.second, Completed) and result.second.value == "skipped"
    assert result.second.hits[0].point == "D"
    assert result.second.hits[0].context == {"delivery": 2}
    assert journal(message) == ["invoice:7:send"]


def test_redelivery_after_a_crash_between_send_and_record(message: dict[str, str]) -> None:
    result = redeliver_after_crash(
        handle_invoice, message, crash=[Fault("sent", Kill())], timeout=10
    )
    assert isinstance(result.first, Killed)
    assert isinstance(result.second, Completed) and result.second.value == "sent"
    # The naive handler sends twice: the harness made the bug visible.
    assert journal(message) == ["invoice:7:send", "invoice:7:send"]


def test_redelivery_after_a_crash_that_never_happened(message: dict[str, str]) -> None:
    with pytest.raises(HarnessError, match="meant to be killed"):
        redeliver_after_crash(handle_invoice, message, crash=[Fault("nowhere")], timeout=10)
    with pytest.raises(HarnessUsageError, match="needs a Kill fault"):
        redeliver_after_crash(
            handle_invoice, message, crash=[Fault("sent", Raise(OSError()))], timeout=10
        )


def test_concurrent_delivery_with_a_forced_race(message: dict[str, str]) -> None:
    # Both check before either records: the race that sends twice, reproduced on demand.
    first, second = deliver_concurrently(
        handle_invoice,
        message,
        interleaving=[(0, "checked"), (1, "checked"), (0, None), (1, None)],
        timeout=10,
    )
    assert isinstance(first, Completed) and first.value == "sent"
    assert isinstance(second, Completed) and second.value == "sent"
    assert journal(message) == ["invoice:7:send", "invoice:7:send"]


def test_concurrent_delivery_serialized(message: dict[str, str]) -> None:
    first, second = deliver_concurrently(
        handle_invoice,
        message,
        interleaving=[(1, "D"), (0, None), (1, None)],
        timeout=10,
    )
    assert isinstance(first, Completed) and first.value == "sent"
    assert isinstance(second, Completed) and second.value == "skipped"
    assert journal(message) == ["invoice:7:send"]


def test_concurrent_delivery_reports_a_raise(message: dict[str, str]) -> None:
    first, second = deliver_concurrently(
        handle_invoice,
        message,
        faults=[[Fault("D", Raise(RuntimeError("down")))], []],
        timeout=10,
    )
    assert isinstance(first, Raised)
    assert isinstance(second, Completed)
