"""PostgresLedgerView: a user's ledger table or query in a real PostgreSQL database, read
through the seed schema with the same mapping as SQLiteLedgerView."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from pytest_crashpoints import Authority, State, args_hash
from pytest_crashpoints.errors import LedgerError
from pytest_crashpoints.ledger import PostgresLedgerView
from pytest_crashpoints.servers import PostgresServer, find_postgres_bin, postgres_server

pytestmark = pytest.mark.skipif(
    find_postgres_bin() is None,
    reason="PostgreSQL is not installed (apt-get install postgresql): no database to read",
)

AUTH = Authority.of(tenant_id="tenant-7", credential_scope="email:write", policy_version="p1")
STATES = {"sent": State.DISPATCHED, "done": State.OUTCOME_CONFIRMED}
COLUMNS = {
    "attempt_id": "id", "task_id": "task", "tool_name": "tool", "idempotency_key": "idem",
    "state": "status", "provider_request_id": "req", "created_at": "created",
}
EVENTS = {"attempt_id": "call", "from_state": "before", "to_state": "after", "at": "t",
          "actor": "who", "reason": "why"}
_names = itertools.count(1)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


@pytest.fixture
def db(server: PostgresServer) -> Iterator[tuple[PostgresServer, str]]:
    name = f"view_{next(_names)}"
    server.create_database(name)
    yield server, name
    server.drop_database(name)


def make_table(server: PostgresServer, name: str) -> None:
    server.execute(
        "CREATE TABLE tool_calls (id text PRIMARY KEY, task text, tool text, idem text, "
        "status text, req text, created numeric, args_json jsonb);"
        "INSERT INTO tool_calls VALUES "
        "('c-2', 't-1', 'send_email', 'k2', 'sent', 'r-2', 5, '{\"to\": \"b\"}'),"
        "('c-1', 't-1', 'send_email', 'k1', 'done', 'r-1', 1, '{\"to\": \"a\"}');"
        "CREATE TABLE log (call text, before text, after text, t real, who text, why text);"
        "INSERT INTO log VALUES ('c-2', NULL, 'sent', 5, 'w-1', 'sent'),"
        "('c-1', 'sent', 'done', 2, 'w-1', 'ok'), ('c-1', NULL, 'sent', 1, 'w-1', 'sent')",
        database=name,
    )


def view(server: PostgresServer, name: str, **kw: object) -> PostgresLedgerView:
    return PostgresLedgerView(
        server.dsn(name), table="tool_calls", columns=COLUMNS, states=STATES,
        events_table="log", event_columns=EVENTS, authority_of=lambda task, at: AUTH,
        **kw,  # type: ignore[arg-type]
    )


def test_reads_mapped_columns_states_json_arguments_and_events(
    db: tuple[PostgresServer, str],
) -> None:
    server, name = db
    make_table(server, name)
    attempts = view(server, name).attempts()
    assert [(a.attempt_id, a.state, a.provider_request_id, a.created_at) for a in attempts] == [
        ("c-1", State.OUTCOME_CONFIRMED, "r-1", 1.0), ("c-2", State.DISPATCHED, "r-2", 5.0)]
    first = attempts[0]
    assert (first.task_id, first.tool_name, first.idempotency_key) == ("t-1", "send_email", "k1")
    assert first.args == {"to": "a"} and first.args_hash == args_hash({"to": "a"})
    assert first.authority == AUTH
    assert [(e.attempt_id, e.to_state, e.at) for e in view(server, name).events()] == [
        ("c-1", State.DISPATCHED, 1.0), ("c-1", State.OUTCOME_CONFIRMED, 2.0),
        ("c-2", State.DISPATCHED, 5.0)]  # by time: PostgreSQL keeps no row order
    assert [e.attempt_id for e in view(server, name).queue()] == ["c-2"]
    queued = view(server, name, queue_sql="SELECT id FROM tool_calls WHERE req = 'r-1'")
    assert [e.attempt_id for e in queued.queue()] == ["c-1"]
    provides = view(server, name).provides
    assert {"attempt_id", "state", "args_json", "args_hash", "tenant_id"} <= provides
    assert "owner" not in provides


def test_a_table_not_created_yet_reads_as_empty(db: tuple[PostgresServer, str]) -> None:
    server, name = db
    plain = view(server, name)
    assert plain.attempts() == [] and plain.queue() == [] and plain.events() == []
    assert plain.provides >= {"attempt_id", "state"}
    query = PostgresLedgerView(server.dsn(name), query="SELECT id AS attempt_id, status "
                               "AS state FROM jobs")
    assert query.attempts() == []


def test_a_query_and_a_schema_qualified_table(db: tuple[PostgresServer, str]) -> None:
    server, name = db
    server.execute(
        "CREATE SCHEMA app; CREATE TABLE app.orders (id int, status text, charge text);"
        "INSERT INTO app.orders VALUES (2, 'charging', NULL), (1, 'paid', 'ch_1')",
        database=name,
    )
    query = (
        "SELECT id || ':charge' AS attempt_id, 'charge' AS tool_name, "
        "CASE WHEN charge IS NULL THEN 'DISPATCHED' ELSE 'OUTCOME_CONFIRMED' END AS state, "
        "charge AS result_ref FROM app.orders"
    )
    found = PostgresLedgerView(server.dsn(name), query=query).attempts()
    assert [(a.attempt_id, a.state, a.result_ref) for a in found] == [
        ("1:charge", State.OUTCOME_CONFIRMED, "ch_1"), ("2:charge", State.DISPATCHED, None)]
    table = PostgresLedgerView(
        server.url(name), table="app.orders", columns={"attempt_id": "id", "state": "status"},
        states={"charging": State.DISPATCHED, "paid": State.OUTCOME_CONFIRMED},
    )
    assert [(a.attempt_id, a.state) for a in table.attempts()] == [
        ("1", State.OUTCOME_CONFIRMED), ("2", State.DISPATCHED)]


def test_bad_settings_and_bad_tables_are_clear_errors(db: tuple[PostgresServer, str]) -> None:
    server, name = db
    make_table(server, name)
    dsn = server.dsn(name)
    with pytest.raises(LedgerError, match="table= and query= both say where"):
        PostgresLedgerView(dsn, table="t", query="SELECT 1")
    with pytest.raises(LedgerError, match="PostgreSQL tables have no row ids"):
        PostgresLedgerView(dsn, columns={"attempt_id": "rowid"})
    with pytest.raises(LedgerError, match="dsn='' is not a PostgreSQL connection string"):
        PostgresLedgerView("")
    with pytest.raises(LedgerError, match="bogus is not a seed name"):
        PostgresLedgerView(dsn, columns={"bogus": "x"})
    with pytest.raises(LedgerError, match=r"table tool_calls lacks the column\(s\) state; map"):
        PostgresLedgerView(dsn, table="tool_calls", columns={"attempt_id": "id"}).attempts()
    with pytest.raises(LedgerError, match=r"state 'done' in .* is not a pytest-crashpoints"):
        PostgresLedgerView(dsn, table="tool_calls", columns=COLUMNS).attempts()
    with pytest.raises(LedgerError, match=r"query= failed on .*syntax error"):
        PostgresLedgerView(dsn, query="SELEC id FROM tool_calls").attempts()
    with pytest.raises(LedgerError, match=r"queue_sql= failed on .*tool_callz"):
        view(server, name, queue_sql="SELECT id FROM tool_callz").queue()
    with pytest.raises(LedgerError, match=r"could not connect to PostgreSQL database 'nothere'"):
        PostgresLedgerView(server.dsn("nothere"), table="jobs").attempts()


def test_the_view_only_reads(db: tuple[PostgresServer, str]) -> None:
    server, name = db
    make_table(server, name)
    sneaky = view(server, name, queue_sql="DELETE FROM tool_calls RETURNING id")
    with pytest.raises(LedgerError, match="cannot execute DELETE in a read-only transaction"):
        sneaky.queue()
    assert server.execute("SELECT count(*) FROM tool_calls", database=name).strip() == "2"




def _backends(server: PostgresServer, name: str) -> int:
    """How many server processes are connected to ``name``."""
    return int(server.execute(
        f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{name}'"
    ).strip())


def _drop_unforced(server: PostgresServer, name: str) -> None:
    """DROP DATABASE without FORCE: PostgreSQL waits up to 5 s for the server processes of
    closed connections to exit, and refuses while a connection is open."""
    server.execute(f'DROP DATABASE "{name}"')


def test_a_case_holds_one_connection_between_reads_and_closes_it(
    db: tuple[PostgresServer, str],
) -> None:
    from pytest_crashpoints._ledger.postgres_view import holding_connections, release_connections

    server, name = db
    make_table(server, name)
    ledger = view(server, name)
    with holding_connections():
        first = ledger.attempts()
        # A commit between reads is seen by the next read (each read is its own transaction).
        server.execute("UPDATE tool_calls SET status = 'done' WHERE id = 'c-2'", database=name)
        second = ledger.attempts()
        assert _backends(server, name) == 1
        release_connections()  # what the harness does before it copies or drops a database
        _drop_unforced(server, name)
        server.create_database(name)
        make_table(server, name)
        assert [a.state for a in ledger.attempts()] == [State.OUTCOME_CONFIRMED,
                                                        State.DISPATCHED]
        assert _backends(server, name) == 1
    assert [a.state for a in first] == [State.OUTCOME_CONFIRMED, State.DISPATCHED]
    assert [a.state for a in second] == [State.OUTCOME_CONFIRMED, State.OUTCOME_CONFIRMED]
    _drop_unforced(server, name)  # the scope's end closed it
    server.create_database(name)


def test_without_the_scope_a_connection_is_closed_after_each_read(
    db: tuple[PostgresServer, str],
) -> None:
    server, name = db
    make_table(server, name)
    view(server, name).attempts()
    _drop_unforced(server, name)
    server.create_database(name)
