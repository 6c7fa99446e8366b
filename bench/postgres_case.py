"""Item 14: a crash case of an agent on PostgreSQL against the same agent on SQLite.

The four-column job mailer (``scenarios/jobs_mailer.py``, its fix that parks a half-done
job) with its jobs in a SQLite file of the run directory, and the same mailer on psycopg 3
(``scenarios/pg_jobs/psycopg_mailer.py``) with its jobs in a database of its own per case,
cloned from a template in a private PostgreSQL server (``case_database``): the same schedule
(killed at B, then the quiet phase, the replay and the checks; and the fault-free case), the
two run back to back in alternating order, the ratio taken per pair. The server's start is
not counted (once per session); the database's creation, copy and drop per case are.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from pytest_crashpoints import ProviderSpec, SQLiteLedgerView, State
from pytest_crashpoints.harness import Deliver, KillAt, Scenario, Schedule, run_case
from pytest_crashpoints.servers import PostgresCaseDatabase, find_postgres_bin, postgres_server
from scenarios import jobs_mailer
from scenarios.pg_jobs import psycopg_mailer

from . import _stats
from ._scenarios import AUTHORITY

GOAL = 2.0
JOB = {"task_id": "t-1", "recipient": "ada@example.com", "body": "Invoice 7: 120 EUR"}
STATES = {"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
          "review": State.MANUAL_REVIEW}
COLUMNS = {"attempt_id": "id", "state": "status"}
#: The per-case databases of this run (set in ``main``, before any worker is forked).
DATABASE: list[PostgresCaseDatabase] = []


def _where(ctx: Any, job: Any) -> dict[str, str]:
    return {"api_url": ctx.base_url("email"), "api_key": ctx.api_key("email", job["task_id"])}


def sqlite_worker(job: Any, ctx: Any) -> str:

    return jobs_mailer.handle_parks_the_ambiguous(job, db=ctx.env.path / "jobs.db",
                                                  **_where(ctx, job))


def postgres_worker(job: Any, ctx: Any) -> str:

    return psycopg_mailer.handle_parks_the_ambiguous(job, dsn=DATABASE[0].dsn(ctx),
                                                     **_where(ctx, job))


def sqlite_view(ctx: Any) -> Any:
    return SQLiteLedgerView(ctx.env.path / "jobs.db", table="jobs", columns=COLUMNS,
                            states=STATES)


def postgres_view(ctx: Any) -> Any:
    from pytest_crashpoints.ledger import PostgresLedgerView

    return PostgresLedgerView(DATABASE[0].dsn(ctx), table="jobs", columns=COLUMNS,
                              states=STATES)


def scenarios(database: PostgresCaseDatabase) -> dict[str, Scenario]:
    common: dict[str, Any] = {
        "recover": None, "messages": (JOB,), "providers": (ProviderSpec("email"),),
        "authorities": {"t-1": AUTHORITY},
    }
    return {
        "sqlite": Scenario(worker=sqlite_worker, ledger_view=sqlite_view, **common),
        "postgres": Scenario(worker=postgres_worker, ledger_view=postgres_view,
                             databases=(database,), **common),
    }


def _pairs(pair: dict[str, Scenario], schedule: Schedule, base: Path, reps: int) -> Any:
    seconds: dict[str, list[float]] = {"sqlite": [], "postgres": []}
    for rep in range(reps):
        order = ("sqlite", "postgres") if rep % 2 == 0 else ("postgres", "sqlite")
        for name in order:
            elapsed, case = _stats.timed_case(
                functools.partial(run_case, pair[name], schedule, base_dir=base)
            )
            if not case.passed:
                raise SystemExit(f"the {name} case failed: {schedule}: {case.violations}")
            seconds[name].append(elapsed)
    return {
        "schedule": str(schedule),
        "sqlite": _stats.summary(seconds["sqlite"]),
        "postgres": _stats.summary(seconds["postgres"]),
        "ratio": _stats.ratios(seconds["postgres"], seconds["sqlite"]),
    }


def main() -> None:
    command = "python -m bench.postgres_case"
    if find_postgres_bin() is None:
        _stats.emit(_stats.result(
            14, "PostgreSQL case cost", goal=f"<= {GOAL:g}x the same agent on SQLite",
            met=None, figure="PostgreSQL is not installed", command=command, details={},
            status="skipped",
        ))
        return
    reps = 4 if _stats.quick() else 10
    from scenarios.pg_jobs import SCHEMA

    with postgres_server() as server, tempfile.TemporaryDirectory(prefix="bench-pg-") as tmp:
        DATABASE.append(server.case_database(schema=SCHEMA))
        pair = scenarios(DATABASE[0])
        base = Path(tmp)
        kill_b = Schedule((Deliver(0, KillAt("B")),))
        for scenario in pair.values():  # first-use imports in the parent
            run_case(scenario, kill_b, base_dir=base)
        headline = _pairs(pair, kill_b, base, reps)
        fault_free = _pairs(pair, Schedule((Deliver(0),)), base, reps)
        DATABASE[0].settle()
    ratio = max(headline["ratio"]["median"], fault_free["ratio"]["median"])
    _stats.emit(_stats.result(
        14, "PostgreSQL case cost", goal=f"<= {GOAL:g}x the same agent on SQLite",
        met=ratio <= GOAL,
        figure=(
            f"{headline['ratio']['median']:.2f}x killed at B "
            f"({headline['postgres']['median'] * 1e3:.0f} ms vs "
            f"{headline['sqlite']['median'] * 1e3:.0f} ms), "
            f"{fault_free['ratio']['median']:.2f}x fault-free"
        ),
        command=command,
        details={"kill at B": headline, "fault-free": fault_free},
    ))


if __name__ == "__main__":
    main()
