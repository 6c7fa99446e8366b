"""Item 4: the reference guarded call against raw SQLite WAL ``synchronous=FULL`` commits.

``guarded_call`` on the reference ledger with an adapter that does nothing (a durable receipt
at once, no provider, no network), so what is timed is the ledger's safe order: the intent,
DISPATCHED before the request, then the provider request id with the outcome (a durable
receipt brings both: three commits). The floor is the same number of raw commits (an insert
and updates, each its own ``BEGIN IMMEDIATE`` transaction) on a plain SQLite file in the same
directory with the same durability settings. With ``synchronous=FULL`` a commit costs about
what it writes to the WAL, so the WAL pages written per call are counted for both.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_crashpoints import Authority, Ledger, Receipt, guarded_call

from . import _floors, _stats
from ._scenarios import AUTHORITY

GOAL = 0.8


class _NoopAdapter:
    tool_name = "noop"
    idempotent = True
    has_lookup = False

    def __init__(self) -> None:
        self.serial = 0

    def dispatch(
        self, args: Mapping[str, Any], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        self.serial += 1
        return Receipt(
            request_id=f"req-{self.serial}", result_ref=f"obj-{self.serial}", durable=True
        )

    def lookup(self, attempt: Any) -> Any:  # pragma: no cover - has_lookup is False
        raise NotImplementedError


class _Calls:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.adapter = _NoopAdapter()
        self.serial = 0

    def call(self) -> None:
        self.serial += 1
        attempt = guarded_call(
            self.ledger,
            self.adapter,
            task_id="t-1",
            args={"to": "billing@example.com", "n": self.serial},
            idempotency_key=f"bench:t-1:{self.serial}",
            authority=AUTHORITY,
            actor="bench",
        )
        assert attempt.state.value == "OUTCOME_CONFIRMED", attempt.state


def _commits_per_call(calls: _Calls) -> int:
    writes = 0
    original = Ledger._write

    @contextmanager
    def counting(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        with original(self, *args, **kwargs) as conn:
            yield conn

    Ledger._write = counting  # type: ignore[method-assign]
    try:
        calls.call()
    finally:
        Ledger._write = original  # type: ignore[method-assign]
    return writes


def wal_pages(conn: sqlite3.Connection, wal: Path, work: Callable[[], None], n: int) -> float:
    """WAL pages (frames) one ``work()`` appends, averaged over ``n`` (no checkpoint between)."""
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    for _ in range(n):
        work()
    frames = (wal.stat().st_size - 32) / (page_size + 24)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 1000")
    return frames / n


def main() -> None:
    rounds, per_round = (6, 20) if _stats.quick() else (40, 20)
    with tempfile.TemporaryDirectory(prefix="bench-ledger-", dir=None) as tmp:
        ledger = Ledger(Path(tmp) / "ledger.sqlite3", clock=lambda: 1000.0)
        raw = _floors.RawCommits(Path(tmp) / "raw.sqlite3")
        calls = _Calls(ledger)
        for _ in range(10):  # open the connections, warm the caches
            calls.call()
            raw.commits(3)
        commits = _commits_per_call(calls)
        pages = wal_pages(
            ledger._connection(), ledger.path.with_name("ledger.sqlite3-wal"), calls.call, 50
        )
        raw_pages = wal_pages(raw.conn, Path(tmp) / "raw.sqlite3-wal", lambda: raw.commits(3), 50)
        guarded, raw3, rawn = [], [], []
        for _ in range(rounds):
            guarded.append(_stats.timed(lambda: [calls.call() for _ in range(per_round)]))
            raw3.append(_stats.timed(lambda: [raw.commits(3) for _ in range(per_round)]))
            rawn.append(_stats.timed(lambda: [raw.commits(commits) for _ in range(per_round)]))
        # The same without fsync: what the ledger costs besides waiting for the disk.
        ledger._connection().execute("PRAGMA synchronous = OFF")
        raw.conn.execute("PRAGMA synchronous = OFF")
        cpu_guarded, cpu_raw = [], []
        for _ in range(rounds):
            cpu_guarded.append(_stats.timed(lambda: [calls.call() for _ in range(per_round)]))
            cpu_raw.append(_stats.timed(lambda: [raw.commits(commits) for _ in range(per_round)]))
        ledger.close()
        raw.close()
    # Throughput ratio: calls per second of the guarded call over effects per second raw.
    vs3 = _stats.ratios(raw3, guarded)
    vsn = _stats.ratios(rawn, guarded)
    per_call = _stats.summary([t / per_round for t in guarded])
    _stats.emit(
        _stats.result(
            4,
            "reference guarded call",
            goal=f">= {GOAL:g}x the throughput of three raw WAL synchronous=FULL commits",
            met=vs3["median"] >= GOAL,
            figure=(
                f"{vs3['median']:.2f}x of 3 raw commits, {vsn['median']:.2f}x of {commits} "
                f"raw commits (the ledger makes {commits}); "
                f"{per_call['median'] * 1e3:.2f} ms per call; {pages:.1f} WAL pages written per "
                f"call against {raw_pages:.1f} for 3 raw commits"
            ),
            command="python -m bench.guarded_call",
            details={
                "ledger commits per call": commits,
                "WAL pages per call": pages,
                "WAL pages per 3 raw commits": raw_pages,
                "calls per round": per_round,
                "guarded call, per call": per_call,
                "3 raw commits, per effect": _stats.summary([t / per_round for t in raw3]),
                f"{commits} raw commits, per effect": _stats.summary([t / per_round for t in rawn]),
                "throughput vs 3 raw commits": vs3,
                "without fsync (synchronous=OFF), guarded call per call": _stats.summary(
                    [t / per_round for t in cpu_guarded]
                ),
                f"without fsync, {commits} raw commits per effect": _stats.summary(
                    [t / per_round for t in cpu_raw]
                ),
                f"without fsync, throughput vs {commits} raw commits": _stats.ratios(
                    cpu_raw, cpu_guarded
                ),
                f"throughput vs {commits} raw commits": vsn,
            },
        )
    )


if __name__ == "__main__":
    main()
