"""The run history: versioned JSON, and a timeline that reads in causal order."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_crashpoints import ProviderSpec
from pytest_crashpoints._harness.verdict.history import History
from pytest_crashpoints.harness import Deliver, KillAt, Schedule, run_case

from .test_reference_sweep import scenario


def test_history_round_trips_through_versioned_json() -> None:
    history = History()
    history.add(1, 1.0, "deliver", "message 0 to worker-1", message=0)
    history.add(1, 1.0, "kill", "worker-1 was killed at B (hit 1)", point="B", hit=1)
    assert History.from_json(history.to_json()) == history
    with pytest.raises(ValueError, match="history format version 99"):
        History.from_json({"version": 99, "entries": []})


def test_the_timeline_puts_a_send_between_its_dispatch_and_the_kill(tmp_path: Path) -> None:
    result = run_case(
        scenario(ProviderSpec("email")), Schedule((Deliver(0, KillAt("B")),)), base_dir=tmp_path
    )
    lines = result.timeline.splitlines()

    def first(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    assert first("deliver    message 0 to worker-1") < first("-> INTENT_RECORDED")
    assert first("-> INTENT_RECORDED") < first("-> DISPATCHED") < first("mail.send")
    assert first("mail.send") < first("killed at B (hit 1)") < first("quiet phase")
    # Recovery's lookup comes between its UNKNOWN and its OUTCOME_CONFIRMED.
    assert first("-> UNKNOWN") < first("messages.get") < first("-> OUTCOME_CONFIRMED")
