"""The renewal charger's incident of 2024-06-14 (``scenarios/incident_2024/``): a world whose
clock starts at the incident, two years before the harness's own epoch; an export that also
holds the charge of the customer's other subscription, which is that renewal's history and
never June's effect; a recovery that does nothing, which reproduces no duplicate; a duplicate
production had already made, which is the incident and not the recovery's; and the recovery
alone, with no message, crashed at its own points. Then a reference-ledger incident, stamped
in production with wall time, recovered by the reference recovery alone."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from pytest_crashpoints import (
    Authority,
    Incident,
    Ledger,
    ProviderSpec,
    State,
    reference_recovery,
)
from pytest_crashpoints._harness.case.incident import no_worker, recovery_authorities
from pytest_crashpoints._plugin.fixture import default_authorities
from pytest_crashpoints.harness import (
    CrashSettings,
    Deliver,
    KillAt,
    Recover,
    Scenario,
    Schedule,
    explore,
    run_case,
)
from scenarios.renewal_incident import (
    INCIDENT_2024,
    INCIDENT_2024_DIR,
    RENEWAL_2024,
    recovery,
    recovery_that_does_nothing,
    recovery_that_retries,
    renewals,
    worker_that_retries,
)

PAYMENTS = (ProviderSpec("payments"),)
JUNE = "ch_3PRa6sKx1Rm8Qw2s0Xk2mJd8"  # June's renewal, charged before the worker died
TEAM = "ch_3PRa6tKx1Rm8Qw2s1Lq0VnB4"  # the other subscription's renewal, 3 s later
MAY = "ch_3PG4aZKx1Rm8Qw2s0hY7uT5e"  # May's renewal, which a row of the ledger names
#: A minute after the newest time the incident holds (the team charge at 09:30:05).
AT = dt.datetime(2024, 6, 14, 9, 31, 5, tzinfo=dt.timezone.utc)


def with_worker(worker: Any, recover: Any, incident: Incident = INCIDENT_2024) -> Scenario:
    return Scenario(
        worker=worker, recover=recover, messages=(RENEWAL_2024,), providers=PAYMENTS,
        authorities=default_authorities([RENEWAL_2024], PAYMENTS), ledger_view=renewals,
        incident=incident,
    )


def alone(recover: Any, base: Path, incident: Incident = INCIDENT_2024) -> Scenario:
    """The incident reproduced by ``recover`` alone: no message, no worker."""
    return Scenario(
        worker=no_worker, recover=recover, messages=(), providers=PAYMENTS,
        authorities=recovery_authorities(incident, renewals, PAYMENTS, base),
        ledger_view=renewals, incident=incident,
    )


def sweep(scenario: Scenario, base: Path, points: str = "ABCDF") -> Any:
    settings = CrashSettings(points=tuple(points), mode="exhaustive", max_faults=1)
    return explore(scenario, settings, base_dir=base, nodeid="t::incident-2024")


def test_the_world_of_a_2024_incident_is_in_its_own_time(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"

    def look(message: dict[str, Any], ctx: Any) -> None:
        key = ctx.api_key("payments", message["task_id"])
        with httpx.Client(base_url=ctx.base_url("payments"), timeout=30,
                          headers={"Authorization": f"Bearer {key}"}) as stripe:
            found = [stripe.get(f"/v1/charges/{charge}").json() for charge in (JUNE, MAY)]
            made = stripe.post("/v1/charges", data={"amount": 100, "currency": "usd",
                                                    "customer": "cus_N8vB2qLw"}).json()
        seen.write_text(json.dumps({
            "now": time.time(), "made": made["created"],
            "listed": {c["id"]: c["created"] for c in found},
        }))

    result = run_case(with_worker(look, None), Schedule((Deliver(0),)), base_dir=tmp_path,
                      name="look", keep=True)
    data = json.loads(seen.read_text())
    # The worker's wall clock and the charge it makes are at the incident, in 2024.
    assert AT.timestamp() <= data["now"] < AT.timestamp() + 60
    assert AT.timestamp() <= data["made"] < AT.timestamp() + 60
    # The exported charges keep their own times.
    assert data["listed"][JUNE] == 1718357402 and data["listed"][MAY] == 1715679002
    # The timeline is the incident's chronology: May, June, the team plan, then the case.
    lines = result.timeline.splitlines()
    assert [line[:22] for line in lines[:4]] == [
        "t=2024-05-14T09:30:02Z", "t=2024-06-14T09:30:02Z", "t=2024-06-14T09:30:05Z",
        "t=2024-06-14T09:31:05Z"]
    assert f"[from the incident: {TEAM}: history of ren-team-2024-06 (metadata " \
           "renewal_id)]" in lines[2]
    assert f"[from the incident: {JUNE}: ren-2024-06's effect: metadata renewal_id]" in lines[1]
    assert f"{MAY}: history of ren-2024-05 (ledger row ren-2024-05 names it in its " \
           "result_ref)" in lines[0]
    assert result.run_dir is not None and (result.run_dir / "clock.epoch").is_file()
    shutil.rmtree(result.run_dir)


def test_a_given_time_in_2024_is_where_the_workers_clocks_start(tmp_path: Path) -> None:
    seen = tmp_path / "now"
    at = dt.datetime(2024, 6, 14, 11, 0, tzinfo=dt.timezone.utc)
    incident = Incident(ledger=INCIDENT_2024_DIR / "renewals.sql",
                        exports={"payments": INCIDENT_2024_DIR / "charges.json"}, at=at)

    def note(message: Any, ctx: Any) -> None:
        seen.write_text(repr(time.time()))
        httpx.get(f"{ctx.base_url('payments')}/v1/charges/{JUNE}",
                  headers={"Authorization": f"Bearer {ctx.api_key('payments', 'ren-2024-06')}"})

    run_case(with_worker(note, None, incident), Schedule((Deliver(0),)), base_dir=tmp_path)
    assert at.timestamp() <= float(seen.read_text()) < at.timestamp() + 60


def test_the_broken_recovery_reproduces_with_the_real_duplicate_only(tmp_path: Path) -> None:
    report = sweep(with_worker(worker_that_retries, recovery_that_retries), tmp_path, "C")
    failure = report.failure
    assert failure is not None and 1 in failure.invariants
    duplicates = [v for v in failure.violations if v.startswith("invariant 1")]
    assert len(duplicates) == 1
    [duplicate] = duplicates
    assert "message 0's charges.create happened twice" in duplicate
    assert "by production (in the incident, delivering message 0)" in duplicate
    assert "by worker-1 (delivering message 0)" in duplicate
    assert f"{JUNE}: ren-2024-06's effect: metadata renewal_id" in duplicate
    # Neither the other subscription's charge nor May's is anyone's duplicate or lost.
    assert not any(TEAM in v or MAY in v for v in failure.violations)
    assert failure.deterministic


def test_a_recovery_that_does_nothing_reproduces_no_duplicate(tmp_path: Path) -> None:
    report = sweep(alone(recovery_that_does_nothing, tmp_path), tmp_path)
    failure = report.failure
    assert failure is not None
    # What it left undone (June's row stuck, June's charge never recorded) is its failure;
    # the charges production made, the team plan's among them, are no duplicate of it.
    assert failure.invariants == (2,)
    assert str(failure.schedule) == "no steps"
    assert any("ren-2024-06 ended DISPATCHED" in v for v in failure.violations)
    assert not any(TEAM in v for v in failure.violations)


def _export_without(tmp_path: Path, drop: str = "", add: Callable[[dict[str, Any]], Any] | None
                    = None) -> Path:
    charges = json.loads((INCIDENT_2024_DIR / "charges.json").read_text())
    charges["data"] = [c for c in charges["data"] if c["id"] != drop]
    if add is not None:
        charges["data"].insert(0, add(charges["data"]))
    path = tmp_path / "charges.json"
    path.write_text(json.dumps(charges))
    return path


def _june_again(data: list[dict[str, Any]]) -> dict[str, Any]:
    june = next(c for c in data if c["id"] == JUNE)
    return {**june, "id": "ch_3PRa6sKx1Rm8Qw2s0Zz9AaA1", "created": june["created"] + 1}


def test_a_duplicate_production_made_is_the_incident_not_the_recovery(tmp_path: Path) -> None:
    twice = Incident(ledger=INCIDENT_2024_DIR / "renewals.sql",
                     exports={"payments": _export_without(tmp_path, add=_june_again)})
    # Asking Stripe confirms the row with one of June's two charges: it made nothing worse.
    assert sweep(alone(recovery, tmp_path, twice), tmp_path).failure is None
    nothing = sweep(alone(recovery_that_does_nothing, tmp_path, twice), tmp_path).failure
    assert nothing is not None and 1 not in nothing.invariants
    # Charging a third time makes it worse: one duplicate, the recovery's.
    broken = sweep(alone(recovery_that_retries, tmp_path, twice), tmp_path).failure
    assert broken is not None
    [duplicate] = [v for v in broken.violations if v.startswith("invariant 1")]
    assert "by production (in the incident)" in duplicate and "by recovery-1" in duplicate


def test_a_row_production_finished_is_history_when_its_charge_is_not_exported(
    tmp_path: Path,
) -> None:
    """The export holds June's charges only (Stripe's list filtered by date): May's row names
    a charge the provider does not hold, and nothing of the case touches it."""
    june_only = Incident(ledger=INCIDENT_2024_DIR / "renewals.sql",
                         exports={"payments": _export_without(tmp_path, drop=MAY)})
    report = sweep(alone(recovery, tmp_path, june_only), tmp_path, "C")
    assert report.failure is None, report.failure


def test_the_recovery_alone_is_crashed_at_its_points_and_passes(tmp_path: Path) -> None:
    report = sweep(alone(recovery, tmp_path), tmp_path, "ABCDEF")
    assert report.failure is None, report.failure
    schedules = [run.schedule_text for run in report.schedules]
    assert schedules[0] == "no steps"
    assert any("run recovery, kill at C" in s for s in schedules)
    assert any("lookups time out" in s for s in schedules)
    assert any("two recoveries at once" in s for s in schedules)
    assert not any("deliver" in s for s in schedules)
    # What needs a message is said to be not applicable, never counted as covered.
    assert any(n.startswith("authority changes (E)") for n in report.not_applicable)
    assert any(n == "recovery killed at B" for n in report.not_applicable)  # it only reads


def test_the_recovery_alone_that_charges_again_is_caught_killed_or_not(tmp_path: Path) -> None:
    scenario = alone(recovery_that_retries, tmp_path)
    killed = run_case(scenario, Schedule((Recover(KillAt("B", 1)),)), base_dir=tmp_path,
                      expected=())
    assert {v.invariant for v in killed.violations} == {1, 2}
    # Each charge it made repeats June's, made in production: never May's or the team plan's.
    duplicates = [v for v in killed.violations if v.invariant == 1]
    # Two charges beyond June's, each reported once, in pairs of their own.
    assert len(duplicates) == 2 and len({v.requests for v in duplicates}) == 2
    assert all(v.message.startswith("task ren-2024-06's charges.create") for v in duplicates)
    assert any(JUNE in v.evidence[0] for v in duplicates)
    assert not any(MAY in line or TEAM in line for v in duplicates for line in v.evidence)
    assert sweep(scenario, tmp_path).failure is not None


# -- the reference ledger ----------------------------------------------------------------------

#: The charge the reference worker made in production: the reference adapter's form.
ARGS = {"amount": 2900, "currency": "usd", "customer": "cus_N8vB2qLw"}
KEY = "charge:ren-2024-06"


def _production_ledger(path: Path, at: float) -> None:
    """The reference ledger as production left it (its clock the wall's): the charge
    dispatched, its worker dead, its lease run out."""
    ledger = Ledger(path, clock=lambda: at)
    authority = Authority.of(tenant_id="tenant-1",
                             credential_scope="payments:read payments:write",
                             policy_version="p1")
    attempt, _ = ledger.record_intent(task_id="ren-2024-06", tool_name="charge", args=ARGS,
                                      idempotency_key=KEY, authority=authority,
                                      actor="worker-7", lease_seconds=60)
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="worker-7",
                      reason="dispatching")
    ledger.close()


def test_a_reference_ledger_stamped_in_production_is_recovered_alone(tmp_path: Path) -> None:
    ledger = tmp_path / "prod.sqlite3"
    _production_ledger(ledger, 1718357400.0)
    charge = {"id": JUNE, "object": "charge", **ARGS, "created": 1718357402,
              "status": "succeeded", "paid": True, "captured": True,
              "metadata": {"idempotency_key": KEY}}
    export = tmp_path / "charges.json"
    export.write_text(json.dumps({"object": "list", "data": [charge]}))
    incident = Incident(ledger=ledger, exports={"payments": export})
    scenario = Scenario(
        worker=no_worker, recover=reference_recovery, messages=(), providers=PAYMENTS,
        authorities=recovery_authorities(incident, None, PAYMENTS, tmp_path),
        incident=incident,
    )
    report = sweep(scenario, tmp_path, "C")
    assert report.failure is None, report.failure
    done = run_case(scenario, Schedule(()), base_dir=tmp_path, expected=(), keep=True)
    assert done.run_dir is not None
    with sqlite3.connect(done.run_dir / "ledger.sqlite3") as conn:
        state, result = conn.execute("SELECT state, result_ref FROM attempts").fetchone()
    conn.close()
    assert (state, result) == ("OUTCOME_CONFIRMED", JUNE)
    # Production's intent and dispatch are in the timeline at their own (wall) times.
    assert "t=2024-06-14T09:30:00Z      ledger" in done.timeline
    shutil.rmtree(done.run_dir)
