"""An incident's files, before any case runs: the ledger copy placed where the view reads it
(an SQLite file with its WAL, an SQL dump, JSON lines), the times it holds, and every
mistake in an ``Incident`` refused with what to do. (Whose each exported object is:
``test_provenance.py``.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from pathlib import Path

import pytest

from pytest_crashpoints import Authority, Incident, ProviderSpec
from pytest_crashpoints._harness.case.incident_ledger import ledger_times, place_ledger
from pytest_crashpoints.errors import CrashpointsError
from pytest_crashpoints.harness import Scenario


def _rows(path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, status FROM jobs ORDER BY id").fetchall()


def test_an_sqlite_copy_is_placed_with_what_its_wal_still_holds(tmp_path: Path) -> None:
    source = tmp_path / "prod.db"
    conn = sqlite3.connect(source, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE jobs (id TEXT, status TEXT)")
    conn.execute("INSERT INTO jobs VALUES ('j1', 'sent'), ('j2', 'sending')")
    try:  # the rows are in prod.db-wal only, not checkpointed into prod.db
        assert (tmp_path / "prod.db-wal").stat().st_size > 0
        place_ledger(source, tmp_path / "case" / "jobs.db")
    finally:
        conn.close()
    assert _rows(tmp_path / "case" / "jobs.db") == [("j1", "sent"), ("j2", "sending")]


def test_an_sql_dump_is_run_into_a_new_database(tmp_path: Path) -> None:
    dump = tmp_path / "incident.sql"
    dump.write_text(
        "BEGIN TRANSACTION;\nCREATE TABLE jobs (id TEXT, status TEXT);\n"
        "INSERT INTO jobs VALUES('j9','sending');\nCOMMIT;\n"
    )
    place_ledger(dump, tmp_path / "jobs.db")
    assert _rows(tmp_path / "jobs.db") == [("j9", "sending")]


def test_json_lines_are_copied_byte_for_byte(tmp_path: Path) -> None:
    lines = tmp_path / "ledger.jsonl"
    lines.write_bytes(b'{"id": "a", "state": "sending"}\n{"id": "a", "state": "sent"}\n')
    place_ledger(lines, tmp_path / "out" / "ledger.jsonl")
    assert (tmp_path / "out" / "ledger.jsonl").read_bytes() == lines.read_bytes()


def test_a_dump_sqlite_cannot_run_is_refused_saying_how_to_make_one(tmp_path: Path) -> None:
    dump = tmp_path / "broken.sql"
    dump.write_text("CREATE TABLE jobs (id TEXT;\n")
    with pytest.raises(CrashpointsError, match=r"\.dump > incident\.sql"):
        place_ledger(dump, tmp_path / "jobs.db")


def test_an_incident_names_real_files_and_an_aware_time(tmp_path: Path) -> None:
    with pytest.raises(CrashpointsError, match="names no file"):
        Incident()
    with pytest.raises(CrashpointsError, match=r"ledger=.*no such file"):
        Incident(ledger=tmp_path / "missing.db")
    with pytest.raises(CrashpointsError, match=r"exports\['payments'\].*no such file"):
        Incident(exports={"payments": tmp_path / "charges.json"})
    ledger = tmp_path / "l.sql"
    ledger.write_text("")
    with pytest.raises(CrashpointsError, match="aware datetime"):
        Incident(ledger=ledger, at=dt.datetime(2026, 11, 30, 14, 0))
    with pytest.raises(CrashpointsError, match="mapping of provider name"):
        Incident(ledger=ledger, exports=["charges.json"])  # type: ignore[arg-type]


def test_an_export_for_a_provider_the_test_does_not_run_is_refused(tmp_path: Path) -> None:
    charges = tmp_path / "charges.json"
    charges.write_text("[]")
    authority = Authority.of(tenant_id="t", credential_scope=["email:write"], policy_version="p")
    with pytest.raises(CrashpointsError, match=r"provider 'payments'.*add it to the marker"):
        Scenario(
            worker=lambda message, ctx: None, recover=None, messages=({"task_id": "t"},),
            providers=(ProviderSpec("email"),), authorities={"t": authority},
            incident=Incident(exports={"payments": charges}),
        )


def test_the_times_a_ledger_holds_are_its_unix_seconds_and_iso_text(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        conn.execute("CREATE TABLE jobs (id TEXT, lease_until REAL, seen TEXT, tries INTEGER)")
        conn.execute("INSERT INTO jobs VALUES ('j1', 1796047800.5, '2026-11-30T14:20:00Z', 3)")
        conn.execute("INSERT INTO jobs VALUES ('1796047999', NULL, 'not a time', 1)")
    assert sorted(ledger_times(db)) == [1796047800.5, 1796048400.0]
    lines = tmp_path / "ledger.jsonl"
    lines.write_text('{"id": "a", "at": "2026-11-30T14:05:00+00:00"}\nnot json\n'
                     '{"id": "b", "at": 1796047600}\n')
    assert sorted(ledger_times(lines)) == [1796047500.0, 1796047600.0]
