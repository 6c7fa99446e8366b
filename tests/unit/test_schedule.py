"""The schedule model: enumeration up to a bound, covering examples, round trips."""

from __future__ import annotations

import itertools

from hypothesis import given, settings

from pytest_crashpoints.harness import (
    Advance,
    ChangeAuthority,
    Deliver,
    KillAt,
    LookupTimeouts,
    Recover,
    Schedule,
    Space,
    covering_schedules,
    enumerate_schedules,
    schedules,
)

SPACE = Space(
    messages=2,
    reachable=({"A": 1, "B": 2, "C": 1}, {"A": 1, "B": 1}),
    points=frozenset("ABCDEF"),
    providers=("email",),
)


def kinds(schedule: Schedule) -> set[str]:
    found = set()
    for step in schedule.steps:
        if isinstance(step, Deliver):
            if step.kill:
                found.add(f"kill:{step.kill.point}")
            if step.duplicate:
                found.add("D")
        elif isinstance(step, ChangeAuthority):
            found.add("E")
        elif isinstance(step, LookupTimeouts):
            found.add("F")
        elif isinstance(step, Recover) and step.kill:
            found.add("recovery")
    return found


def test_bound_one_is_every_single_fault_at_every_reachable_hit() -> None:
    singles = [s for s in enumerate_schedules(SPACE, max_faults=1) if s.faults]
    kills = {
        (i, step.kill)
        for s in singles
        for i, step in enumerate(s.steps)
        if isinstance(step, Deliver) and step.kill and len(kinds(s)) == 1
    }
    # message 0: A#1, B#1, B#2, C#1; message 1: A#1, B#1 (each delivery is a step of its own)
    assert {k for _, k in kills} == {KillAt("A"), KillAt("B"), KillAt("B", 2), KillAt("C")}
    assert len(singles) == len(set(singles))  # no schedule twice
    assert all(s.steps[0] == Deliver(0) or s.steps[0].message == 0 for s in singles)  # type: ignore[union-attr]


def test_bound_two_adds_every_pair() -> None:
    one = list(enumerate_schedules(SPACE, max_faults=1))
    two = list(enumerate_schedules(SPACE, max_faults=2))
    assert set(one) < set(two)
    assert max(s.faults for s in one) <= 2  # a composite (kill + E) counts its parts
    assert any(s.faults >= 3 for s in two)


def test_covering_schedules_reach_every_kind_of_fault() -> None:
    chosen = covering_schedules(SPACE)
    assert [point for point, _ in chosen] == [
        "A",
        "B",
        "C",
        "D",
        "E",
        "F",
        "recovery.claimed",
        "recovery.looked_up",
    ]
    covered = set().union(*(kinds(schedule) for _, schedule in chosen))
    assert covered == {"kill:A", "kill:B", "kill:C", "D", "E", "F", "recovery"}


def test_a_recovery_after_a_fault_waits_for_the_dead_workers_lease() -> None:
    for schedule in enumerate_schedules(SPACE, max_faults=1):
        for before, step in itertools.pairwise(schedule.steps):
            if isinstance(step, Recover):
                assert isinstance(before, Advance), schedule


@settings(max_examples=50, deadline=None)
@given(schedules(SPACE, max_faults=2))
def test_generated_schedules_deliver_every_message_once_in_order(schedule: Schedule) -> None:
    first = [s.message for s in schedule.steps if isinstance(s, Deliver)]
    assert first == [0, 1]
    assert Schedule.from_dict(schedule.to_dict()) == schedule
