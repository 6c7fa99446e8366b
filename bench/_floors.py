"""The floors figures are measured against: the least the operating system can do."""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import time
from pathlib import Path


def fork_kill_wait(samples: int = 20) -> float:
    """Median seconds of a bare ``fork`` + ``SIGKILL`` (of the child, by itself) + ``waitpid``,
    from this process as it is now (a fork costs more the more memory the parent maps)."""
    timings = []
    for _ in range(samples):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child dies at once
            os.kill(os.getpid(), signal.SIGKILL)
        os.waitpid(pid, 0)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


class RawCommits:
    """Raw SQLite commits in WAL mode with ``synchronous=FULL``: one row inserted, then updated,
    each write its own ``BEGIN IMMEDIATE`` transaction (as the ledger writes)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS attempts (id TEXT PRIMARY KEY, state TEXT, ref TEXT)"
        )
        self.serial = 0

    def commits(self, count: int) -> None:
        """One logical effect: an insert and ``count - 1`` updates, each committed."""
        self.serial += 1
        key = f"raw-{self.serial}"
        self._commit("INSERT INTO attempts VALUES (?, 'INTENT', NULL)", (key,))
        for n in range(count - 1):
            self._commit("UPDATE attempts SET state = ?, ref = ? WHERE id = ?", (f"S{n}", key, key))

    def _commit(self, sql: str, params: tuple[str, ...]) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(sql, params)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()
