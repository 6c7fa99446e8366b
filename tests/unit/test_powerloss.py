"""Power loss on a real SQLite database: the WAL cut back to what the last checkpoint synced,
and the settings under which a power loss is a kill, or cannot be tested."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_crashpoints._harness.powerloss import (
    equals_a_kill,
    lose_unsynced,
    lossy_databases,
    refusal,
)


def crashed_copy(conn: sqlite3.Connection, db: Path, into: Path) -> Path:
    """The files as a SIGKILL would leave them (the connection still open, nothing
    checkpointed on close): copied while the writer holds them."""
    into.mkdir()
    for name in (db.name, db.name + "-wal", db.name + "-shm"):
        if (db.parent / name).exists():
            shutil.copyfile(db.parent / name, into / name)
    return into / db.name


def rows(db: Path) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT n FROM t ORDER BY n")]
    except sqlite3.OperationalError:
        return []  # the table itself was never synced
    finally:
        conn.close()


def writer(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (n INTEGER)")
    return conn


def test_commits_since_the_last_checkpoint_are_lost_and_the_rest_kept(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    conn = writer(db)
    conn.execute("INSERT INTO t VALUES (1)")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # synced: 1 survives anything
    conn.execute("INSERT INTO t VALUES (2)")
    conn.execute("INSERT INTO t VALUES (3)")
    killed = crashed_copy(conn, db, tmp_path / "killed")
    powered = crashed_copy(conn, db, tmp_path / "powered")
    conn.close()
    assert rows(killed) == [1, 2, 3]  # a kill keeps every commit
    loss = lose_unsynced(powered)
    assert (loss.commits, rows(powered)) == (2, [1])
    assert "the last 2 commit(s) of jobs.db were not synced" in str(loss)
    conn = sqlite3.connect(powered)  # and the database works on
    conn.execute("INSERT INTO t VALUES (4)")
    conn.commit()
    assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"]
    conn.close()
    assert rows(powered) == [1, 4]


def test_with_nothing_checkpointed_every_commit_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    conn = writer(db)
    conn.execute("INSERT INTO t VALUES (1)")
    powered = crashed_copy(conn, db, tmp_path / "powered")
    conn.close()
    loss = lose_unsynced(powered)
    assert loss.commits == 2 and rows(powered) == []  # the CREATE TABLE too


def test_a_database_without_a_wal_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (n INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    loss = lose_unsynced(db)
    assert (loss.commits, loss.cut, rows(db)) == (0, 0, [1])
    assert "nothing lost" in str(loss)


@pytest.mark.parametrize(
    ("sync", "kill", "refused"),
    [("wal/1", False, None), ("wal/2", True, None), ("wal/3", True, None),
     ("delete/1", True, None), ("delete/2", True, None), ("wal/0", False, "syncs nothing"),
     ("memory/2", False, "keeps no journal"), ("off/1", False, "keeps no journal")],
)
def test_which_settings_a_power_loss_is_a_kill_for(
    sync: str, kill: bool, refused: str | None
) -> None:
    assert equals_a_kill(sync) is kill
    said = refusal(sync)
    assert (said is None) if refused is None else (said is not None and refused in said)


def test_the_lossy_databases_are_read_from_the_commit_hits() -> None:
    def hit(point: str, **context: object) -> SimpleNamespace:
        return SimpleNamespace(point=point, context=context)

    hits = [hit("db.committed", db="jobs.db", sync="wal/1"), hit("B"),
            hit("db.committed", db="ledger.db", sync="wal/2"),
            hit("db.commit", db="other.db", sync="wal/1"),
            hit("db.committed", db="jobs.db", sync="wal/1")]
    assert lossy_databases(hits) == {"jobs.db": "wal/1"}
