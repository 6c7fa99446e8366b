"""The incident's copy of the ledger: placed where the test's view reads it, the times it
holds (where the case's clock starts), and the reference ledger's copy moved to the case's
clock.

The copy is an SQLite file (copied through SQLite's backup, its WAL included), an SQL dump
(run into a new database), or anything else byte for byte (JSON lines). Production stamped
the reference ledger with wall time, its default clock; a case's reference ledger runs on
harness time, so its copy's times are moved there when it is placed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import CrashpointsError

__all__ = ["ledger_times", "place_ledger", "reference_to_harness_time"]

_SQLITE_HEADER = b"SQLite format 3\x00"


def place_ledger(source: Path, target: Path) -> None:
    """Copy the incident's ledger to ``target``: an SQLite file through SQLite's backup (a
    consistent copy, its WAL included), an SQL dump executed into a new database, anything
    else (JSON lines) byte for byte. The copy is synced: it is there before the first step."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as f:
        head = f.read(len(_SQLITE_HEADER))
    if head == _SQLITE_HEADER:
        _sqlite_copy(source, target)
    elif source.suffix.lower() == ".sql":
        _from_dump(source, target)
    else:
        shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: The reference ledger's columns that hold its clock's times, by table.
_REFERENCE_TIMES = {
    "attempts": ("created_at", "updated_at", "lease_expires_at", "next_attempt_at",
                 "dispatched_at"),
    "events": ("at",),
}


def reference_to_harness_time(path: Path, epoch: float) -> None:
    """The incident's copy of the reference ledger on the case's clock: production stamped
    it with wall time (the reference ledger's default clock), a case's reference ledger runs
    on harness time, whose 0 is ``epoch``. Its wall times (Unix seconds past 2000) become
    harness seconds, so leases, grace periods and backoff run out as they did in production,
    and its events take their places in the timeline."""
    conn = sqlite3.connect(path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not set(_REFERENCE_TIMES) <= tables:
            return  # not the reference ledger's file (a copy of something else)
        triggers = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type='trigger' AND tbl_name='events'"
        ).fetchall()
        with conn:
            for name, _sql in triggers:  # the event log is append-only: for this one move
                conn.execute(f'DROP TRIGGER "{name}"')
            for table, columns in _REFERENCE_TIMES.items():
                for column in columns:
                    conn.execute(
                        f"UPDATE {table} SET {column} = {column} - ? WHERE {column} >= ?",
                        (epoch, _PLAUSIBLE[0]),
                    )
            for _name, sql in triggers:
                conn.execute(sql)
    except sqlite3.Error as exc:
        raise CrashpointsError(
            f"the incident's copy of the reference ledger {path} cannot be moved to the "
            f"case's clock ({exc}); give a copy made with `sqlite3 prod.db .backup`."
        ) from None
    finally:
        conn.close()


#: What counts as a time in a ledger: Unix seconds from 2000 to 2100.
_PLAUSIBLE = (946684800.0, 4102444800.0)
#: How many values of a ledger are looked at for times, at most.
_SCAN_LIMIT = 200_000


def ledger_times(path: Path) -> list[float]:
    """The times a ledger holds (Unix seconds, ISO 8601 text), for the clock's default start:
    its rows' updates, leases and retries are from before production stopped, or just after."""
    with open(path, "rb") as f:
        head = f.read(len(_SQLITE_HEADER))
    values: list[Any] = []
    if head == _SQLITE_HEADER:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            ]
            for table in tables:
                quoted = '"' + table.replace('"', '""') + '"'
                for row in conn.execute(f"SELECT * FROM {quoted} LIMIT {_SCAN_LIMIT}"):
                    values += row
                    if len(values) > _SCAN_LIMIT:
                        break
        except sqlite3.Error:
            return []
        finally:
            conn.close()
    else:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:_SCAN_LIMIT]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, Mapping):
                values += list(record.values())
    return [t for t in map(_as_time, values[:_SCAN_LIMIT]) if t is not None]


def _as_time(value: Any) -> float | None:
    low, high = _PLAUSIBLE
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if low <= value <= high else None
    if isinstance(value, str) and 10 <= len(value) <= 40 and value[:4].isdigit():
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.timezone.utc)
        return parsed.timestamp() if low <= parsed.timestamp() <= high else None
    return None


def _sqlite_copy(source: Path, target: Path) -> None:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    except sqlite3.DatabaseError as exc:
        raise CrashpointsError(f"the incident's ledger {source} cannot be read: {exc}.") from None
    finally:
        src.close()


def _from_dump(source: Path, target: Path) -> None:
    script = source.read_text(encoding="utf-8")
    conn = sqlite3.connect(target)
    try:
        conn.executescript(script)
    except sqlite3.Error as exc:
        raise CrashpointsError(
            f"the incident's ledger {source} is not an SQL dump SQLite runs ({exc}); make "
            "it with `sqlite3 prod.db .dump > incident.sql`."
        ) from None
    finally:
        conn.close()
