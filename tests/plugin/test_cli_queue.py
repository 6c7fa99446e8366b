"""``crashpoints queue LEDGER``: the operator's view of a ledger, and a deploy gate on it."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_crashpoints import Ledger, State
from pytest_crashpoints.cli import main
from tests.fakes import AUTH

AGE = 120.0  # the rows are written by a clock this far behind the wall clock the command reads


def _intent(ledger: Ledger, n: int, tool: str = "send_email") -> str:
    attempt, _ = ledger.record_intent(
        task_id=f"task-{n}",
        tool_name=tool,
        args={"invoice": f"inv-{n}"},
        idempotency_key=f"invoice:tenant-7:inv-{n}:send",
        authority=AUTH,
        actor="worker-1",
    )
    return attempt.attempt_id


def _dispatch(ledger: Ledger, attempt_id: str, request_id: str | None = None) -> None:
    ledger.transition(
        attempt_id,
        State.DISPATCHED,
        actor="worker-1",
        reason="sending",
        provider_request_id=request_id,
    )


@pytest.fixture
def confirmed_only(tmp_path: Path) -> Path:
    """A ledger whose only attempt is confirmed: nothing in the queue."""
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path) as ledger:
        done = _intent(ledger, 1)
        _dispatch(ledger, done, "req_1")
        ledger.transition(done, State.OUTCOME_CONFIRMED, actor="worker-1", reason="receipt")
    return path


@pytest.fixture
def with_work(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A ledger with one confirmed, one UNKNOWN (owned, backing off) and one MANUAL_REVIEW."""
    path = tmp_path / "ledger.sqlite3"
    with Ledger(path, clock=lambda: time.time() - AGE) as ledger:
        done = _intent(ledger, 1)
        _dispatch(ledger, done, "req_done")
        ledger.transition(done, State.OUTCOME_CONFIRMED, actor="worker-1", reason="receipt")
        unknown = _intent(ledger, 2, "charge_card")
        _dispatch(ledger, unknown, "req_00000000000042")
        ledger.transition(unknown, State.UNKNOWN, actor="worker-1", reason="response lost")
        ledger.claim(unknown, owner="recovery-1", lease_seconds=600)
        ledger.defer(unknown, until=time.time() + 300, actor="recovery-1")
        review = _intent(ledger, 3, "deploy")
        _dispatch(ledger, review)
        ledger.transition(review, State.UNKNOWN, actor="worker-1", reason="connection reset")
        ledger.transition(review, State.MANUAL_REVIEW, actor="recovery-1", reason="no lookup")
        hashes = {a.attempt_id: a.args_hash for a in ledger.attempts()}
    return path, {"done": done, "unknown": unknown, "review": review, **hashes}


def test_empty_queue_exits_0(confirmed_only: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", str(confirmed_only)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{confirmed_only}: the queue is empty (no in-flight or review work).\n"
    assert err == ""
    assert main(["queue", "--json", str(confirmed_only)]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_unknown_and_review_rows_exit_1(
    with_work: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, ids = with_work
    assert main(["queue", str(path)]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    header, first, second, blank, summary = out.splitlines()
    columns = ["ATTEMPT", "STATE", "TOOL", "TASK", "OWNER", "AGE", "NEXT ATTEMPT", "ARGS HASH"]
    columns.append("PROVIDER REQUEST ID")
    assert re.split(r"\s{2,}", header) == columns
    unknown, review = ids["unknown"], ids["review"]
    assert re.split(r"\s{2,}", first)[:5] == [
        unknown,
        "UNKNOWN",
        "charge_card",
        "task-2",
        "recovery-1",
    ]
    assert re.split(r"\s{2,}", first)[7:] == [ids[unknown][:12], "req_00000000000042"]
    assert re.split(r"\s{2,}", second)[:5] == [
        review,
        "MANUAL_REVIEW",
        "deploy",
        "task-3",
        "worker-1",
    ]
    assert re.split(r"\s{2,}", second)[6:] == ["-", ids[review][:12], "-"]
    # Age from the ledger's clock (wall time), backoff relative to now.
    assert re.fullmatch(r"12[01]s", re.split(r"\s{2,}", first)[5])
    assert re.fullmatch(r"in (299|300)s", re.split(r"\s{2,}", first)[6])
    # Aligned: every value starts under its column's header.
    for name in columns:
        start = header.index(name)
        assert first[start - 2 : start] == "  " or start == 0
        assert first[start] != " " and second[start] != " "
    assert ids["done"] not in out
    assert blank == ""
    assert summary == "2 attempts need attention: 1 MANUAL_REVIEW, 1 UNKNOWN."


def test_json(with_work: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = with_work
    assert main(["queue", str(path), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [set(row) for row in rows] == [
        {
            "attempt_id",
            "state",
            "tool_name",
            "task_id",
            "owner",
            "lease_expires_at",
            "age_seconds",
            "next_attempt_at",
            "args_hash",
            "provider_request_id",
        }
    ] * 2
    unknown, review = rows
    assert unknown["attempt_id"] == ids["unknown"]
    assert unknown["state"] == "UNKNOWN"
    assert (unknown["tool_name"], unknown["task_id"]) == ("charge_card", "task-2")
    assert unknown["owner"] == "recovery-1"
    assert unknown["args_hash"] == ids[ids["unknown"]]  # the full hash, not the short one
    assert unknown["provider_request_id"] == "req_00000000000042"
    assert AGE <= unknown["age_seconds"] < AGE + 30
    assert unknown["next_attempt_at"] == pytest.approx(time.time() + 300, abs=30)
    assert unknown["lease_expires_at"] is not None
    assert (review["attempt_id"], review["state"]) == (ids["review"], "MANUAL_REVIEW")
    assert (review["next_attempt_at"], review["provider_request_id"]) == (None, None)


def _other_app_db(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()


def _other_version_ledger(path: Path) -> None:
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


def _version_1_without_ledger_tables(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("PRAGMA user_version = 1")  # claims the current schema version
    conn.commit()
    conn.close()


def _corrupt_ledger(path: Path) -> None:
    header = bytearray(b"SQLite format 3\x00".ljust(100, b"\x00"))
    header[60:64] = (1).to_bytes(4, "big")  # claims the current schema version
    path.write_bytes(bytes(header) + b"\xff" * 4000)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda p: p.write_bytes(b"not a database\n" * 20),
            "is not a SQLite ledger (no SQLite header)",
            id="not-sqlite",
        ),
        pytest.param(
            lambda p: p.write_bytes(b""),
            "is not a SQLite ledger (no SQLite header)",
            id="empty-file",
        ),
        pytest.param(
            _other_app_db,
            "is a SQLite database but not a pytest-crashpoints ledger",
            id="sqlite-without-ledger",
        ),
        pytest.param(
            _other_version_ledger,
            "has ledger schema version 99, but this version",
            id="other-schema-version",
        ),
        pytest.param(
            _version_1_without_ledger_tables,
            "is not a pytest-crashpoints ledger (it has no attempts or events table)",
            id="current-version-without-ledger-tables",
        ),
        pytest.param(_corrupt_ledger, "is not a readable SQLite ledger", id="corrupt"),
    ],
)
def test_a_file_that_is_not_a_ledger_is_refused_and_left_byte_identical(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], None],
    message: str,
) -> None:
    path = tmp_path / "ledger.sqlite3"
    make(path)
    before = path.read_bytes()
    assert main(["queue", str(path)]) == 2
    assert path.read_bytes() == before
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"crashpoints queue: error: {path} ")
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert path.read_bytes() == before
    assert sorted(tmp_path.iterdir()) == [path]  # no journal, WAL or shm file left either


def test_a_missing_path_is_an_error_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope" / "ledger.sqlite3"
    assert main(["queue", "--json", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"crashpoints queue: error: no ledger at {missing}: the path does not exist "
        "(nothing was created).\n",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_directory_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"crashpoints queue: error: {tmp_path} is a directory, not a ledger file.\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_console_script(tmp_path: Path, with_work: tuple[Path, dict[str, str]]) -> None:
    script = Path(sys.executable).with_name("crashpoints")
    assert script.exists(), f"install the package (pip install -e .): no {script}"
    path, ids = with_work
    run = subprocess.run(
        [str(script), "queue", str(path), "--json"], capture_output=True, text=True, timeout=60
    )
    assert (run.returncode, run.stderr) == (1, "")
    assert [row["attempt_id"] for row in json.loads(run.stdout)] == [ids["unknown"], ids["review"]]
    missing = subprocess.run(
        [str(script), "queue", str(tmp_path / "missing.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert missing.stderr.startswith("crashpoints queue: error: no ledger at ")
    assert missing.stderr.count("\n") == 1
    assert not (tmp_path / "missing.sqlite3").exists()


def test_a_postgres_ledger_is_read_by_its_connection_string(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_crashpoints.ledger import PostgresLedger
    from pytest_crashpoints.servers import find_postgres_bin, postgres_server

    if find_postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    with postgres_server() as server:
        server.create_database("agent")
        server.create_database("other")
        with PostgresLedger(server.dsn("agent")) as ledger:
            stuck = _intent(ledger, 1)
            _dispatch(ledger, stuck, "req_42")
            done = _intent(ledger, 2)
            _dispatch(ledger, done)
            ledger.transition(done, State.OUTCOME_CONFIRMED, actor="worker-1", reason="ok")
        for target in (server.dsn("agent"), server.url("agent")):
            assert main(["queue", target]) == 1
            out = capsys.readouterr().out
            assert stuck in out and "req_42" in out and done not in out, out
            assert "1 attempt needs attention: 1 DISPATCHED." in out
        assert main(["queue", "--json", server.dsn("agent")]) == 1
        [entry] = json.loads(capsys.readouterr().out)
        assert (entry["attempt_id"], entry["state"]) == (stuck, "DISPATCHED")
        # A database without a ledger, and one that does not exist: one line, status 2,
        # and nothing made in either.
        assert main(["queue", server.dsn("other")]) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith("crashpoints queue: error: ")
        assert "holds no pytest-crashpoints ledger" in said.err
        assert main(["queue", server.dsn("missing")]) == 2
        assert "cannot open the ledger in PostgreSQL database 'missing'" in capsys.readouterr().err
        tables = server.execute("SELECT count(*) FROM information_schema.tables WHERE "
                                "table_schema = 'public'", database="other")
        assert tables.strip() == "0"
