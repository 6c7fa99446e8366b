"""``--crashpoints-jobs``: the exhaustive phase of one test on several jobs at once gives the
report one job gives (cases, verdict, the first failing schedule and its fingerprint), on
both engines; an interruption ends every job's processes."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import Authority, ProviderSpec, reference_recovery, reference_worker
from pytest_crashpoints._harness.search.explore import SCHEDULES_PER_JOB
from pytest_crashpoints._process.handle import live_worker_pids
from pytest_crashpoints.harness import CrashSettings, ExplorationReport, Scenario, explore
from scenarios.broken.agents import random_key_worker

AUTHORITY = Authority.of(
    tenant_id="tenant-7", credential_scope="email:read email:write", policy_version="p1"
)


def scenario(worker: Any = reference_worker, messages: int = 2) -> Scenario:
    return Scenario(
        worker=worker,
        recover=reference_recovery,
        messages=tuple(
            {
                "task_id": "t-1",
                "calls": [
                    {
                        "tool": "send_email",
                        "key": f"invoice:tenant-7:inv-{m}:send",
                        "args": {
                            "to": "billing@example.com",
                            "subject": f"Invoice {m}",
                            "body": "Due: 100 EUR",
                        },
                    }
                ],
            }
            for m in range(messages)
        ),
        providers=(ProviderSpec("email"),),
        authorities={"t-1": AUTHORITY},
    )


def sweep(base: Path, engine: str, jobs: int, worker: Any = reference_worker) -> ExplorationReport:
    settings = CrashSettings(
        mode="exhaustive",
        max_faults=1,
        points=("A", "B", "C", "D"),
        engine=engine,  # type: ignore[arg-type]
        jobs=jobs,
    )
    return explore(scenario(worker), settings, base_dir=base / f"{engine}-{jobs}", nodeid="t")


@pytest.mark.parametrize("engine", ["states", "processes"])
def test_jobs_give_the_report_one_job_gives(tmp_path: Path, engine: str) -> None:
    one, two = sweep(tmp_path, engine, 1), sweep(tmp_path, engine, 2)
    assert one.verdict == two.verdict == "passed"
    assert one.cases == two.cases > 10
    runs = [[(r.schedule_text, r.verdict, r.fingerprint) for r in x.schedules] for x in (one, two)]
    assert runs[0] == runs[1]
    assert two.engine["jobs"] == 2 and "jobs" not in one.engine


@pytest.mark.parametrize(
    ("points", "faults", "jobs"),
    [(("B",), ("kill",), None), (("A", "B", "C", "D"), None, 2)],
    ids=["2 schedules: one job", "many schedules: two"],
)
def test_auto_jobs_start_a_second_job_only_for_enough_schedules(
    tmp_path: Path, points: tuple[str, ...], faults: tuple[str, ...] | None, jobs: int | None
) -> None:
    """``--crashpoints-jobs=auto`` says how many jobs the machine allows; a test with fewer
    than ``SCHEDULES_PER_JOB`` faulted schedules per job would spend more starting a job's
    world than the job saves. An explicit number is taken as given."""
    settings = CrashSettings(
        mode="exhaustive", max_faults=1, points=points, faults=faults, jobs=2, jobs_auto=True
    )
    report = explore(scenario(), settings, base_dir=tmp_path / "auto", nodeid="t")
    assert report.verdict == "passed"
    faulted = report.cases - 1
    assert (faulted >= 2 * SCHEDULES_PER_JOB) == (jobs == 2), faulted
    assert report.engine.get("jobs") == jobs
    given = dataclasses.replace(settings, points=("B",), faults=("kill",), jobs_auto=False)
    report = explore(scenario(), given, base_dir=tmp_path / "given", nodeid="t")
    assert report.cases - 1 < SCHEDULES_PER_JOB and report.engine["jobs"] == 2


@pytest.mark.parametrize("engine", ["states", "processes"])
def test_jobs_report_the_first_failing_schedule_in_order(tmp_path: Path, engine: str) -> None:
    """A later schedule may fail first on another job: the failure reported is still the
    first in enumeration order, and the schedules after it, run looking for the other
    invariants, are the ones one job runs, in the same order."""
    one = sweep(tmp_path, engine, 1, random_key_worker)
    two = sweep(tmp_path, engine, 2, random_key_worker)
    assert one.verdict == two.verdict == "failed"
    assert one.failure is not None and two.failure is not None
    assert one.failure.schedule == two.failure.schedule
    assert one.failure.fingerprint == two.failure.fingerprint
    assert one.failure.invariants == two.failure.invariants == (1,)
    assert one.cases == two.cases
    runs = [[(r.schedule_text, r.verdict, r.index) for r in x.schedules] for x in (one, two)]
    assert runs[0] == runs[1]
    assert one.failure.also == two.failure.also
    assert one.failure.also_cases == two.failure.also_cases > 0


@pytest.mark.parametrize(("engine", "after"), [("processes", 4), ("states", 2), ("states", 9)])
def test_an_interruption_ends_every_job(tmp_path: Path, engine: str, after: int) -> None:
    """Ctrl-C while two jobs run cases (on the states engine, the other job may be recording
    a delivery, its worker stopped): the interruption propagates, every worker of every job
    is killed and reaped, and no job thread is left."""

    def interrupt(report: ExplorationReport) -> None:
        if report.cases == after:
            raise KeyboardInterrupt

    settings = CrashSettings(mode="exhaustive", max_faults=1, engine=engine, jobs=2)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        explore(scenario(), settings, base_dir=tmp_path, nodeid="t", on_case=interrupt)
    assert live_worker_pids() == frozenset()
    assert not [t for t in threading.enumerate() if t.name.startswith("crashpoints-job")]


def test_the_report_names_jobs_only_where_they_ran(tmp_path: Path) -> None:
    """Hypothesis mode runs one case at a time whatever the setting: its report says no
    jobs."""
    settings = CrashSettings(mode="hypothesis", max_examples=3, max_faults=1, jobs=2)
    report = explore(scenario(), settings, base_dir=tmp_path, nodeid="t")
    assert report.verdict == "passed" and "jobs" not in report.engine
