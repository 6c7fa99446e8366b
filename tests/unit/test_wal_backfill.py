"""A power loss of a database in WAL with ``synchronous=NORMAL`` keeps what its last
checkpoint synced: the frames the WAL index says were backfilled, read in the byte order
SQLite writes them (``_harness/storage/powerloss.py``)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from pytest_crashpoints._harness.storage.powerloss import lose_unsynced


def _database(path: Path, *, after_checkpoint: int) -> None:
    """Two commits, a full checkpoint, then ``after_checkpoint`` more; left open as a killed
    process leaves it (the WAL and its index on disk, nothing checkpointed at close)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (n INTEGER)")
    conn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0] == 0
    for n in range(2, 2 + after_checkpoint):
        conn.execute("INSERT INTO t VALUES (?)", (n,))
    copy = path.with_name("copy.db")
    for suffix in ("", "-wal", "-shm"):  # the files as the power found them
        Path(f"{copy}{suffix}").write_bytes(Path(f"{path}{suffix}").read_bytes())
    conn.close()


def test_a_checkpoint_with_nothing_written_after_it_loses_nothing(tmp_path: Path) -> None:
    _database(tmp_path / "app.db", after_checkpoint=0)
    loss = lose_unsynced(tmp_path / "copy.db")
    assert (loss.commits, loss.cut) == (0, 0), str(loss)
    assert "nothing lost" in str(loss)
    with closing(sqlite3.connect(tmp_path / "copy.db")) as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM t")] == [1]


def test_what_was_written_after_the_checkpoint_is_lost(tmp_path: Path) -> None:
    _database(tmp_path / "app.db", after_checkpoint=2)
    loss = lose_unsynced(tmp_path / "copy.db")
    assert loss.commits == 2, str(loss)
    with closing(sqlite3.connect(tmp_path / "copy.db")) as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM t")] == [1]
