"""SQLiteLedgerView: a user's own ledger table read through the seed schema."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from pytest_crashpoints import Authority, SQLiteLedgerView, State, args_hash
from pytest_crashpoints.errors import LedgerError

AUTH = Authority.of(tenant_id="tenant-7", credential_scope="email:write", policy_version="p1")


def make_table(path: Path, *, with_events: bool = True) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute(
            "CREATE TABLE tool_calls (id TEXT, task TEXT, tool TEXT, hash TEXT, idem TEXT, "
            "status TEXT, req TEXT, ref TEXT, created REAL, updated REAL, args_json TEXT, "
            "owner TEXT)"
        )
        db.executemany(
            "INSERT INTO tool_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    "c-2",
                    "t-1",
                    "send_email",
                    "h2",
                    "k2",
                    "sent",
                    "r-2",
                    None,
                    5.0,
                    6.0,
                    json.dumps({"to": "b"}),
                    "w-1",
                ),
                (
                    "c-1",
                    "t-1",
                    "send_email",
                    "h1",
                    "k1",
                    "done",
                    "r-1",
                    "m-1",
                    1.0,
                    2.0,
                    json.dumps({"to": "a"}),
                    None,
                ),
            ],
        )
        if with_events:
            db.execute(
                "CREATE TABLE log (call TEXT, before TEXT, after TEXT, t REAL, who TEXT, why TEXT)"
            )
            db.execute("INSERT INTO log VALUES ('c-1', NULL, 'done', 2.0, 'w-1', 'ok')")
    db.close()


def view(path: Path, **kw: object) -> SQLiteLedgerView:
    return SQLiteLedgerView(
        path,
        table="tool_calls",
        columns={
            "attempt_id": "id",
            "task_id": "task",
            "tool_name": "tool",
            "args_hash": "hash",
            "idempotency_key": "idem",
            "state": "status",
            "provider_request_id": "req",
            "result_ref": "ref",
            "created_at": "created",
            "updated_at": "updated",
        },
        states=kw.pop("states", {"sent": State.DISPATCHED, "done": State.OUTCOME_CONFIRMED}),
        events_table="log",
        event_columns={
            "attempt_id": "call",
            "from_state": "before",
            "to_state": "after",
            "at": "t",
            "actor": "who",
            "reason": "why",
        },
        authority_of=lambda task, at: AUTH,
        **kw,  # type: ignore[arg-type]
    )


def test_reads_mapped_columns_states_and_authority(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    make_table(path)
    attempts = view(path).attempts()
    assert [a.attempt_id for a in attempts] == ["c-1", "c-2"]  # by creation time
    first = attempts[0]
    assert (first.state, first.provider_request_id, first.result_ref) == (
        State.OUTCOME_CONFIRMED,
        "r-1",
        "m-1",
    )
    assert first.args == {"to": "a"} and first.authority == AUTH
    assert [e.to_state for e in view(path).events()] == [State.OUTCOME_CONFIRMED]


def test_queue_is_the_in_flight_attempts_unless_told(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    make_table(path)
    assert [q.attempt_id for q in view(path).queue()] == ["c-2"]
    custom = view(path, queue_sql="SELECT id FROM tool_calls WHERE owner IS NULL")
    assert [q.attempt_id for q in custom.queue()] == ["c-1"]


def test_a_ledger_not_created_yet_reads_as_empty(tmp_path: Path) -> None:
    missing = view(tmp_path / "later.db")
    assert (missing.attempts(), missing.queue(), missing.events()) == ([], [], [])
    assert not (tmp_path / "later.db").exists()  # reading never creates it
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    assert view(empty).attempts() == []


def test_a_missing_column_and_an_unknown_state_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    make_table(path)
    with pytest.raises(LedgerError, match="lacks the column"):
        SQLiteLedgerView(path, table="tool_calls").attempts()
    with pytest.raises(LedgerError, match=r"state 'sent' in .* is not a pytest-crashpoints state"):
        view(path, states={}).attempts()


def jobs_table(path: Path) -> None:
    """A four-column jobs table, as agents keep them: no key, no hash, no timestamps."""
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, status)")
        db.executemany(
            "INSERT INTO jobs VALUES (?, ?, ?, ?)",
            [("j-1", "a@example.com", "hi", "sent"), ("j-2", "b@example.com", "yo", "pending")],
        )
    db.close()


def jobs(path: Path, **kw: object) -> SQLiteLedgerView:
    return SQLiteLedgerView(
        path,
        table="jobs",
        columns={"attempt_id": "id", "state": "status"},
        states={"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED},
        **kw,  # type: ignore[arg-type]
    )


def test_a_row_id_and_a_state_are_all_a_view_needs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    jobs_table(path)
    view = jobs(path)
    attempts = view.attempts()
    assert [(a.attempt_id, a.state) for a in attempts] == [
        ("j-1", State.OUTCOME_CONFIRMED),
        ("j-2", State.DISPATCHED),
    ]
    assert (attempts[0].task_id, attempts[0].tool_name, attempts[0].args_hash) == ("", "", "")
    assert view.provides == {"attempt_id", "state"}
    assert [q.attempt_id for q in view.queue()] == ["j-2"]


def test_constants_and_argument_columns_fill_in_what_the_table_lacks(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    jobs_table(path)
    view = jobs(path, constants={"tool_name": "send_email"}, args_columns=("recipient", "body"))
    first = view.attempts()[0]
    assert first.tool_name == "send_email"
    assert first.args == {"recipient": "a@example.com", "body": "hi"}
    assert first.args_hash == args_hash(first.args)
    assert {"tool_name", "args_json", "args_hash"} <= view.provides
    assert "idempotency_key" not in view.provides


def test_rowid_can_be_the_row_id_and_numbers_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "issues.db"
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE issues (title TEXT, number INTEGER, state TEXT)")
        db.execute("INSERT INTO issues VALUES ('Outage', 1, 'OUTCOME_CONFIRMED')")
    db.close()
    view = SQLiteLedgerView(
        path, table="issues", columns={"attempt_id": "rowid", "result_ref": "number"}
    )
    (attempt,) = view.attempts()
    assert (attempt.attempt_id, attempt.result_ref) == ("1", "1")
    assert "result_ref" in view.provides


def test_every_keyword_reads_a_ledger_not_created_yet_as_empty(tmp_path: Path) -> None:
    later = tmp_path / "later.db"
    sqlite3.connect(later).close()  # the file exists, the table does not
    view = jobs(
        later,
        constants={"tool_name": "send_email"},
        args_columns=("recipient", "body"),
        queue_sql="SELECT id FROM jobs WHERE status = 'pending'",
        events_table="job_events",
    )
    assert (view.attempts(), view.queue(), list(view.events())) == ([], [], [])


def test_bad_view_settings_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="not a seed name"):
        SQLiteLedgerView(tmp_path / "x.db", columns={"recipient": "to"})
    with pytest.raises(LedgerError, match="give one of them"):
        SQLiteLedgerView(tmp_path / "x.db", columns={"args_json": "a"}, args_columns=("b",))
    path = tmp_path / "jobs.db"
    jobs_table(path)
    with pytest.raises(LedgerError, match="argument column"):
        jobs(path, args_columns=("recipient", "subject")).attempts()
    with pytest.raises(LedgerError, match="queue_sql= failed"):
        jobs(path, queue_sql="SELECT nope FROM jobs").queue()


ORDER_CALLS = """
    SELECT id || ':charge' AS attempt_id, id AS task_id, 'charge' AS tool_name,
           CASE WHEN status = 'charging' THEN 'DISPATCHED' ELSE 'OUTCOME_CONFIRMED' END AS state,
           payment_id AS result_ref
    FROM orders WHERE status != 'new'
    UNION ALL
    SELECT id || ':receipt', id, 'send_email',
           CASE WHEN status = 'emailing' THEN 'DISPATCHED' ELSE 'OUTCOME_CONFIRMED' END,
           receipt_id
    FROM orders WHERE status IN ('emailing', 'done')
"""


def test_a_query_reads_a_row_that_holds_two_tool_calls(tmp_path: Path) -> None:
    path = tmp_path / "orders.db"
    view = SQLiteLedgerView(path, query=ORDER_CALLS)
    assert view.attempts() == []  # no file yet
    db = sqlite3.connect(path)
    with db:
        assert view.attempts() == []  # the file, not the table yet
        db.execute(
            "CREATE TABLE orders (id TEXT, status TEXT, payment_id TEXT, receipt_id TEXT)"
        )
        db.executemany(
            "INSERT INTO orders VALUES (?, ?, ?, ?)",
            [
                ("o-1", "done", "ch_1", "msg_1"),
                ("o-2", "emailing", "ch_2", None),
                ("o-3", "charging", None, None),
                ("o-4", "new", None, None),
            ],
        )
    db.close()
    found = {(a.attempt_id, a.tool_name, a.state, a.result_ref) for a in view.attempts()}
    assert found == {
        ("o-1:charge", "charge", State.OUTCOME_CONFIRMED, "ch_1"),
        ("o-2:charge", "charge", State.OUTCOME_CONFIRMED, "ch_2"),
        ("o-3:charge", "charge", State.DISPATCHED, None),
        ("o-1:receipt", "send_email", State.OUTCOME_CONFIRMED, "msg_1"),
        ("o-2:receipt", "send_email", State.DISPATCHED, None),
    }
    assert {"attempt_id", "task_id", "tool_name", "state", "result_ref"} <= view.provides
    assert "provider_request_id" not in view.provides
    assert {e.attempt_id for e in view.queue()} == {"o-3:charge", "o-2:receipt"}


def test_a_bad_query_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "orders.db"
    sqlite3.connect(path).execute("CREATE TABLE orders (id TEXT, status TEXT)").connection.close()
    with pytest.raises(LedgerError, match=r"query= failed on .*orders.db \(near .*syntax error"):
        SQLiteLedgerView(path, query="SELEC id FROM orders").attempts()
    with pytest.raises(LedgerError, match=r"\(query=\) lacks the column\(s\) state; .*AS"):
        SQLiteLedgerView(path, query="SELECT id AS attempt_id FROM orders").attempts()
    with pytest.raises(LedgerError, match="table= and query= both say where"):
        SQLiteLedgerView(path, table="orders", query="SELECT 1")


def test_states_of_a_column_of_integers_map_by_their_value(tmp_path: Path) -> None:
    """``states={0: ..., 1: ...}`` for a flag column (``sent INTEGER``): each row maps by its
    value, whether the keys are the integers or their text (the text of an unmapped value is
    named in the error)."""

    db = tmp_path / "orders.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE outbox (id TEXT, sent INTEGER)")
        conn.executemany("INSERT INTO outbox VALUES (?, ?)", [("a", 0), ("b", 1), ("c", 2)])
    for states in ({0: State.DISPATCHED, 1: State.OUTCOME_CONFIRMED},
                   {"0": State.DISPATCHED, "1": State.OUTCOME_CONFIRMED}):
        view = SQLiteLedgerView(db, query="SELECT * FROM outbox WHERE id != 'c'",
                                columns={"attempt_id": "id", "state": "sent"}, states=states)
        assert [(a.attempt_id, a.state) for a in view.attempts()] == [
            ("a", State.DISPATCHED), ("b", State.OUTCOME_CONFIRMED)]
    view = SQLiteLedgerView(db, table="outbox", columns={"attempt_id": "id", "state": "sent"},
                            states={0: State.DISPATCHED, 1: State.OUTCOME_CONFIRMED})
    with pytest.raises(LedgerError, match="state 2 in"):
        view.attempts()


def _timestamped(path: Path) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("CREATE TABLE jobs (id TEXT, status TEXT, created_at TEXT, updated_at TEXT, "
                   "created REAL)")
        db.execute("INSERT INTO jobs VALUES ('j-1', 'sent', '2026-11-30T14:06:01Z', "
                   "'2026-11-30T14:06:02Z', 3.0)")
    db.close()


def test_unmapped_iso_timestamps_of_the_seed_names_are_not_read(tmp_path: Path) -> None:
    """A table whose own created_at/updated_at hold ISO-8601 text: the view was never told
    to read them as harness seconds, so it does not; the rest reads as usual."""
    path = tmp_path / "jobs.db"
    _timestamped(path)
    view = SQLiteLedgerView(path, table="jobs", columns={"attempt_id": "id", "state": "status"},
                            states={"sent": State.OUTCOME_CONFIRMED})
    [job] = view.attempts()
    assert (job.attempt_id, job.state, job.created_at) == ("j-1", State.OUTCOME_CONFIRMED, 0.0)
    assert "created_at" not in view.provides and "updated_at" not in view.provides
    numbered = SQLiteLedgerView(path, table="jobs", states={"sent": State.OUTCOME_CONFIRMED},
                                columns={"attempt_id": "id", "state": "status",
                                         "created_at": "created"})
    assert numbered.attempts()[0].created_at == 3.0
    assert "created_at" in numbered.provides


def test_a_mapped_column_that_holds_no_number_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    _timestamped(path)
    view = SQLiteLedgerView(path, table="jobs", states={"sent": State.OUTCOME_CONFIRMED},
                            columns={"attempt_id": "id", "state": "status",
                                     "created_at": "created_at"})
    with pytest.raises(LedgerError) as info:
        view.attempts()
    said = str(info.value)
    assert "\n" not in said
    assert "created_at is mapped to column 'created_at', which holds '2026-11-30T14:06:01Z'" in said
    assert "a time in harness seconds" in said and "leave it unmapped" in said


def test_a_table_that_stores_the_tenant_alone_takes_the_rest_from_authority_of(
    tmp_path: Path,
) -> None:
    """A tenant column and ``authority_of``: the scope and policy the table does not store
    come from ``authority_of``; they are not read as empty (an empty scope would make every
    request of the attempt look wider than its own)."""
    path = tmp_path / "agent.db"
    make_table(path)
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE tool_calls ADD COLUMN tenant TEXT DEFAULT 'tenant-9'")
    db.close()
    columns = {"attempt_id": "id", "task_id": "task", "state": "status",
               "created_at": "created", "tenant_id": "tenant"}
    states = {"sent": State.DISPATCHED, "done": State.OUTCOME_CONFIRMED}
    mapped = SQLiteLedgerView(path, table="tool_calls", columns=columns, states=states,
                              authority_of=lambda task, at: AUTH)
    first = mapped.attempts()[0]
    assert first.authority.tenant_id == "tenant-9"  # the row's word
    assert (first.authority.credential_scope, first.authority.policy_version) == (
        AUTH.credential_scope, AUTH.policy_version)
    # Without authority_of, what the table does not store is not made up: empty.
    alone = SQLiteLedgerView(path, table="tool_calls", columns=columns, states=states)
    assert alone.attempts()[0].authority.credential_scope == frozenset()
