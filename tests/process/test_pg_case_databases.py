"""A PostgreSQL database per crash-test case (``PostgresServer.case_database``): cloned from a
template made once per schema, copied with the case's run directory, dropped with its copies
after the case; and, end to end through the plugin, every case starts from an empty table
and leaves no database behind."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.errors import HarnessUsageError, ServerError
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin, postgres_server

pytestmark = pytest.mark.skipif(
    find_postgres_bin() is None,
    reason="PostgreSQL is not installed (apt-get install postgresql): no server for the cases",
)

SCHEMA = "CREATE TABLE jobs (id text PRIMARY KEY, status text)"


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


def databases(server: PostgresServer) -> list[str]:
    said = server.execute("SELECT datname FROM pg_database WHERE datname LIKE 'crashpoints%' "
                          "AND datname NOT LIKE 'crashpoints_spare%' ORDER BY datname")
    return said.split()


def test_a_schema_makes_one_template_and_each_case_a_copy_dropped_after(
    server: PostgresServer, tmp_path: Path
) -> None:
    db = server.case_database(schema=SCHEMA)
    assert server.case_database(schema=SCHEMA).template == db.template  # made once
    case, copy = tmp_path / "case-1", tmp_path / "case-1" / "killed-recovery"
    other = tmp_path / "case-2"
    db.create(case)
    db.create(other)
    name = db.name(case)
    assert name != db.name(copy) != db.name(other) and len(name) <= 63
    assert db.dsn(case) == server.dsn(name) and db.url(case) == server.url(name)
    server.execute("INSERT INTO jobs VALUES ('job-7', 'pending')", database=name)
    db.copy(case, copy)
    assert server.execute("SELECT id, status FROM jobs", database=db.name(copy)) == (
        "job-7|pending\n")  # the copy has what the case had committed
    assert server.execute("SELECT count(*) FROM jobs", database=db.name(other)) == "0\n"
    db.drop(case)
    db.settle()
    assert databases(server) == sorted([db.template, db.name(other)])  # with its copy
    server.execute("INSERT INTO jobs VALUES ('job-8', 'sent')", database=db.name(other))
    db.create(other)  # again for the same run directory, its database left over: fresh
    assert server.execute("SELECT count(*) FROM jobs", database=db.name(other)) == "0\n"
    db.drop(other)
    db.settle()
    assert databases(server) == [db.template]
    # A worker's function that uses it is pickled to the fork server: where the databases
    # are travels, the harness's own work (its lock, its psql processes) does not.
    sent = pickle.loads(pickle.dumps(db))
    assert (sent.template, sent.dsn(case)) == (db.template, db.dsn(case))


def test_wrong_arguments_and_a_schema_postgresql_refuses_are_clear(
    server: PostgresServer, tmp_path: Path
) -> None:
    before = databases(server)
    with pytest.raises(HarnessUsageError, match=r"needs one of schema= .* or template="):
        server.case_database()
    with pytest.raises(HarnessUsageError, match="needs one of"):
        server.case_database(schema=SCHEMA, template="t")
    with pytest.raises(HarnessUsageError, match="template 'no-such' is not a database name"):
        server.case_database(template="no-such")
    with pytest.raises(ServerError, match='syntax error at or near "CREAT"'):
        server.case_database(schema="CREAT TABLE jobs (id text)")
    assert databases(server) == before  # no half-made template left
    with pytest.raises(HarnessUsageError, match="is not a case's context"):
        server.case_database(schema=SCHEMA).name(42)
    with pytest.raises(ServerError, match="PostgreSQL could not drop 1 case database"):
        db = server.case_database(schema=SCHEMA)
        db.drop(tmp_path / "never-made")
        db._dropping.append(server.start_statements("DROP DATABASE nosuch"))
        db.settle()


def test_something_else_as_a_database_per_case_is_refused_in_one_line() -> None:
    from pytest_crashpoints import ProviderSpec
    from pytest_crashpoints.errors import CrashpointsError
    from pytest_crashpoints.harness import Scenario

    with pytest.raises(CrashpointsError, match=r"databases= holds 'jobs', which is not a "
                       r"database per case; pass crashpoints_postgres.case_database"):
        Scenario(worker=lambda message, ctx: None, recover=None, messages=(),
                 providers=(ProviderSpec("email"),), authorities={},
                 databases=("jobs",))  # type: ignore[arg-type]


def test_a_case_databases_ledger_view_reads_it_and_brings_it_to_the_run(
    server: PostgresServer, tmp_path: Path
) -> None:
    from pytest_crashpoints import ProviderSpec, State
    from pytest_crashpoints.harness import Scenario
    from pytest_crashpoints.ledger import PostgresLedgerView

    db = server.case_database(schema=SCHEMA)
    jobs = db.ledger_view(table="jobs", columns={"attempt_id": "id", "state": "status"},
                          states={"pending": State.DISPATCHED})
    case = tmp_path / "case-1"
    made = jobs(case)
    assert isinstance(made, PostgresLedgerView) and made.dsn == db.dsn(case)
    assert "ledger_view(table='jobs'" in repr(jobs)
    common = {"worker": lambda message, ctx: None, "recover": None, "messages": (),
              "providers": (ProviderSpec("email"),), "authorities": {}}
    assert Scenario(ledger_view=jobs, **common).databases == (db,)
    assert Scenario(ledger_view=jobs, databases=(db,), **common).databases == (db,)
    with pytest.raises(HarnessUsageError, match=r"ledger_view\(\) got dsn, tabel, which "
                       r"PostgresLedgerView does not take; pass some of .*table"):
        db.ledger_view(tabel="jobs", dsn="x")


def test_each_process_finds_the_case_databases_in_its_environment(
    server: PostgresServer, tmp_path: Path
) -> None:
    from pytest_crashpoints import ProviderSpec
    from pytest_crashpoints._harness.case.context import CaseEnv, Context

    jobs, audit = server.case_database(schema=SCHEMA), server.case_database(template="postgres")
    case = CaseEnv(str(tmp_path / "case-1"), (ProviderSpec("email"),), databases=(jobs,))
    said = Context(case, "recovery-2").sdk_env()
    assert said["CRASHPOINTS_DATABASE_URL"] == jobs.url(tmp_path / "case-1")
    assert not [name for name in said if name.startswith("CRASHPOINTS_DATABASE_URL_")]
    # A copy of the case (the replay of a killed recovery) reaches the copy's database.
    copy = dataclasses.replace(case, root=str(tmp_path / "copy"), databases=(jobs, audit))
    said = Context(copy, "recovery-3").sdk_env()
    urls = [jobs.url(tmp_path / "copy"), audit.url(tmp_path / "copy")]
    assert said["CRASHPOINTS_DATABASE_URL"] == urls[0] != jobs.url(tmp_path / "case-1")
    assert [said["CRASHPOINTS_DATABASE_URL_1"], said["CRASHPOINTS_DATABASE_URL_2"]] == urls


CASES = """
import httpx
import pytest
import psycopg
from pytest_crashpoints import State, crashpoint
from pytest_crashpoints.ledger import PostgresLedgerView

SEEN = []

@pytest.fixture
def jobs_db(crashpoints_postgres):
    return crashpoints_postgres.case_database(schema={schema!r})

def view(db):
    return lambda ctx: PostgresLedgerView(
        db.dsn(ctx), table="jobs", columns={{"attempt_id": "id", "state": "status"}},
        states={{"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED,
                 "review": State.MANUAL_REVIEW}})

@pytest.mark.crashpoints(points="BC", faults=["kill"], providers=["email"],
                         mode="exhaustive", strict_coverage=False)
def test_each_case_starts_empty(crashpoints, jobs_db, tmp_path):
    seen = tmp_path / "seen"
    def worker(job, ctx):
        with psycopg.connect(jobs_db.dsn(ctx), autocommit=True) as conn:
            row = conn.execute("SELECT status FROM jobs WHERE id = 'job-7'").fetchone()
            with open(seen, "a") as out:
                out.write(f"{{jobs_db.name(ctx)}} {{row and row[0]}} {{ctx.env.path.name}}\\n")
            if row and row[0] in ("sent", "review"):
                return row[0]
            if row:  # pending: maybe sent; park it
                conn.execute("UPDATE jobs SET status = 'review' WHERE id = 'job-7'")
                return "review"
            conn.execute("INSERT INTO jobs VALUES ('job-7', 'pending')")
            httpx.post(ctx.base_url("email") + "/v3/mail/send", headers={{
                "Authorization": "Bearer " + ctx.api_key("email", job["task_id"])}}, json={{
                "personalizations": [{{"to": [{{"email": "a@example.com"}}]}}],
                "from": {{"email": "b@example.com"}}, "subject": "s",
                "content": [{{"type": "text/plain", "value": "v"}}]}}).raise_for_status()
            conn.execute("UPDATE jobs SET status = 'sent' WHERE id = 'job-7'")
        return "sent"

    def recover(ctx):  # parks a pending job; the replay kills it at its claim, on a copy
        with psycopg.connect(jobs_db.dsn(ctx), autocommit=True) as conn:
            row = conn.execute("SELECT status FROM jobs WHERE id = 'job-7'").fetchone()
            if row and row[0] == "pending":
                crashpoint("recovery.claimed")
                conn.execute("UPDATE jobs SET status = 'review' WHERE id = 'job-7'")
                with open(seen.with_name("recovered"), "a") as out:
                    out.write(jobs_db.name(ctx) + "\\n")

    crashpoints.run(worker=worker, recover=recover, messages=[{{"task_id": "job-7"}}],
                    ledger_view=view(jobs_db), databases=[jobs_db])
    lines = [line.split() for line in seen.read_text().splitlines()]
    first, copies = {{}}, {{}}
    for name, status, where in lines:
        (copies if where == "killed-recovery" else first).setdefault(name, status)
    assert set(first.values()) == {{"None"}}, lines  # each case's first delivery: empty
    assert len(first) >= 3, lines  # the fault-free run, a kill at B, a kill at C
    # The killed-recovery replay ran on a copy of the case's database, as the case left it.
    assert copies and set(copies.values()) <= {{"pending", "review", "sent"}}, lines
    assert not set(copies) & set(first), lines
    # The harness settled the databases after the cases: no psql of theirs left running.
    assert not jobs_db._dropping
    assert jobs_db._spare is None or jobs_db._spare[1].returncode is not None
    left = crashpoints_postgres_databases(jobs_db)
    assert left == [jobs_db.template], left

def crashpoints_postgres_databases(db):
    said = db.server.execute("SELECT datname FROM pg_database WHERE datname LIKE "
                             "'crashpoints%' AND datname NOT LIKE 'crashpoints_spare%' "
                             "ORDER BY datname")
    return said.split()
"""


def test_through_the_plugin_each_case_gets_an_empty_database_and_leaves_none(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(CASES.format(schema=SCHEMA))
    result = pytester.runpytest_subprocess("-p", "crashpoints", "-p", "no:randomly")
    result.assert_outcomes(passed=1)


LOCKED = {"task_id": "job-7", "to": "ada@example.com"}


def _locked_sender(db: Any) -> Any:
    def worker(job: Any, ctx: Any) -> str:
        """Sends inside the transaction that locks the job's row (no NOWAIT, no lock
        timeout: a second delivery waits for the first, as PostgreSQL makes it)."""
        import httpx
        import psycopg

        with psycopg.connect(db.dsn(ctx), autocommit=True) as conn:
            conn.execute("INSERT INTO jobs VALUES (%s, 'pending') ON CONFLICT DO NOTHING",
                         (job["task_id"],))
            with conn.transaction():
                (status,) = conn.execute("SELECT status FROM jobs WHERE id = %s FOR UPDATE",
                                         (job["task_id"],)).fetchone()
                if status == "sent":
                    return "sent"
                httpx.post(ctx.base_url("email") + "/v3/mail/send", headers={
                    "Authorization": "Bearer " + ctx.api_key("email", job["task_id"])}, json={
                    "personalizations": [{"to": [{"email": job["to"]}]}],
                    "from": {"email": "billing@example.com"}, "subject": "Invoice 7",
                    "content": [{"type": "text/plain", "value": "120 EUR"}]},
                    timeout=30).raise_for_status()
                conn.execute("UPDATE jobs SET status = 'sent' WHERE id = %s", (job["task_id"],))
        return "sent"

    return worker


def test_a_delivery_held_with_a_row_locked_is_let_go_when_the_other_waits_for_it(
    server: PostgresServer, tmp_path: Path
) -> None:
    """Two deliveries at once, the first held at C, which comes at its next commit: inside
    its transaction, its row locked. The second's ``FOR UPDATE`` waits for that lock, so the
    harness lets the first go on (as PostgreSQL lets a lock's holder go on) instead of
    waiting for the second until the timeout: one mail, and no inconclusive case."""
    from pytest_crashpoints import ProviderSpec, State
    from pytest_crashpoints.harness import Deliver, Scenario, Schedule, run_case
    from tests.cases.test_broken_on_purpose import authority

    db = server.case_database(schema=SCHEMA)
    scenario = Scenario(
        worker=_locked_sender(db), recover=None, messages=(LOCKED,),
        providers=(ProviderSpec("email"),), timeout=20,
        authorities={"job-7": authority("email:read", "email:write")},
        ledger_view=db.ledger_view(table="jobs", columns={"attempt_id": "id", "state": "status"},
                                   states={"pending": State.DISPATCHED,
                                           "sent": State.OUTCOME_CONFIRMED}),
    )
    both = Schedule((Deliver(0, duplicate="concurrent", pause_at="C"),))
    case = run_case(scenario, both, base_dir=tmp_path)
    db.settle()
    assert not case.errors, case.errors
    assert case.passed, case.timeline
    assert "waits at C" in case.timeline
    assert len(case.expected_effects) == 1, case.expected_effects  # one mail
