"""A replay token names one schedule exactly: replaying it gives the same verdict, every time."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_crashpoints import CrashpointsError, ProviderSpec, reference_worker
from pytest_crashpoints.harness import (
    Deliver,
    KillAt,
    Scenario,
    Schedule,
    read_token,
    replay_token,
    run_case,
)
from scenarios.broken.agents import blind_retry_recovery

from .test_reference_sweep import scenario as email_scenario


def test_twenty_replays_give_twenty_identical_verdicts(tmp_path: Path) -> None:
    base: Scenario = email_scenario(ProviderSpec("email"))
    broken = Scenario(
        worker=reference_worker,
        recover=blind_retry_recovery,
        messages=base.messages,
        providers=base.providers,
        authorities=base.authorities,
    )
    token = replay_token(Schedule((Deliver(0, KillAt("B")),)), seed=42, nodeid="t.py::test_x")
    read = read_token(token)
    assert (read.seed, read.nodeid) == (42, "t.py::test_x")
    verdicts = set()
    for _ in range(20):
        result = run_case(broken, read.schedule, base_dir=tmp_path)
        verdicts.add(
            (
                tuple(sorted({v.invariant for v in result.violations})),
                result.fingerprint,
                result.kills,
            )
        )
    assert len(verdicts) == 1, verdicts
    [(invariants, _fingerprint, kills)] = verdicts
    assert invariants == (1, 2) and kills == ("B#1",)
    # Failing cases keep their run directories for the evidence; nothing else is left.
    assert len(list(tmp_path.iterdir())) == 20


def test_the_reference_passes_the_same_replay(tmp_path: Path) -> None:
    schedule = read_token(replay_token(Schedule((Deliver(0, KillAt("B")),)))).schedule
    assert run_case(email_scenario(ProviderSpec("email")), schedule, base_dir=tmp_path).passed
    assert list(tmp_path.iterdir()) == []  # a passing case leaves no run directory


@pytest.mark.parametrize("token", ["", "abc", "eNoDAAAAAAE", "e30"])
def test_a_damaged_token_is_a_clear_error(token: str) -> None:
    with pytest.raises(CrashpointsError, match="copy it again from the failure report"):
        read_token(token)
