"""Every invariant a test breaks: a recovery with two bugs, each shown by a schedule of its own
(a tenant crossed after E; an attempt left without an owner after F), explored. The failure
is the first schedule that breaks an invariant; the one that breaks the other is found after
it, with its own replay token, the same for the same seed, in each mode and on each engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_crashpoints import Authority, ProviderSpec, reference_worker
from pytest_crashpoints.harness import (
    CrashSettings,
    ExplorationReport,
    Scenario,
    explore,
    read_token,
    render_failure,
)
from scenarios.broken.agents import tenant_blind_recovery, tenant_blind_releasing_recovery

#: ``scenarios/broken/test_broken_agents.py``'s (importing it would apply the crashpoints
#: marker, which this suite, plugin off and strict markers, does not know).
INVOICE_EMAIL = {
    "task_id": "invoice-7",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "send_email",
            "key": "invoice:tenant-7:inv-7:send",
            "args": {
                "to": "billing@customer.example",
                "subject": "Invoice INV-7",
                "body": "Amount due: 120.00 EUR by 2026-09-01.",
            },
        }
    ],
}
SCENARIO = Scenario(
    worker=reference_worker,
    recover=tenant_blind_releasing_recovery,
    messages=(INVOICE_EMAIL,),
    providers=(ProviderSpec("email"),),
    authorities={
        "invoice-7": Authority.of(
            tenant_id="tenant-7", credential_scope="email:read email:write", policy_version="p1"
        )
    },
)
EXHAUSTIVE = CrashSettings(points=("B", "E", "F"), mode="exhaustive", max_faults=1, seed=11)
#: The first failing schedule, and the one found after it, in enumeration order.
MOVED = (
    "deliver message 0, kill at B (hit 1); E: move tenant for the task of message 0; advance "
    "the clock 120s; run recovery"
)
RELEASED = (
    "deliver message 0, kill at B (hit 1); F: email lookups time out until lifted; advance "
    "the clock 120s; run recovery"
)


def explored(base: Path, settings: CrashSettings, name: str) -> ExplorationReport:
    return explore(SCENARIO, settings, base_dir=base / name, nodeid="test_two.py::test_two")


def also_of(report: ExplorationReport) -> list[tuple[tuple[int | str, ...], str, str]]:
    assert report.failure is not None
    return [(a.invariants, str(a.schedule), a.token) for a in report.failure.also]


@pytest.mark.parametrize(("engine", "jobs"), [("states", 1), ("states", 2), ("processes", 1)])
def test_exhaustive_mode_reports_the_first_schedule_of_each_other_invariant(
    tmp_path: Path, engine: str, jobs: int
) -> None:
    settings = dataclasses.replace(EXHAUSTIVE, engine=engine, jobs=jobs)  # type: ignore[arg-type]
    report = explored(tmp_path, settings, "run")
    failure = report.failure
    assert failure is not None and report.verdict == "failed"
    # THE failure: the first failing schedule, as before.
    assert str(failure.schedule) == MOVED and failure.invariants == (1, 2, 4)
    [also] = failure.also
    assert also.invariants == (5,) and also.broken == (5,) and str(also.schedule) == RELEASED
    assert also.violations[0].startswith("invariant 5 (in-flight work is visible")
    # It is the first in enumeration order that breaks 5: none before it did.
    runs = [run for run in report.schedules if run.phase == "exhaustive"]
    first_five = next(run for run in runs if 5 in run.invariants)
    assert first_five.schedule_text == RELEASED and first_five.index == also.index
    # The rest of the enumeration ran, after the failure: every faulted schedule.
    assert [run.index for run in runs] == list(range(len(runs)))
    failed_at = next(i for i, run in enumerate(runs) if run.verdict == "failed")
    assert failure.also_cases == len(runs) - failed_at - 1 > 0
    assert failure.every_invariant == (1, 2, 4, 5)
    token = read_token(also.token)
    assert str(token.schedule) == RELEASED and token.seed == 11
    assert "also breaks invariant 5 (" in render_failure(report)


def test_the_same_seed_finds_the_same_others_and_their_tokens_replay_them(
    tmp_path: Path,
) -> None:
    one, two = explored(tmp_path, EXHAUSTIVE, "one"), explored(tmp_path, EXHAUSTIVE, "two")
    assert also_of(one) == also_of(two) and also_of(one)
    assert one.failure is not None
    [also] = one.failure.also
    replayed = explored(tmp_path, dataclasses.replace(EXHAUSTIVE, replay=also.token), "replay")
    assert replayed.failure is not None and replayed.cases == 2  # fault-free, then the token's
    assert str(replayed.failure.schedule) == RELEASED and replayed.failure.invariants == (5,)
    # A replay runs its one schedule: nothing is looked for after it.
    assert replayed.failure.also == () and replayed.failure.also_cases == 0


def test_hypothesis_mode_shrinks_one_for_each_other_invariant_the_same_every_run(
    tmp_path: Path,
) -> None:
    settings = CrashSettings(
        points=("B", "E", "F"), mode="hypothesis", max_faults=2, max_examples=30, seed=11
    )
    one, two = explored(tmp_path, settings, "one"), explored(tmp_path, settings, "two")
    assert one.failure is not None and two.failure is not None
    assert str(one.failure.schedule) == str(two.failure.schedule)
    assert also_of(one) == also_of(two)
    # Both bugs are reported, each by its minimal schedule (two faults a schedule may have,
    # shrunk to the kill and one change), whichever the first search found.
    assert {4, 5} <= set(one.failure.every_invariant)
    assert one.failure.also and one.failure.also_cases > 0
    assert {str(one.failure.schedule), *(str(a.schedule) for a in one.failure.also)} == {
        MOVED, RELEASED
    }
    for also in one.failure.also:
        assert not set(also.invariants) & set(one.failure.invariants)


def test_a_recovery_with_one_bug_reports_no_other(tmp_path: Path) -> None:
    """The search finds only what is there: the tenant-blind recovery alone keeps its
    owners, so no schedule after its failure breaks 5; the report says how many it ran."""
    report = explore(
        dataclasses.replace(SCENARIO, recover=tenant_blind_recovery),
        EXHAUSTIVE,
        base_dir=tmp_path,
        nodeid="test_one.py::test_one",
    )
    assert report.failure is not None and str(report.failure.schedule) == MOVED
    assert report.failure.also == () and report.failure.also_cases > 0
    assert "no other invariant broken in " in render_failure(report)


class _RefusesAnOwnerlessAttempt:
    """A ledger view (the reference ledger's) that raises on reading an in-flight attempt
    without an owner: a view of the user's own that cannot take what it reads."""

    def __init__(self, ledger: object) -> None:
        self._ledger = ledger

    def attempts(self) -> object:
        attempts = self._ledger.attempts()  # type: ignore[attr-defined]
        if any(a.in_flight and a.owner is None for a in attempts):
            raise RuntimeError("an attempt without an owner: this view cannot read it")
        return attempts

    def __getattr__(self, name: str) -> object:
        return getattr(self._ledger, name)


def test_a_case_that_raises_after_the_failure_stops_the_search_and_says_so(
    tmp_path: Path,
) -> None:
    """The failure stands; the search for the others stops at the case that raised (in the
    user's ledger view), and the report says which and why."""
    scenario = dataclasses.replace(
        SCENARIO, ledger_view=lambda ctx: _RefusesAnOwnerlessAttempt(ctx.ledger)
    )
    report = explore(scenario, EXHAUSTIVE, base_dir=tmp_path, nodeid="test_two.py::test_two")
    failure = report.failure
    assert failure is not None and str(failure.schedule) == MOVED
    assert failure.invariants == (1, 2, 4) and failure.also == ()
    assert failure.also_stopped == (
        "a case raised RuntimeError: an attempt without an owner: this view cannot read it "
        f"(schedule: {RELEASED})"
    )
    assert "the search for other invariants stopped early: a case raised RuntimeError" in (
        render_failure(report)
    )
