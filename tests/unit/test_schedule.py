"""The schedule model: enumeration up to a bound, covering examples, round trips."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable

import pytest
from hypothesis import given, settings

from pytest_crashpoints._harness.case.schedule import (
    COVERAGE_KINDS,
    KIND_LABELS,
    between_calls,
    fault_kinds,
)
from pytest_crashpoints._harness.search.space import (
    Space,
    _single_faults,
    covering_schedules,
    enumerate_schedules,
    fault_kind,
    probe_kills,
    schedules,
    unplaced_faults,
)
from pytest_crashpoints.errors import CrashpointsError
from pytest_crashpoints.harness import (
    FAULT_KINDS,
    Advance,
    ChangeAuthority,
    Deliver,
    DuplicateRequest,
    FailCommit,
    KillAt,
    LookupTimeouts,
    LoseResponse,
    Midway,
    Recover,
    Refuse,
    Schedule,
    SearchLag,
)

SPACE = Space(
    messages=2,
    reachable=({"A": 1, "B": 2, "C": 1}, {"A": 1, "B": 1}),
    points=frozenset("ABCDEF"),
    providers=("email",),
)
#: Message 0 charges, then emails (two tool calls, each marking A itself); message 1 emails.
TWO_CALLS = Space(
    messages=2,
    reachable=({"A": 2, "B": 2, "C": 3, "db.committed": 6}, {"A": 1, "B": 1, "C": 1}),
    points=frozenset("ABCDEF"),
    providers=("payments", "email"),
    effects=({"payments": 1, "email": 1}, {"email": 1}),
    searching=("payments", "email"),
    own_a=(2, 1),
)


def kinds(schedule: Schedule) -> set[str]:
    found = set()
    for step in schedule.steps:
        match step:
            case Deliver(kill=KillAt(point=point), duplicate=twin):
                found |= {f"kill:{point}", *(["D"] if twin else [])}
            case Deliver(duplicate=twin) if twin:
                found.add("D")
            case ChangeAuthority():
                found.add("E")
            case LookupTimeouts():
                found.add("F")
            case Recover(kill=KillAt()):
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
        "racing recovery",
    ]
    covered = set().union(*(kinds(schedule) for _, schedule in chosen))
    assert covered == {"kill:A", "kill:B", "kill:C", "D", "E", "F", "recovery"}
    labels = [label for label, _ in covering_schedules(TWO_CALLS)]
    assert {"lost response", "refused", "search lag", "racing recovery"} <= set(labels)


def _singles(space: Space) -> list[Schedule]:
    return [s for s in enumerate_schedules(space, max_faults=1) if s.faults]


def test_provider_faults_come_before_the_delivery_whose_requests_they_hit() -> None:
    singles = _singles(TWO_CALLS)
    lost = [s for s in singles if any(isinstance(step, LoseResponse) for step in s.steps)]
    first = [s for s in lost if isinstance(s.steps[0], LoseResponse)]
    # One per write of message 0 (a charge, an email), in three variants, before its delivery.
    assert {(s.steps[0].provider, s.steps[0].variant) for s in first} == {
        (provider, variant)
        for provider in ("payments", "email")
        for variant in ("reset", "timeout", "502")
    }
    for s in first:
        assert isinstance(s.steps[1], Deliver) and s.steps[1].message == 0
    # Message 1's email: after message 0's delivery, before its own.
    second = [s for s in lost if not isinstance(s.steps[0], LoseResponse)]
    assert len(second) == 3
    for s in second:
        assert [type(step).__name__ for step in s.steps] == ["Deliver", "LoseResponse", "Deliver"]
    refused = {
        (s.steps[0].provider, s.steps[0].variant) for s in singles if isinstance(s.steps[0], Refuse)
    }
    assert refused >= {("payments", "500"), ("payments", "429"), ("payments", "timeout")}
    # F anywhere: during the worker's own confirming lookups, with no kill at all.
    early_f = [
        s for s in singles if isinstance(s.steps[0], LookupTimeouts) and s.faults == 1
    ]
    assert {(s.steps[0].provider, s.steps[0].variant) for s in early_f} >= {
        ("email", "timeout"),
        ("email", "500"),
    }


def test_lag_racing_recoveries_and_e_between_two_calls() -> None:
    singles = _singles(TWO_CALLS)
    lagged = [s for s in singles if any(isinstance(step, SearchLag) for step in s.steps)]
    assert lagged
    for_recovery = for_redelivery = 0
    for s in lagged:
        kinds_ = [type(step).__name__ for step in s.steps]
        at = kinds_.index("SearchLag")
        if kinds_[at + 1 : at + 3] == ["Advance", "Recover"]:
            # killed in flight, the lag, the dead worker's lease, recovery asks
            assert s.steps[at - 1].kill is not None  # type: ignore[union-attr]
            for_recovery += 1
        else:
            # the lag, killed in flight, the lease runs out, the queue delivers it again
            assert kinds_[at + 1 : at + 4] == ["Deliver", "Advance", "Deliver"]
            first, again = s.steps[at + 1], s.steps[at + 3]
            assert first.kill is not None and first.kill.point == "B"  # type: ignore[union-attr]
            assert again == Deliver(first.message)  # type: ignore[union-attr]
            for_redelivery += 1
    assert for_recovery and for_redelivery
    raced = [s for s in singles if any(isinstance(t, Recover) and t.racing for t in s.steps)]
    races = [step for s in raced for step in s.steps if isinstance(step, Recover) and step.racing]
    # Forced interleavings only (a free race is not the same race twice).
    assert {step.pause_at for step in races} == {"recovery.claimed", "recovery.looked_up",
                                                 "db.committed", "C"}
    # After a kill before the send (both recoveries find nothing) and after one in flight.
    kills = {s.steps[0].kill for s in raced if isinstance(s.steps[0], Deliver)}
    assert {k.point for k in kills if k} == {"A", "B"}
    midway = [
        (i, step.midway)
        for s in singles
        for i, step in enumerate(s.steps)
        if isinstance(step, Deliver) and step.midway
    ]
    # Only message 0 has a second tool call (its second own A).
    assert {m.point for _, m in midway} == {"A"} and {m.hit for _, m in midway} == {2}
    assert {m.change for _, m in midway} == {"revoke", "narrow", "bump_policy", "move_tenant"}


def test_a_concurrent_delivery_may_wait_at_any_reachable_point() -> None:
    gates = {
        (step.pause_at, step.pause_hit)
        for s in _singles(TWO_CALLS)
        for step in s.steps
        if isinstance(step, Deliver) and step.duplicate == "concurrent" and step.message == 0
    }
    assert gates == {
        ("A", 1),
        ("A", 2),
        ("B", 1),
        ("B", 2),
        ("C", 1),
        ("C", 2),
        ("C", 3),
        ("db.committed", 1),
    }


EVERY_STEP = Schedule(
    (
        LoseResponse("payments", 2, "502"),
        Refuse("email", 1, "429"),
        LookupTimeouts("email", None, "500"),
        SearchLag("tickets", 300.0),
        Deliver(0, midway=Midway("A", 2, "revoke")),
        Deliver(1, duplicate="concurrent", pause_at="C", pause_hit=3),
        Recover(racing=True, pause_at="db.committed"),
        Advance(120.0),
        Recover(KillAt("recovery.claimed")),
    )
)


def test_every_step_round_trips_and_reads_in_words() -> None:
    assert Schedule.from_dict(EVERY_STEP.to_dict()) == EVERY_STEP
    text = str(EVERY_STEP)
    assert "payments applies its 2nd write from now on and the answer is lost (a 502)" in text
    assert "email refuses its 1st write from now on before applying anything (a 429" in text
    assert "F: email lookups answer 500 until lifted" in text
    assert "tickets's search lags 300s behind its writes" in text
    assert "E: revoke for its task while it waits at A (hit 2)" in text
    assert "while the first waits at C (hit 3) (D)" in text
    assert "run two recoveries at once, the first waiting at db.committed" in text
    assert EVERY_STEP.faults == 8


@pytest.mark.parametrize(
    ("step", "fragment"),
    [
        ({"step": "Advance", "seconds": -50}, "only moves forward"),
        ({"step": "Deliver", "message": 0, "kill": {"point": "B", "hit": 0}}, "hit must be 1"),
        ({"step": "LoseResponse", "provider": "email", "variant": "lost"}, "variant must be"),
        ({"step": "Nope"}, "KeyError"),
    ],
)
def test_a_damaged_step_names_itself(step: dict[str, object], fragment: str) -> None:
    with pytest.raises(CrashpointsError, match=f"step 1 of the schedule .*{fragment}"):
        Schedule.from_dict({"version": 1, "steps": [{"step": "Deliver", "message": 0}, step]})


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


def test_without_a_recovery_no_fault_only_a_recovery_would_meet() -> None:
    import dataclasses

    alone = dataclasses.replace(TWO_CALLS, recovers=False)
    steps = [step for s in _singles(alone) for step in s.steps]
    assert not [s for s in steps if isinstance(s, Recover) and (s.kill or s.racing)]
    # A lagging search only meets the queue's redelivery of a dead worker's message.
    for schedule in _singles(alone):
        if any(isinstance(step, SearchLag) for step in schedule.steps):
            assert [type(step).__name__ for step in schedule.steps][-3:] != ["Advance", "Recover"]
            assert sum(isinstance(step, Deliver) for step in schedule.steps) == 3
    # A lookup failing during the worker's own delivery still matters, and so does E.
    assert [s for s in steps if isinstance(s, LookupTimeouts)]
    assert [s for s in steps if isinstance(s, ChangeAuthority)]
    with_recovery = [step for s in _singles(TWO_CALLS) for step in s.steps]
    assert [s for s in with_recovery if isinstance(s, Recover) and s.racing]


def test_without_a_recovery_no_schedule_runs_one() -> None:
    """An agent with no recovery (a command without ``recover_command``, a worker without
    ``recover``): its E schedules do not end in a recovery step that would do nothing."""
    alone = dataclasses.replace(SPACE, recovers=False)
    found = list(enumerate_schedules(alone, max_faults=2))
    assert any(isinstance(step, ChangeAuthority) for s in found for step in s.steps)
    assert not [s for s in found if any(isinstance(step, Recover) for step in s.steps)]
    with_recovery = list(enumerate_schedules(SPACE, max_faults=1))
    assert [s for s in with_recovery if any(isinstance(step, Recover) for step in s.steps)]


def test_work_left_in_flight_at_the_last_tool_call_meets_the_same_faults() -> None:
    """A message with two tool calls: recovery faults follow a kill at the first call's B and
    at the last's, so the second call's recovery path is tested too."""
    singles = _singles(TWO_CALLS)
    killed_then_recovered = {
        s.steps[0].kill
        for s in singles
        if isinstance(s.steps[0], Deliver)
        and any(isinstance(step, Recover) and step.kill for step in s.steps)
    }
    assert {KillAt("B", 1), KillAt("B", 2)} <= killed_then_recovered


def test_fault_kinds_partition_the_single_faults() -> None:
    """``faults=``: each kind keeps its own schedules; together they are every schedule."""
    space = dataclasses.replace(  # an MCP server's sessions, failed commits, power losses too
        TWO_CALLS, sessions=("email",), duplicating=("email",),
        points=TWO_CALLS.points | {"db.commit"},
        reachable=({**TWO_CALLS.reachable[0], "db.commit": 2}, TWO_CALLS.reachable[1]),
        lossy=((("jobs.db", "wal/1"),), ()),
    )
    every = set(_singles(space))
    by_kind = {
        kind: set(_singles(dataclasses.replace(space, kinds=frozenset({kind}))))
        for kind in FAULT_KINDS
    }
    assert all(by_kind.values()), [kind for kind, found in by_kind.items() if not found]
    # A backup restored and a disk that stays full are tried only when chosen: every other
    # kind makes up the default.
    chosen_only = ("backup_restore", "disk_full")
    assert set().union(*(v for k, v in by_kind.items() if k not in chosen_only)) == every
    assert not (by_kind["backup_restore"] | by_kind["disk_full"]) & every
    full = [step.fail_commit for s in by_kind["disk_full"] for step in s.steps
            if isinstance(step, Deliver) and step.fail_commit]
    assert full and all(f.lasting and f.variant == "full" for f in full)
    for one, other in itertools.combinations(by_kind, 2):
        assert not by_kind[one] & by_kind[other], (one, other)
    lost = by_kind["lose_response"]
    assert all(any(isinstance(step, LoseResponse) for step in s.steps) for s in lost)
    assert not any(isinstance(step, Deliver) and step.kill for s in lost for step in s.steps)
    kills = by_kind["kill"]
    assert all(kinds(s) <= {"kill:A", "kill:B", "kill:C", "kill:db.commit"} for s in kills)
    assert not any(isinstance(step, Deliver) and step.power_loss for s in kills for step in s.steps)
    powered = by_kind["power_loss"]  # the same places, message 0 only (its database is lossy)
    assert {
        (step.message, step.kill) for s in powered for step in s.steps
        if isinstance(step, Deliver) and step.power_loss
    } == {(0, kill) for kill in space.kill_sites(0)}
    chosen = dataclasses.replace(TWO_CALLS, kinds=frozenset({"lose_response"}))
    assert list(enumerate_schedules(chosen, max_faults=2))[1:] != []
    assert all(
        isinstance(step, (Deliver, LoseResponse, Advance, Recover))
        for s in enumerate_schedules(chosen, max_faults=2)
        for step in s.steps
    )


def test_e_between_two_calls_of_an_agent_with_only_the_automatic_points() -> None:
    """No A of its own: E waits at the answer to each write but the last (B), or at the
    first commit after it when no answer was seen; never before the first write."""

    @dataclasses.dataclass
    class Reached:
        point: str
        n: int

    def run(*names: str) -> list[Reached]:
        counts: dict[str, int] = {}
        hits = []
        for name in names:
            counts[name] = counts.get(name, 0) + 1
            hits.append(Reached(name, counts[name]))
        return hits

    two = run("db.committed", "A", "http.write", "B", "db.committed", "A", "http.write", "B")
    assert between_calls(two) == (KillAt("B", 1),)
    unseen = run("http.write", "db.committed", "http.write", "db.committed")
    assert between_calls(unseen) == (KillAt("db.committed", 1),)
    assert between_calls(run("db.committed", "http.write", "B", "db.committed")) == ()
    space = dataclasses.replace(
        SPACE, messages=1, reachable=({"B": 2, "http.write": 2},), own_a=(0,),
        between=(between_calls(two),),
    )
    midways = {
        step.midway for s in _singles(space) for step in s.steps
        if isinstance(step, Deliver) and step.midway
    }
    assert {(m.point, m.hit) for m in midways} == {("B", 1)}
    assert {m.change for m in midways} == {"revoke", "narrow", "bump_policy", "move_tenant"}


def test_faults_of_a_recovery_only_at_points_it_reaches() -> None:
    def recovery_points(space: Space) -> set[tuple[str, str | None]]:
        found = set()
        for s in _singles(space):
            for step in s.steps:
                if isinstance(step, Recover) and (step.kill or step.racing):
                    where = step.kill.point if step.kill else step.pause_at
                    found.add(("racing" if step.racing else "kill", where))
        return found

    every = recovery_points(SPACE)
    assert ("kill", "recovery.claimed") in every and ("racing", "recovery.claimed") in every
    assert unplaced_faults(SPACE) == []
    own = dataclasses.replace(SPACE, recovery_reach=frozenset({"db.committed"}))
    assert recovery_points(own) == {("racing", "db.committed")}
    assert "recovery killed at recovery.claimed" in unplaced_faults(own)
    assert "two racing recoveries, the first waiting at C" in unplaced_faults(own)
    probes = probe_kills(SPACE)
    assert probes and all(
        any(isinstance(step, Deliver) and step.kill for step in s.steps) for s in probes
    )


def test_a_forgotten_session_only_for_a_provider_that_keeps_sessions() -> None:
    space = dataclasses.replace(TWO_CALLS, sessions=("email",))
    refusals = {
        (step.provider, step.variant)
        for s in _singles(space) for step in s.steps if isinstance(step, Refuse)
    }
    assert ("email", "session") in refusals and ("payments", "session") not in refusals
    assert not any(v == "session" for _, v in {
        (step.provider, step.variant)
        for s in _singles(TWO_CALLS) for step in s.steps if isinstance(step, Refuse)
    })
    forgets = [
        s for s in _singles(dataclasses.replace(space, kinds=frozenset({"forget_session"})))
    ]
    assert forgets and all(
        any(isinstance(step, Refuse) and step.variant == "session" for step in s.steps)
        for s in forgets
    )
    step = Refuse("email", 1, "session")
    assert "session forgotten" in str(step)
    assert Schedule.from_dict(Schedule((step, Deliver(0))).to_dict()).steps[0] == step
    with pytest.raises(ValueError, match="variant must be one of 500, 429, timeout, session"):
        Refuse("email", 1, "gone")  # type: ignore[arg-type]


def test_a_stateless_mcp_server_gets_requests_twice_but_never_a_forgotten_session() -> None:
    stateless = dataclasses.replace(TWO_CALLS, duplicating=("email",))  # no sessions
    steps = [step for s in _singles(stateless) for step in s.steps]
    assert any(isinstance(step, DuplicateRequest) and step.provider == "email" for step in steps)
    assert not any(isinstance(step, Refuse) and step.variant == "session" for step in steps)
    assert any(isinstance(step, Refuse) and step.provider == "email" for step in steps)


def test_kinds_left_out_are_never_tried_and_the_rest_are() -> None:
    """``faults=["-forget_session"]``: every default kind but that one."""
    space = dataclasses.replace(TWO_CALLS, sessions=("email",), duplicating=("email",))
    every = set(_singles(space))
    without = set(_singles(dataclasses.replace(space, left_out=frozenset({"forget_session"}))))
    forgets = {
        s for s in every if any(isinstance(x, Refuse) and x.variant == "session" for x in s.steps)
    }
    assert forgets and without == every - forgets
    no_kills = dataclasses.replace(space, left_out=frozenset({"kill", "duplicate_delivery"}))
    kinds = {fault_kind(fault) for fault in _single_faults(no_kills)}
    assert "kill" not in kinds and "duplicate_delivery" not in kinds
    assert {"lose_response", "refuse", "forget_session", "concurrent_delivery"} <= kinds


def test_no_probe_for_faults_of_recovery_the_test_did_not_choose() -> None:
    assert probe_kills(SPACE)
    assert probe_kills(dataclasses.replace(SPACE, kinds=frozenset({"lose_response"}))) == []


def test_a_failed_commit_at_every_commit_of_the_worker_with_db_commit_declared() -> None:
    space = dataclasses.replace(TWO_CALLS, points=frozenset({"db.commit"}),
                                reachable=({"db.commit": 2}, {"db.commit": 1}))
    failed = {
        (i, step.fail_commit)
        for s in _singles(space) for i, step in enumerate(s.steps)
        if isinstance(step, Deliver) and step.fail_commit
    }
    assert failed == {
        (0, FailCommit(1, "ioerr")), (0, FailCommit(1, "full")),
        (0, FailCommit(2, "ioerr")), (0, FailCommit(2, "full")),
        (1, FailCommit(1, "ioerr")), (1, FailCommit(1, "full")),
    }
    assert not any(
        isinstance(step, Deliver) and step.fail_commit for s in _singles(TWO_CALLS)
        for step in s.steps
    )
    step = Deliver(0, fail_commit=FailCommit(2, "full"))
    assert str(step) == "deliver message 0, its 2nd commit fails (database or disk is full)"
    schedule = Schedule((step,))
    assert schedule.faults == 1 and Schedule.from_dict(schedule.to_dict()) == schedule
    with pytest.raises(ValueError, match="variant must be one of ioerr, full"):
        FailCommit(1, "smoke")  # type: ignore[arg-type]


def test_a_duplicated_request_only_for_an_mcp_server_and_with_d() -> None:
    space = dataclasses.replace(TWO_CALLS, duplicating=("email",))
    duplicated = {
        (step.provider, step.nth)
        for s in _singles(space) for step in s.steps if isinstance(step, DuplicateRequest)
    }
    assert duplicated == {("email", 1)}  # message 0's and message 1's one e-mail each
    assert not any(
        isinstance(step, DuplicateRequest) for s in _singles(TWO_CALLS) for step in s.steps
    )
    without_d = dataclasses.replace(space, points=frozenset("ABCEF"))
    assert not any(
        isinstance(step, DuplicateRequest) for s in _singles(without_d) for step in s.steps
    )
    step = DuplicateRequest("email", 2)
    assert str(step) == "email gets its 2nd write from now on twice (the same request sent again)"
    assert Schedule.from_dict(Schedule((step, Deliver(0))).to_dict()).steps[0] == step


def test_covering_schedules_label_every_kind_of_fault() -> None:
    """Hypothesis's top-up (one schedule per kind no draw reached) labels each kind it adds:
    a failed commit and a request sent twice included (they raised an AssertionError)."""
    space = dataclasses.replace(
        TWO_CALLS, sessions=("email",), duplicating=("email",),
        points=TWO_CALLS.points | {"db.commit"},
        reachable=({**TWO_CALLS.reachable[0], "db.commit": 2}, TWO_CALLS.reachable[1]),
        lossy=((("jobs.db", "wal/1"),), ()),
    )
    labels = {label for label, _ in covering_schedules(space)}
    wanted = {"failed commit", "duplicated request", "session lost", "refused", "power lost"}
    assert wanted <= labels
    only_chosen = {"backup restored", "disk full"}
    assert set(KIND_LABELS.values()) - {"F", "search lag", *only_chosen} <= labels | {"F"}
    assert not only_chosen & labels  # only when chosen


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LoseResponse("email", 0), "nth must be 1 or more"),
        (lambda: LoseResponse("email", 1, "500"), "variant must be one of reset, timeout, 502"),
        (lambda: Refuse("email", 1, "reset"), "variant must be one of 500, 429, timeout, session"),
        (lambda: Refuse("email", -1), "nth must be 1 or more"),
        (lambda: DuplicateRequest("mcp", 0), "nth must be 1 or more"),
    ],
)
def test_a_provider_fault_refuses_a_bad_nth_or_variant(
    make: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_kinds_left_out_take_from_coverage_only_the_points_nothing_else_reaches() -> None:
    """A point stays declared while a kind of fault left in reaches it: B needs its kills, D
    either second delivery, E an authority change, F a lookup failure."""
    from pytest_crashpoints._harness.search.explore import CrashSettings, _declared

    points = ("A", "B", "C", "D", "E", "F")

    def declared(*left_out: str) -> tuple[str, ...]:
        return _declared(CrashSettings(points=points, faults_left_out=left_out))

    assert declared() == declared("forget_session", "refuse", "lose_response") == points
    assert declared("kill") == ("D", "E", "F")
    assert declared("duplicate_delivery") == points  # two workers at once still reach D
    assert declared("duplicate_delivery", "concurrent_delivery") == ("A", "B", "C", "E", "F")
    assert declared("authority_change", "lookup_failure") == ("A", "B", "C", "D")


def test_a_failed_commit_is_tried_with_a_kill_in_the_same_delivery() -> None:
    """With two faults, a commit that fails and a kill later in the same delivery make one
    schedule (the worker that takes the failure for a warning dies before its next commit);
    never with a second worker or a lost machine, and never with one fault."""
    space = dataclasses.replace(
        TWO_CALLS, points=frozenset({"C", "db.commit"}), kinds=frozenset({"failed_commit", "kill"}),
        reachable=({"C": 1, "db.commit": 2}, {"C": 1, "db.commit": 2}),
    )

    def both(schedules: Iterable[Schedule]) -> list[Deliver]:
        return [step for s in schedules for step in s.steps
                if isinstance(step, Deliver) and step.fail_commit and step.kill]

    assert both(enumerate_schedules(space, max_faults=1)) == []
    paired = both(enumerate_schedules(space, max_faults=2))
    assert {(d.message, d.kill, d.fail_commit.hit) for d in paired if d.fail_commit} >= {
        (0, KillAt("C", 1), 1), (0, KillAt("C", 1), 2)}
    assert "kill at C (hit 1), its 2nd commit fails" in str(
        next(d for d in paired if d.fail_commit and d.fail_commit.hit == 2))


def test_a_full_disk_that_stays_full_fails_every_later_commit() -> None:
    lasting = FailCommit(2, "full", lasting=True)
    assert list(lasting.hits)[:3] == [2, 3, 4] and len(lasting.hits) > 100
    assert list(FailCommit(2, "full").hits) == [2]
    assert "and every later one fail" in str(lasting)
    with pytest.raises(ValueError, match="lasting is for a full disk"):
        FailCommit(1, "ioerr", lasting=True)
    round_trip = Schedule((Deliver(0, fail_commit=lasting),))
    assert Schedule.from_dict(round_trip.to_dict()) == round_trip


#: A worker that syncs two lines of a file of its own (``file.sync`` twice) around its e-mail.
SYNCING = Space(
    messages=1,
    reachable=({"B": 1, "C": 1, "file.sync": 2},),
    points=frozenset("BC"),
    providers=("email",),
    effects=({"email": 1},),
)


def _torn(schedules: Iterable[Schedule]) -> list[KillAt]:
    return [
        step.kill
        for s in schedules
        for step in s.steps
        if isinstance(step, Deliver) and step.power_loss and step.kill is not None
    ]


def test_a_power_loss_is_placed_between_each_write_and_its_sync() -> None:
    """Every sync the fault-free run reached (``file.sync``) gets a power loss of its own,
    by default and with ``faults=["power_loss"]``: it is there, not at a kill point, that a
    writer that syncs each record tears one. No plain kill there unless it is declared."""
    windows = [KillAt("file.sync", 1), KillAt("file.sync", 2)]
    assert _torn(_singles(SYNCING)) == windows
    chosen = dataclasses.replace(SYNCING, kinds=frozenset({"power_loss"}))
    assert _torn(_singles(chosen)) == windows
    assert not [s for s in _singles(SYNCING) if "kill:file.sync" in kinds(s)
                and not any(isinstance(step, Deliver) and step.power_loss for step in s.steps)]
    (first, _second) = [s for s in _singles(SYNCING) if _torn([s])]
    assert str(first) == (
        "deliver message 0, power lost between a write and its sync (file.sync, hit 1): its "
        "files keep what they synced, the next record torn"
    )
    assert fault_kind(((0, "power_loss", KillAt("file.sync", 1)),)) == "power_loss"
    assert Schedule.from_dict(first.to_dict()) == first


@pytest.mark.parametrize(
    "space",
    [
        dataclasses.replace(SYNCING, kinds=frozenset({"kill"})),  # power loss not chosen
        dataclasses.replace(SYNCING, left_out=frozenset({"power_loss"})),  # left out
        dataclasses.replace(SYNCING, points=frozenset("DF")),  # no point allows a power loss
        dataclasses.replace(SYNCING, reachable=({"B": 1, "C": 1},)),  # no sync reached
    ],
)
def test_no_torn_write_where_no_power_loss_is_tried(space: Space) -> None:
    assert _torn(_singles(space)) == []


def test_a_declared_sync_point_and_a_lossy_message_place_each_power_loss_once() -> None:
    """``file.sync`` declared (a kill there too) on a message whose files were left unsynced:
    the power loss at each sync is one schedule, not two."""
    space = dataclasses.replace(
        SYNCING, points=frozenset({"B", "C", "file.sync"}), lossy=((("log.txt", "file"),),)
    )
    singles = list(_single_faults(space))  # what Hypothesis draws from, not deduplicated
    assert len(singles) == len(set(singles))
    found = _torn(_singles(space))
    assert set(found) == {KillAt("B"), KillAt("C"), KillAt("file.sync"), KillAt("file.sync", 2)}
    assert {"kill:file.sync"} in [kinds(s) for s in _singles(space) if not _torn([s])]


def test_a_torn_write_has_a_coverage_label_of_its_own() -> None:
    """Hypothesis's top-up runs a power loss between a write and its sync even when no draw
    did (and, for a message whose databases lose commits too, besides the power loss at a
    kill point); the case counts for both labels."""
    labelled = dict(covering_schedules(SYNCING))
    assert _torn([labelled["torn write"]]) == [KillAt("file.sync", 1)]
    lossy = dataclasses.replace(SYNCING, lossy=((("jobs.db", "wal/1"),),))
    labelled = dict(covering_schedules(lossy))
    assert _torn([labelled["power lost"]]) == [KillAt("B", 1)]
    assert _torn([labelled["torn write"]]) == [KillAt("file.sync", 1)]
    assert fault_kinds(labelled["torn write"].steps) == {"power lost", "torn write"}
    assert fault_kinds(labelled["power lost"].steps) == {"power lost"}
    assert "torn write" in COVERAGE_KINDS
