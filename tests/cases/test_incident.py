"""Cases that start from an incident (``Incident``): the renewal charger's November incident
(``scenarios/incident/``), caught with invariant 1 when recovery charges again and passing
every single fault when it asks Stripe first; what a worker finds in the incident's world
(its wall clock, the ledger rows, the exported charges by id and by search); the baseline
is the fault-free run from an empty world, so the work production already did is neither
lost nor a duplicate. (The incident of 2024, its other subscription's charge and its
recovery alone: ``test_incident_2024.py``.)"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx

from pytest_crashpoints import Incident, ProviderSpec
from pytest_crashpoints._plugin.fixture import default_authorities
from pytest_crashpoints.harness import CrashSettings, Deliver, Scenario, Schedule, explore, run_case
from scenarios.renewal_incident import (
    INCIDENT,
    INCIDENT_DIR,
    RENEWAL,
    recovery,
    recovery_that_retries,
    renewals,
    worker,
    worker_that_retries,
)

PAYMENTS = (ProviderSpec("payments"),)


def _scenario(worker: Any, recover: Any, *, incident: Incident | None = INCIDENT) -> Scenario:
    return Scenario(
        worker=worker, recover=recover, messages=(RENEWAL,), providers=PAYMENTS,
        authorities=default_authorities([RENEWAL], PAYMENTS), ledger_view=renewals,
        incident=incident,
    )


def test_a_recovery_that_charges_again_is_caught_with_the_production_charge(
    tmp_path: Path,
) -> None:
    settings = CrashSettings(points=("C", "D"), mode="exhaustive", max_faults=1)
    report = explore(_scenario(worker_that_retries, recovery_that_retries), settings,
                     base_dir=tmp_path, nodeid="t::retry")
    failure = report.failure
    assert failure is not None and 1 in failure.invariants
    first = next(v for v in failure.violations if v.startswith("invariant 1"))
    # November's charge, made in production, and the one the redelivery made: not October's,
    # which a row of the ledger names as another renewal's.
    assert "by production (in the incident, delivering message 0)" in first
    assert "by worker-1 (delivering message 0)" in first
    assert "2026-10-30" not in first
    assert failure.deterministic


def test_a_recovery_that_asks_stripe_first_passes_every_single_fault(tmp_path: Path) -> None:
    settings = CrashSettings(points=("C", "D", "F"), mode="exhaustive", max_faults=1)
    report = explore(_scenario(worker, recovery), settings, base_dir=tmp_path, nodeid="t::fix")
    assert report.failure is None, report.failure
    assert report.cases > 5


def test_without_the_incident_the_broken_twin_is_caught_only_by_a_fault(tmp_path: Path) -> None:
    """From an empty world its fault-free run passes: the incident is what makes the
    November state, and its fault-free case, fail."""
    base = Schedule((Deliver(0),))
    clean = run_case(_scenario(worker_that_retries, recovery_that_retries, incident=None),
                     base, base_dir=tmp_path, name="clean")
    assert clean.passed, clean.violations
    from_incident = run_case(_scenario(worker_that_retries, recovery_that_retries), base,
                             base_dir=tmp_path, name="incident",
                             expected=clean.expected_effects)
    assert {v.invariant for v in from_incident.violations} >= {1}


def test_a_worker_finds_the_incidents_world(tmp_path: Path) -> None:
    seen = tmp_path / "seen.json"

    def look(message: dict[str, Any], ctx: Any) -> None:
        key = ctx.api_key("payments", message["task_id"])
        with httpx.Client(base_url=ctx.base_url("payments"), timeout=30,
                          headers={"Authorization": f"Bearer {key}"}) as stripe:
            october = stripe.get("/v1/charges/ch_3QA1xKLkdIwHu7ix0rTq9ZpW")
            found = stripe.get("/v1/charges/search",
                               params={"query": "metadata['renewal_id']:'ren-2026-11'"})
        with sqlite3.connect(ctx.env.path / "billing.db") as conn:
            rows = conn.execute("SELECT id, status FROM renewals ORDER BY id").fetchall()
        conn.close()
        seen.write_text(json.dumps({
            "now": time.time(), "rows": rows, "october": october.status_code,
            "november": [c["id"] for c in found.json()["data"]],
        }))

    at = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)
    incident = Incident(ledger=INCIDENT_DIR / "renewals.sql",
                        exports={"payments": INCIDENT_DIR / "charges.json"}, at=at)
    run_case(_scenario(look, None, incident=incident), Schedule((Deliver(0),)),
             base_dir=tmp_path, name="look")
    data = json.loads(seen.read_text())
    assert at.timestamp() <= data["now"] < at.timestamp() + 60
    assert data["rows"] == [["ren-2026-10", "charged"], ["ren-2026-11", "charging"]]
    assert data["october"] == 200
    assert data["november"] == ["ch_3QK9pLLkdIwHu7ix1cVb2RfS"]
