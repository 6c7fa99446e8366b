"""The reference worker and recovery against every single fault, for each provider; the
fingerprint is stable; two recoveries racing never dispatch twice."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import (
    Authority,
    Context,
    ProviderSpec,
    State,
    reference_recovery,
    reference_worker,
)
from pytest_crashpoints._harness.case.context import CaseEnv
from pytest_crashpoints._harness.search.engine import StatesEngine
from pytest_crashpoints.harness import (
    CrashSettings,
    Deliver,
    KillAt,
    Recover,
    Scenario,
    Schedule,
    SearchLag,
    explore,
    render_failure,
    run_case,
)

TENANT = "tenant-7"
CALLS: dict[str, dict[str, Any]] = {
    "email": {
        "tool": "send_email",
        "args": {"to": "billing@example.com", "subject": "Invoice inv-7", "body": "100 EUR"},
    },
    "payments": {
        "tool": "charge",
        "args": {"amount": 1250, "currency": "eur", "customer": "cus_7"},
    },
    "tickets": {
        "tool": "open_ticket",
        "args": {"repo": f"{TENANT}/billing", "title": "Invoice inv-7", "body": "overdue"},
    },
    "deploy": {
        "tool": "deploy",
        "args": {"service": "billing", "version": "1.4.2", "environment": "production"},
    },
}


def scenario(spec: ProviderSpec, *, messages: int = 1) -> Scenario:
    call = CALLS[spec.name]
    return Scenario(
        worker=reference_worker,
        recover=reference_recovery,
        messages=tuple(
            {
                "task_id": f"t-{i}",
                "calls": [
                    {
                        **call,
                        "key": f"{call['tool']}:{TENANT}:t-{i}",
                        "args": {**call["args"], "reference": f"t-{i}"},
                    }
                ],
            }
            for i in range(messages)
        ),
        providers=(spec,),
        authorities={
            f"t-{i}": Authority.of(
                tenant_id=TENANT,
                credential_scope=f"{spec.name}:read {spec.name}:write",
                policy_version="p1",
            )
            for i in range(messages)
        },
    )


@pytest.mark.parametrize(
    "spec",
    [
        ProviderSpec("email"),
        ProviderSpec("payments"),
        ProviderSpec("payments", idempotency=False),
        ProviderSpec("tickets"),
        ProviderSpec("deploy"),
    ],
    ids=["email", "payments", "payments-without-idempotency", "tickets", "deploy"],
)
def test_reference_passes_every_single_fault_schedule(spec: ProviderSpec, tmp_path: Path) -> None:
    report = explore(
        scenario(spec),
        CrashSettings(mode="exhaustive", max_faults=1),
        base_dir=tmp_path,
        nodeid=f"sweep-{spec.name}",
    )
    assert report.failure is None, render_failure(report)
    # Every kind of fault was exercised and every worker point was reached and killed.
    for point in ("A", "B", "C", "D", "E"):
        assert report.reached.get(point), (point, report.to_json()["coverage"])
    for point in ("A", "B", "C", "recovery.claimed"):
        assert report.killed.get(point), (point, report.to_json()["coverage"])
    if spec.name != "deploy":  # deploy has no lookup: nothing for F to time out
        assert report.reached.get("F")
    assert report.cases >= 12
    # A case counts once per point it reached (a duplicate delivery's D, fired by both
    # workers and named by the schedule, too).
    for run in report.schedules:
        assert len(run.reached) == len(set(run.reached)), run
    assert max(report.reached.values()) <= report.cases


@pytest.mark.parametrize("messages", [4, 6])
def test_many_messages_read_the_whole_ledger(messages: int, tmp_path: Path) -> None:
    # The harness's look for the agent's unsynced files read each file's header, the
    # reference ledger's too, through a descriptor it then closed: that dropped the POSIX
    # locks of the harness's own ledger connection, a worker closing its connection took
    # itself for the last one and checkpointed, and the harness read a stale ledger: at 4
    # messages, the last attempt was missing, a violation of invariant 2 by a correct agent.
    schedule = Schedule(tuple(Deliver(i) for i in range(messages)))
    many = scenario(ProviderSpec("email"), messages=messages)
    result = run_case(many, schedule, base_dir=tmp_path)
    assert result.passed, result.violations


def test_a_kill_recorded_after_a_step_past_the_keep_budget(tmp_path: Path) -> None:
    # Past the engine's memory budget only deliveries keep a node; a delivery recorded after
    # a step that kept none (a search lag) resumed from that missing node: KeyError, found by
    # the growth benchmark at 16 messages. Each verdict is the processes engine's.
    email = scenario(ProviderSpec("email"), messages=2)
    schedules = [
        Schedule((Deliver(0), Deliver(1))),
        Schedule((Deliver(0), SearchLag("email", 241.0), Deliver(1, KillAt("B")))),
        Schedule((SearchLag("email", 241.0), Deliver(0, KillAt("C")), Deliver(1))),
    ]
    with StatesEngine(email, base_dir=tmp_path, keep_budget=0) as engine:
        expected = engine.run(schedules[0], None).expected_effects
        for schedule in schedules[1:]:
            states = engine.run(schedule, expected)
            real = run_case(email, schedule, base_dir=tmp_path, expected=expected)
            assert states.passed and real.passed, (schedule, states.violations)
            assert states.fingerprint == real.fingerprint, schedule


def test_deploy_without_lookup_ends_in_review_after_a_lost_answer(tmp_path: Path) -> None:
    result = run_case(
        scenario(ProviderSpec("deploy")),
        Schedule((Deliver(0, KillAt("B")),)),
        base_dir=tmp_path,
    )
    assert result.passed, result.violations
    assert any("state=MANUAL_REVIEW" in line for line in result.state)
    assert sum(line.startswith("effect deploy") for line in result.state) == 1


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule((Deliver(0, KillAt("B")),)),
        Schedule((Deliver(0, KillAt("C")), Deliver(1, duplicate="concurrent", pause_at="B"))),
    ],
    ids=str,
)
def test_the_same_schedule_gives_the_same_fingerprint(schedule: Schedule, tmp_path: Path) -> None:
    runs = [
        run_case(scenario(ProviderSpec("email"), messages=2), schedule, base_dir=tmp_path)
        for _ in range(3)
    ]
    assert {r.fingerprint for r in runs} == {runs[0].fingerprint}
    assert {r.passed for r in runs} == {True}
    assert runs[0].state  # the fingerprint covers a real state, not nothing


def _three_unknown_emails(ctx: Any) -> None:
    """Leave three attempts UNKNOWN, their emails never sent (killed before the request)."""
    for n in range(3):
        attempt, _ = ctx.ledger.record_intent(
            task_id="t-0",
            tool_name="send_email",
            args={**CALLS["email"]["args"], "n": n},
            idempotency_key=f"race:{n}",
            authority=ctx.authority("t-0"),
            actor="dead-worker",
        )
        ctx.ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="dead", reason="x")
        ctx.ledger.transition(attempt.attempt_id, State.UNKNOWN, actor="dead", reason="x")


def test_two_recoveries_racing_never_dispatch_twice(tmp_path: Path) -> None:
    from pytest_crashpoints._harness.case.world import World
    from pytest_crashpoints._process.interleaving import run_interleaved

    spec = ProviderSpec("email", search_lag=0.0)
    base = scenario(spec)
    for round_ in range(6):
        env = CaseEnv(str(tmp_path / f"race-{round_}"), (spec,))
        world = World(base, env)
        try:
            _three_unknown_emails(world.ctx)
            world.clock.advance(1000)  # past the dead worker's lease and the search lag
            calls = [
                functools.partial(_recover_as, world.env, who)
                for who in ("recovery-a", "recovery-b")
            ]
            # Even rounds race freely. Odd rounds hold recovery-b at its first ledger write,
            # let recovery-a claim and look up the first attempt, run recovery-b to its end,
            # then let recovery-a finish with what it read before.
            order = (
                []
                if round_ % 2 == 0
                else [(1, "ledger.write"), (0, "recovery.looked_up"), (1, None), (0, None)]
            )
            outcomes = run_interleaved(calls, order, timeout=30, clock=world.clock)
            assert [o.kind for o in outcomes] == ["completed", "completed"], outcomes
            sends = [r for r in world.providers["email"].journal.requests() if r.effect_applied]
            assert sorted(r.correlation_id for r in sends) == ["race:0", "race:1", "race:2"]
            states = {a.state for a in world.ctx.ledger.attempts()}
            assert states == {State.OUTCOME_CONFIRMED}
        finally:
            world.close()


def _recover_as(env: CaseEnv, who: str) -> object:
    ctx = Context(env, who)
    try:
        return reference_recovery(ctx)
    finally:
        ctx.close()


def test_recovery_kill_points_are_reachable(tmp_path: Path) -> None:
    result = run_case(
        scenario(ProviderSpec("email")),
        Schedule((Deliver(0, KillAt("B")), Recover(KillAt("recovery.looked_up")))),
        base_dir=tmp_path,
    )
    assert result.passed
    # The dead worker's lease had not run out: recovery left it alone, nothing to kill.
    assert result.kills == ("B#1",)


def test_a_policy_bump_keeps_the_key_the_task_still_holds(tmp_path: Path) -> None:
    # Tenant and scope are unchanged, so the task's API key must stay valid.
    from pytest_crashpoints.harness import ChangeAuthority

    result = run_case(
        scenario(ProviderSpec("email")),
        Schedule((ChangeAuthority(0, "bump_policy"), Deliver(0))),
        base_dir=tmp_path,
    )
    assert result.passed, [str(v) for v in result.violations]
    assert any(
        "state=OUTCOME_CONFIRMED" in line and "policy=p1-next" in line for line in result.state
    )


def test_a_second_delivery_comes_after_a_first_that_never_reaches_its_gate(
    tmp_path: Path,
) -> None:
    # The lost answer means the first worker never passes B: two faults of a schedule of
    # bound 2 that cannot both act. The second delivery then runs after the first, and the
    # case is judged, not reported as a harness error.
    from pytest_crashpoints.harness import LoseResponse

    spec = ProviderSpec("email")
    lost = Schedule(
        (
            LoseResponse("email", 1, "reset"),
            Deliver(0, duplicate="concurrent", pause_at="B", pause_hit=1),
        )
    )
    result = run_case(scenario(spec), lost, base_dir=tmp_path)
    assert not result.errors, result.errors
    assert "worker-2 runs after it" in result.timeline
    assert result.passed, render_failure(result)
