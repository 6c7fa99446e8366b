"""PostgresLedger: the reference ledger's behaviour, run again on PostgreSQL, and what
PostgreSQL does differently (its schema, its locks, its errors)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from pytest_crashpoints import State
from pytest_crashpoints.errors import LeaseHeld, LedgerError, SchemaVersionError
from pytest_crashpoints.ledger import PostgresLedger, PostgresLedgerView
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin, postgres_server
from tests.conftest import ManualClock, wait_until

# The SQLite ledger's tests of what a ledger does, run here with the fixture below: the same
# API must behave the same on PostgreSQL.
from tests.unit.test_ledger import (  # noqa: F401
    intent,
    test_a_refused_compare_and_set_names_the_state_it_found,
    test_arguments_that_cannot_be_normalized_record_nothing,
    test_claim_and_lease_run_on_the_injected_clock,
    test_compare_and_set_refuses_a_move_from_an_unexpected_state,
    test_defer_sets_backoff_without_changing_state,
    test_empty_key_is_refused,
    test_illegal_transition_names_everything_and_changes_nothing,
    test_legal_path_to_confirmed_is_logged,
    test_linked_attempt_requires_review_under_the_new_authority,
    test_only_the_owner_releases_a_lease,
    test_queue_shows_in_flight_work_with_owner_age_and_request_id,
    test_record_intent_writes_row_and_event,
    test_same_key_other_args_is_a_key_conflict_and_changes_nothing,
    test_same_key_same_args_returns_the_existing_attempt,
    test_unknown_attempt,
)

pytestmark = pytest.mark.skipif(
    find_postgres_bin() is None,
    reason="PostgreSQL is not installed (apt-get install postgresql): no database to use",
)

_names = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


@pytest.fixture
def database(server: PostgresServer) -> Iterator[str]:
    name = f"ledger_{next(_names)}"
    server.create_database(name)
    yield name
    server.drop_database(name)


@pytest.fixture
def ledger(server: PostgresServer, database: str, clock: ManualClock) -> Iterator[PostgresLedger]:
    opened = PostgresLedger(server.dsn(database), clock=clock)
    yield opened
    opened.close()


def test_the_event_log_is_append_only_and_states_are_checked(
    ledger: PostgresLedger, server: PostgresServer, database: str
) -> None:
    attempt, _ = intent(ledger)
    for sql in ("UPDATE events SET actor = 'someone else'", "DELETE FROM events"):
        with pytest.raises(Exception, match="the event log is append-only"):
            server.execute(sql, database=database)
    with pytest.raises(Exception, match="attempts_state_check"):
        server.execute(f"UPDATE attempts SET state = 'DONE-ISH' WHERE attempt_id = "
                       f"'{attempt.attempt_id}'", database=database)


def test_attempts_made_at_the_same_time_keep_the_order_they_were_made(
    ledger: PostgresLedger,
) -> None:
    made = [intent(ledger, key=f"k-{n}")[0].attempt_id for n in range(12)]
    assert [a.attempt_id for a in ledger.attempts()] == made
    assert [e.attempt_id for e in ledger.queue()] == made


def test_a_claim_waits_for_a_concurrent_claim_and_then_loses_to_it(
    ledger: PostgresLedger, server: PostgresServer, database: str, clock: ManualClock
) -> None:
    """Two claims at once: the second reads the lease only once the first has committed
    (its read locks the row), so it sees the first's lease and loses."""
    import psycopg

    attempt, _ = intent(ledger)
    other = psycopg.connect(server.dsn(database))
    try:
        # Another recovery in the middle of its claim: the row read and locked, not committed.
        other.execute("SELECT owner FROM attempts WHERE attempt_id = %s FOR UPDATE",
                      (attempt.attempt_id,))
        outcome: list[object] = []
        racing = threading.Thread(target=lambda: outcome.append(_claim(ledger, attempt)))
        racing.start()
        wait_until(lambda: _waiting_on_a_lock(server, database), timeout=30,
                   what="the second claim waiting for the row lock")
        other.execute("UPDATE attempts SET owner = 'recovery-1', lease_expires_at = %s "
                      "WHERE attempt_id = %s", (clock.t + 60, attempt.attempt_id))
        other.commit()
        racing.join(timeout=30)
        assert not racing.is_alive()
    finally:
        other.close()
    [result] = outcome
    assert isinstance(result, LeaseHeld) and "recovery-1" in str(result), result
    assert ledger.get(attempt.attempt_id).owner == "recovery-1"


def _claim(ledger: PostgresLedger, attempt: object) -> object:
    try:
        return ledger.claim(attempt.attempt_id, owner="recovery-2",  # type: ignore[attr-defined]
                            lease_seconds=60)
    except LeaseHeld as exc:
        return exc


def _waiting_on_a_lock(server: PostgresServer, database: str) -> bool:
    return server.execute(
        f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}' "
        "AND wait_event_type = 'Lock'"
    ).strip() == "1"


def test_two_ledgers_opening_a_new_database_at_once_make_one_schema(
    server: PostgresServer, database: str, clock: ManualClock
) -> None:
    ledgers = [PostgresLedger(server.dsn(database), clock=clock) for _ in range(4)]
    errors: list[BaseException] = []

    def open_one(ledger: PostgresLedger) -> None:
        try:
            ledger.attempts()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for ledger in ledgers:
        ledger.close()
    assert errors == []
    assert server.execute("SELECT version FROM ledger_schema", database=database).split() == ["1"]


def test_a_database_that_is_not_a_ledger_is_refused_and_left_as_it_was(
    server: PostgresServer, database: str
) -> None:
    server.execute("CREATE TABLE events (id int)", database=database)
    with pytest.raises(LedgerError, match=r"has table\(s\) events that are not a "
                       r"pytest-crashpoints ledger's; give the ledger a schema of its own"):
        PostgresLedger(server.dsn(database)).attempts()
    assert server.execute("SELECT count(*) FROM information_schema.tables WHERE "
                          "table_schema = 'public'", database=database).strip() == "1"
    # With a schema of its own (libpq's options in the connection string), it is made there.
    server.execute("CREATE SCHEMA ledger", database=database)
    apart = PostgresLedger(server.dsn(database) + " options=-csearch_path=ledger")
    try:
        assert apart.attempts() == []
    finally:
        apart.close()
    assert "attempts" in server.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'ledger'",
        database=database,
    ).split()


def test_another_schema_version_is_refused_and_not_touched(
    ledger: PostgresLedger, server: PostgresServer, database: str
) -> None:
    ledger.attempts()
    ledger.close()
    server.execute("UPDATE ledger_schema SET version = 7", database=database)
    with pytest.raises(SchemaVersionError, match="has schema version 7") as info:
        PostgresLedger(server.dsn(database)).attempts()
    assert "nothing was changed" in str(info.value)
    assert server.execute("SELECT version FROM ledger_schema", database=database).strip() == "7"


def test_read_only_reads_and_refuses_writes_and_a_database_without_a_ledger(
    ledger: PostgresLedger, server: PostgresServer, database: str
) -> None:
    attempt, _ = intent(ledger)
    reader = PostgresLedger(server.dsn(database), read_only=True)
    try:
        assert reader.attempts() == ledger.attempts()
        with pytest.raises(LedgerError, match="was opened read-only; record_intent writes"):
            intent(reader, key="other")
    finally:
        reader.close()
    server.create_database(f"{database}_empty")
    try:
        with pytest.raises(LedgerError, match="holds no pytest-crashpoints ledger"):
            PostgresLedger(server.dsn(f"{database}_empty"), read_only=True).attempts()
        assert server.execute("SELECT count(*) FROM information_schema.tables WHERE "
                              "table_schema = 'public'",
                              database=f"{database}_empty").strip() == "0"
    finally:
        server.drop_database(f"{database}_empty")
    assert attempt.state is State.INTENT_RECORDED


def test_wrong_arguments_and_an_unreachable_database_are_clear(
    server: PostgresServer, tmp_path: object
) -> None:
    with pytest.raises(LedgerError, match="is not a PostgreSQL connection string"):
        PostgresLedger("")
    with pytest.raises(LedgerError, match="is not a PostgreSQL connection string"):
        PostgresLedger("host=/tmp dbname")
    with pytest.raises(LedgerError, match=r"cannot open the ledger in PostgreSQL database "
                       r"'no_such_db'.*check the dsn"):
        PostgresLedger(server.dsn("no_such_db")).attempts()
    with pytest.raises(LedgerError, match=r"back up the ledger .* with pg_dump"):
        PostgresLedger(server.dsn("no_such_db")).backup("/tmp/never-written.sqlite3")


def test_the_ledger_reads_as_a_ledger_view_of_its_tables(
    ledger: PostgresLedger, server: PostgresServer, database: str
) -> None:
    attempt, _ = intent(ledger)
    ledger.transition(attempt.attempt_id, State.DISPATCHED, actor="w", reason="send")
    view = PostgresLedgerView(server.dsn(database), table="attempts", events_table="events")
    assert view.attempts() == ledger.attempts()
    assert [e.to_state for e in view.events()] == [e.to_state for e in ledger.events()]
