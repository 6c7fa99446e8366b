"""For each invariant, a worker or recovery broken on purpose: the harness reports exactly that
invariant, with the evidence that shows it, and nothing else (real subprocesses, real kills)."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import (
    Authority,
    Context,
    ProviderSpec,
    State,
    crashpoint,
    guarded_call,
    reference_recovery,
    reference_worker,
)
from pytest_crashpoints.harness import (
    Advance,
    CaseResult,
    Deliver,
    KillAt,
    LookupTimeouts,
    Recover,
    Scenario,
    Schedule,
    run_case,
)
from scenarios.broken.agents import gives_up_after_crashed_recovery

EMAIL = {"to": "billing@example.com", "subject": "Invoice inv-7", "body": "100 EUR"}
DEPLOY = {"service": "billing", "version": "1.4.2", "environment": "production"}
MESSAGE = {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "inv-7:send", "args": EMAIL}]}


def authority(*scopes: str, tenant: str = "tenant-7") -> Authority:
    return Authority.of(tenant_id=tenant, credential_scope=scopes, policy_version="p1")


def scenario(
    worker: Any = reference_worker, recover: Any = reference_recovery, **kw: Any
) -> Scenario:
    base = Scenario(
        worker=worker,
        recover=recover,
        messages=(MESSAGE,),
        providers=(ProviderSpec("email"),),
        authorities={"t-1": authority("email:read", "email:write")},
    )
    return dataclasses.replace(base, **kw)


def deploy_scenario(recover: Any, **kw: Any) -> Scenario:
    """:func:`scenario` with one deploy of task ``t-1`` instead (a provider with no lookup),
    recovered by ``recover``."""
    return scenario(
        recover=recover,
        messages=({"task_id": "t-1", "calls": [{"tool": "deploy", "key": "d-1", "args": DEPLOY}]},),
        providers=(ProviderSpec("deploy"),),
        authorities={"t-1": authority("deploy:write")},
        **kw,
    )


def caught(
    case: Scenario, schedule: Schedule, tmp_path: Path, invariant: int, *, quiet_day_ok: bool = True
) -> CaseResult:
    golden = run_case(
        case, Schedule(tuple(Deliver(i) for i in range(len(case.messages)))), base_dir=tmp_path
    )
    # Most bugs need a fault to show; some are wrong on a quiet day already.
    assert golden.passed == quiet_day_ok, [str(v) for v in golden.violations]
    result = run_case(case, schedule, base_dir=tmp_path, expected=golden.expected_effects)
    assert {v.invariant for v in result.violations} == {invariant}, [
        str(v) for v in result.violations
    ]
    assert not result.errors
    return result


# -- 1: a fresh idempotency key per try -------------------------------------------------------


def fresh_key_worker(message: Mapping[str, Any], ctx: Context) -> None:
    call = message["calls"][0]
    guarded_call(
        ctx.ledger,
        ctx.adapters()[call["tool"]],
        task_id=message["task_id"],
        args=call["args"],
        idempotency_key=f"{call['key']}:{uuid.uuid4()}",  # the bug: a new key every try
        authority=ctx.authority(message["task_id"]),  # type: ignore[arg-type]
        actor=ctx.worker_id,
    )


def test_1_a_fresh_key_per_try_sends_twice(tmp_path: Path) -> None:
    result = caught(scenario(fresh_key_worker), Schedule((Deliver(0, KillAt("A")),)), tmp_path, 1)
    [violation] = result.violations
    assert "message 0's mail.send happened twice at email" in violation.message
    assert "email: it has no idempotency" in violation.message
    assert "before them: worker-1 was killed at A (hit 1)" in violation.message
    assert len(violation.attempt_ids) == 2  # two attempts, two keys, one logical effect


# -- 2: work skipped after a crash ------------------------------------------------------------


def skip_after_crash_worker(message: Mapping[str, Any], ctx: Context) -> None:
    marker = ctx.env.path / f"handled-{message['task_id']}"
    if marker.exists():
        return  # "already handled": but it never was
    marker.touch()  # the bug: acknowledged before the work is done
    crashpoint("message.acked")
    reference_worker(message, ctx)


def test_2_work_skipped_after_a_crash_is_reported_as_dropped(tmp_path: Path) -> None:
    result = caught(
        scenario(skip_after_crash_worker),
        Schedule((Deliver(0, KillAt("message.acked")),)),
        tmp_path,
        2,
    )
    [violation] = result.violations
    assert "message 0 (task t-1) was delivered and its mail.send at email" in violation.message
    assert "silently dropped: no effect at the provider and no attempt in review" in (
        violation.message
    )


# -- 3: a request id the provider never issued ------------------------------------------------


@dataclasses.dataclass
class OwnRequestIds:
    """Wraps an adapter and records a client-made id instead of the provider's."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def dispatch(self, args: Any, **kw: Any) -> Any:
        receipt = self.inner.dispatch(args, **kw)
        return dataclasses.replace(receipt, request_id=f"client-{uuid.uuid4().hex[:8]}")


def own_request_id_worker(message: Mapping[str, Any], ctx: Context) -> None:
    call = message["calls"][0]
    guarded_call(
        ctx.ledger,
        OwnRequestIds(ctx.adapters()[call["tool"]]),
        task_id=message["task_id"],
        args=call["args"],
        idempotency_key=call["key"],
        authority=ctx.authority(message["task_id"]),  # type: ignore[arg-type]
        actor=ctx.worker_id,
    )


def test_3_a_made_up_request_id_hides_the_real_one(tmp_path: Path) -> None:
    result = caught(
        scenario(own_request_id_worker), Schedule((Deliver(0),)), tmp_path, 3, quiet_day_ok=False
    )
    [violation] = result.violations
    assert "the operator cannot trust attempt" in violation.message
    assert "request id 'client-" in violation.message
    assert "was never issued by the provider" in violation.message


# -- 4: a colleague's wider credentials -------------------------------------------------------


def borrowed_key_worker(message: Mapping[str, Any], ctx: Context) -> None:
    call = message["calls"][0]
    own = ctx.authority(message["task_id"])
    wider = ctx.authority("t-admin")  # the bug: borrows the admin task's credentials
    assert own is not None and wider is not None
    adapter = ctx.adapters()[call["tool"]]
    real_client_for = adapter._client_for
    adapter._client_for = lambda authority: real_client_for(
        wider if authority == own else authority
    )
    guarded_call(
        ctx.ledger,
        adapter,
        task_id=message["task_id"],
        args=call["args"],
        idempotency_key=call["key"],
        authority=own,
        actor=ctx.worker_id,
    )


def test_4_a_request_under_wider_credentials(tmp_path: Path) -> None:
    case = scenario(
        borrowed_key_worker,
        authorities={
            "t-1": authority("email:read", "email:write"),
            "t-admin": authority("email:read", "email:write", "payments:write"),
        },
    )
    result = caught(case, Schedule((Deliver(0),)), tmp_path, 4, quiet_day_ok=False)
    violation = result.violations[0]  # the send; the lookup that confirmed it is the next
    assert "email request sg_req_" in violation.message
    # The harness issued the worker a credential for the admin task's authority (ground
    # truth), and the ledger says the attempt was made under a narrower one.
    assert "made at t=1s for task t-1 under tenant 'tenant-7', scope 'email:read email:write " in (
        violation.message
    )
    assert "made with scope wider than the attempt's: payments:write" in violation.message


# -- 5: UNKNOWN left without an owner ---------------------------------------------------------


def forget_owner_recovery(ctx: Context) -> None:
    ctx.recover()
    db = sqlite3.connect(ctx.env.ledger_path)
    try:
        with db:  # the bug: "releasing" the attempts it backs off from
            db.execute("UPDATE attempts SET owner = NULL WHERE state = 'UNKNOWN'")
    finally:
        db.close()


def test_5_unknown_left_without_an_owner(tmp_path: Path) -> None:
    schedule = Schedule((Deliver(0, KillAt("B")), LookupTimeouts("email"), Advance(120), Recover()))
    result = caught(scenario(recover=forget_owner_recovery), schedule, tmp_path, 5)
    [violation] = result.violations
    assert "is UNKNOWN and has no owner" in violation.message
    assert "after step 4 (run recovery" in violation.message


# -- 6: recovery that changes the ledger on every run -----------------------------------------


def relink_every_run_recovery(ctx: Context) -> None:
    ctx.recover()
    for attempt in ctx.ledger.attempts():
        if attempt.state is State.MANUAL_REVIEW and attempt.parent_attempt_id is None:
            # the bug: a fresh review item for the same thing, on every run
            ctx.ledger.link_attempt(
                attempt.attempt_id,
                args=attempt.args,
                authority=attempt.authority,
                actor=ctx.worker_id,
                reason="still needs review",
            )


def test_6_recovery_that_never_settles(tmp_path: Path) -> None:
    case = deploy_scenario(relink_every_run_recovery)
    result = caught(case, Schedule((Deliver(0, KillAt("B")),)), tmp_path, 6)
    messages = " ".join(v.message for v in result.violations)
    assert "running recovery a second time after the quiet phase changed the ledger" in messages
    assert any("parent=k1" in line for v in result.violations for line in v.evidence)


# -- 6: recovery that ends elsewhere after being killed itself ---------------------------------


def test_6_recovery_killed_at_its_claim_ends_elsewhere(tmp_path: Path) -> None:
    # The catalogue's recovery that gives up (marks FAILED) an attempt a recovery died on.
    # A provider with no lookup: recovery passes recovery.claimed but never
    # recovery.looked_up, so the harness must kill it at the claim.
    case = deploy_scenario(gives_up_after_crashed_recovery)
    result = caught(case, Schedule((Deliver(0, KillAt("B")),)), tmp_path, 6)
    [violation] = result.violations
    assert "recovery killed at recovery.claimed and run again ended elsewhere" in violation.message
    assert any("state=FAILED" in line for line in violation.evidence)
    assert any("state=MANUAL_REVIEW" in line for line in violation.evidence)


def hangs_after_a_crashed_recovery(ctx: Context) -> None:
    for attempt in ctx.ledger.attempts():
        if attempt.in_flight and (attempt.owner or "").startswith("recovery-"):
            threading.Event().wait()  # the bug: waits for the dead recovery to let go
    ctx.recover()


def test_a_recovery_that_hangs_in_the_killed_recovery_replay_is_inconclusive(
    tmp_path: Path,
) -> None:
    case = deploy_scenario(hangs_after_a_crashed_recovery, timeout=2.0)
    result = run_case(case, Schedule((Deliver(0, KillAt("B")),)), base_dir=tmp_path)
    assert not result.passed and result.violations == ()  # a timeout proves nothing
    assert any(
        error.startswith("inconclusive: killed-recovery replay: recovery-")
        and "timed out" in error
        for error in result.errors
    ), result.errors


def claims_only_outside_the_copy_recovery(ctx: Context) -> None:
    if "killed-recovery" in str(ctx.env.path):
        return  # the bug: behaves differently on another directory (state outside the case)
    ctx.recover()


def test_a_recovery_that_does_not_reach_its_point_on_the_copy_is_a_harness_error(
    tmp_path: Path,
) -> None:
    case = scenario(recover=claims_only_outside_the_copy_recovery)
    result = run_case(case, Schedule((Deliver(0, KillAt("B")),)), base_dir=tmp_path)
    assert not result.passed
    assert any(
        "killed-recovery replay: recovery did not reach 'recovery.looked_up'" in error
        and "not deterministic" in error
        for error in result.errors
    ), result.errors


@pytest.mark.parametrize(
    "worker", [fresh_key_worker, skip_after_crash_worker], ids=lambda f: f.__name__
)
def test_the_broken_workers_pass_without_faults(worker: Any, tmp_path: Path) -> None:
    # Each of these bugs needs its fault: on a quiet day they look fine.
    assert run_case(scenario(worker), Schedule((Deliver(0),)), base_dir=tmp_path).passed


def worker_leaving_a_helper(message: Mapping[str, Any], ctx: Context) -> object:
    import subprocess

    # A helper still running when the worker ends: the bug under test, not a wait.
    subprocess.Popen(["sleep", "30"], start_new_session=True)
    return reference_worker(message, ctx)


def test_a_worker_that_leaves_a_process_running_is_a_harness_error_naming_it(
    tmp_path: Path,
) -> None:
    result = run_case(
        scenario(worker=worker_leaving_a_helper), Schedule((Deliver(0),)), base_dir=tmp_path
    )
    assert not result.passed and result.violations == ()
    [error] = result.errors
    assert error.startswith("worker-1 ended with process(es) it started still running: pid ")
    assert "(sleep 30)" in error
