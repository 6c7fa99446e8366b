"""What a power loss between SQLite's writes and their sync can leave, opened by the real SQLite.

The harness does not tear SQLite's files: it takes the window of a commit's writes for the
kill just before the commit (``db.commit``: the transaction lost whole) or just after it
(``db.committed``: kept whole), and says so (docs/howto-storage-faults.md). These tests are
the evidence: every prefix of a commit's WAL frames, torn mid-frame included, and every
prefix of a rollback journal written before its sync, opens at the commit before or at this
one, never in between and never corrupt, because SQLite checks each WAL frame's checksum and
salts, and plays a hot journal back only as far as its records' checksums hold.
"""

from __future__ import annotations

import sqlite3
import struct
from contextlib import closing
from pathlib import Path

import pytest

ROWS = 60  # each commit spans several pages: its WAL frames and journal records are many


def _commit(db: sqlite3.Connection, n: int) -> None:
    """Commit ``n``: one transaction (the connections here are in autocommit mode)."""
    db.execute("BEGIN")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(n, "x" * 200) for _ in range(ROWS)])
    db.execute("COMMIT")


def _opened(folder: Path, files: dict[str, bytes]) -> tuple[list[int], str]:
    """The commits (their numbers) a fresh connection reads from ``files``, and what
    ``PRAGMA integrity_check`` says."""
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    with closing(sqlite3.connect(folder / "app.db")) as db:
        commits = [n for (n,) in db.execute("SELECT DISTINCT n FROM t ORDER BY n")]
        (check,) = db.execute("PRAGMA integrity_check").fetchone()
    return commits, check


def _cuts(start: int, end: int, frame: int) -> list[int]:
    """Every frame boundary from ``start`` to ``end``, and the middle of each frame."""
    bounds = list(range(start, end + 1, frame))
    return sorted({*bounds, *(b + frame // 2 for b in bounds if b + frame // 2 < end)})


def test_every_prefix_of_a_commits_wal_frames_is_the_commit_before_or_this_one(
    tmp_path: Path,
) -> None:
    """WAL with synchronous=FULL: commits 1 and 2 synced; commit 3's frames written, and
    the power goes before their sync. Whatever prefix of them reached the disk (a frame torn
    in two included), SQLite reads commits 1 and 2, or, with every frame of commit 3 there,
    1 to 3."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
        _commit(db, 1)
        _commit(db, 2)
        synced = (tmp_path / "app.db-wal").stat().st_size
        _commit(db, 3)
        database = path.read_bytes()
        wal = (tmp_path / "app.db-wal").read_bytes()
        page = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    frame = 24 + page
    # Commit 3 ends with its commit frame: the first after the synced ones that carries the
    # database's size. (With FULL, SQLite may pad the WAL after it with copies of it.)
    committed = next(
        offset + frame
        for offset in range(synced, len(wal), frame)
        if struct.unpack_from(">I", wal, offset + 4)[0] != 0
    )
    cuts = _cuts(synced, len(wal), frame)
    assert len([cut for cut in cuts if cut < committed]) >= 5, "commit 3 spans several frames"
    for cut in cuts:
        commits, check = _opened(tmp_path / f"cut-{cut}", {"app.db": database,
                                                           "app.db-wal": wal[:cut]})
        assert check == "ok", cut
        assert commits == ([1, 2, 3] if cut >= committed else [1, 2]), cut


@pytest.mark.parametrize("journal_mode", ["DELETE", "TRUNCATE", "PERSIST"])
def test_every_prefix_of_a_journal_written_before_its_sync_is_the_commit_before(
    tmp_path: Path, journal_mode: str
) -> None:
    """A rollback journal: SQLite writes the original pages to the journal, syncs it, and
    only then writes the database. The power going before the journal's sync leaves the
    database as it was and any prefix of the journal: SQLite reads commits 1 and 2."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(f"PRAGMA journal_mode={journal_mode}")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
        _commit(db, 1)
        _commit(db, 2)
        before = path.read_bytes()
        db.execute("BEGIN")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(3, "x" * 200) for _ in range(ROWS)])
        # Commit 3 is under way: its journal holds the pages it changes, written, not synced,
        # and the database is not written yet (nothing spilled).
        journal = (tmp_path / "app.db-journal").read_bytes()
        assert path.read_bytes() == before
        page = db.execute("PRAGMA page_size").fetchone()[0]
        db.execute("ROLLBACK")
    finally:
        db.close()
    cuts = _cuts(0, len(journal), page + 8)  # a journal record: page number, page, checksum
    assert len(cuts) >= 5, "commit 3 must journal several pages"
    for cut in cuts:
        commits, check = _opened(tmp_path / f"cut-{cut}", {"app.db": before,
                                                           "app.db-journal": journal[:cut]})
        assert (commits, check) == ([1, 2], "ok"), cut


def test_a_database_written_in_part_after_its_journal_was_synced_is_rolled_back(
    tmp_path: Path,
) -> None:
    """The second window of a rollback journal: the journal synced, the database being
    written (here: a transaction larger than the page cache, which spills to the database
    before its commit). Whatever part of those writes reached the disk, the hot journal puts
    the database back at commit 2."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
        _commit(db, 1)
        _commit(db, 2)
        before = path.read_bytes()
        db.execute("PRAGMA cache_size=2")  # pages: the transaction must spill
        db.execute("BEGIN")
        db.executemany("INSERT INTO t VALUES (?, ?)", [(3, "y" * 400) for _ in range(ROWS * 4)])
        during = path.read_bytes()
        journal = (tmp_path / "app.db-journal").read_bytes()
        page = db.execute("PRAGMA page_size").fetchone()[0]
        db.execute("ROLLBACK")
    finally:
        db.close()
    assert during != before, "the transaction must have spilled to the database"
    # Without its journal, the database the spill left is not commit 2: the journal is what
    # puts it back.
    assert _opened(tmp_path / "no-journal", {"app.db": during}) != ([1, 2], "ok")
    pages = max(len(before), len(during)) // page
    for written in sorted({1, pages // 2, pages}):
        # The first ``written`` pages as the spill left them, the rest as they were.
        torn = during[: written * page] + before[written * page :]
        commits, check = _opened(tmp_path / f"pages-{written}", {"app.db": torn,
                                                                "app.db-journal": journal})
        assert (commits, check) == ([1, 2], "ok"), written
