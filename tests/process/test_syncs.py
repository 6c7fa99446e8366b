"""file.sync before every sync of a file of the agent's, and the sync log after it, in real
worker processes."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from pytest_crashpoints._harness.storage.agentfiles import install_sync_log, synced_sizes
from pytest_crashpoints._inject.failpoints import SYNC_POINT, Fault, Hit, Kill
from pytest_crashpoints._process.outcome import Completed, Killed, Outcome
from pytest_crashpoints._process.worker import run_worker


def run_syncing(root: Path, body: Callable[[Path], object], **faults: int) -> Outcome:
    """``body(root)`` in a worker process whose syncs are hooked as a case's are; ``faults``:
    a kill at ``file.sync`` on the given hit (``kill=n``)."""

    (root / "logs").mkdir(exist_ok=True)  # as in a run directory

    def worker() -> object:
        install_sync_log(root)
        return body(root)

    armed = [Fault(SYNC_POINT, Kill(), hit=faults["kill"])] if "kill" in faults else []
    return run_worker(worker, faults=armed)


def syncs(hits: Sequence[Hit]) -> list[tuple[int, object]]:
    return [(hit.n, hit.context["file"]) for hit in hits if hit.point == SYNC_POINT]


def append(path: Path, data: bytes, sync: Callable[[int], None]) -> None:
    with open(path, "ab") as out:
        out.write(data)
        out.flush()
        sync(out.fileno())


def two_lines(root: Path) -> None:
    append(root / "journal.jsonl", b"one\n", os.fsync)
    append(root / "journal.jsonl", b"two\n", os.fdatasync)


def test_file_sync_fires_before_each_sync_of_a_file_of_the_agents(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"

    def body(root: Path) -> None:
        two_lines(root)
        with open(root / "state" / "cursor", "wb") as cursor:
            cursor.write(b"7")
            cursor.flush()
            os.fsync(cursor)  # a file object: its fileno() is synced
        append(root / "logs" / "worker-1.log", b"harness\n", os.fsync)  # the harness's own
        append(outside, b"elsewhere\n", os.fsync)  # not the case's
        folder = os.open(root / "state", os.O_RDONLY)
        try:
            os.fsync(folder)  # a directory: nothing to tear
        finally:
            os.close(folder)

    try:
        outcome = run_syncing(tmp_path, body)
    finally:
        outside.unlink(missing_ok=True)
    assert isinstance(outcome, Completed), outcome
    assert syncs(outcome.hits) == [
        (1, "journal.jsonl"), (2, "journal.jsonl"), (3, "state/cursor"),
    ]
    assert synced_sizes(tmp_path) == {
        "journal.jsonl": 8, "state/cursor": 1, "logs/worker-1.log": 8,
    }


def test_a_kill_at_file_sync_comes_after_the_write_and_before_its_sync(tmp_path: Path) -> None:
    """The window: the second line is written (a kill keeps it, in the page cache) and not
    yet synced (the log still says 4 bytes: what a power loss keeps)."""
    outcome = run_syncing(tmp_path, two_lines, kill=2)
    assert isinstance(outcome, Killed) and outcome.point == SYNC_POINT, outcome
    assert outcome.context == {"file": "journal.jsonl"}
    assert (tmp_path / "journal.jsonl").read_bytes() == b"one\ntwo\n"
    assert synced_sizes(tmp_path) == {"journal.jsonl": 4}


def test_sqlites_files_fire_nothing(tmp_path: Path) -> None:
    """A database synced by Python code (its header says so) and a file named as SQLite's
    journals are: SQLite syncs those itself, unseen, and its own recovery reads them."""
    with sqlite3.connect(tmp_path / "app.db") as db:
        db.execute("CREATE TABLE t (x)")
    db.close()

    def body(root: Path) -> None:
        with open(root / "app.db", "r+b") as database:
            os.fsync(database.fileno())
        append(root / "app.db-wal", b"frames", os.fsync)
        append(root / "app.db-journal", b"pages", os.fsync)

    outcome = run_syncing(tmp_path, body)
    assert isinstance(outcome, Completed), outcome
    assert syncs(outcome.hits) == []
    assert set(synced_sizes(tmp_path)) == {"app.db", "app.db-wal", "app.db-journal"}


def test_the_hooks_follow_the_run_directory_of_the_last_install(tmp_path: Path) -> None:
    """Installed once per process; a second install (a process forked from one that had
    them) points them at its own run directory and log."""
    first, second = tmp_path / "first", tmp_path / "second"
    (first / "logs").mkdir(parents=True)
    (second / "logs").mkdir(parents=True)

    def body(root: Path) -> None:
        install_sync_log(first)
        install_sync_log(second)
        append(first / "a.txt", b"a", os.fsync)
        append(second / "b.txt", b"b", os.fsync)

    outcome = run_syncing(tmp_path, body)
    assert isinstance(outcome, Completed), outcome
    assert syncs(outcome.hits) == [(1, "b.txt")]
    assert synced_sizes(second) == {"b.txt": 1}
    assert synced_sizes(first) == {}


def test_a_file_synced_then_renamed_keeps_what_was_synced(tmp_path: Path) -> None:
    """The atomic replace (write a new file, sync it, rename it over the old one): what was
    synced under the new file's first name is what the renamed file holds on disk; a file
    renamed over another without a sync holds nothing synced."""

    def body(root: Path) -> None:
        append(root / "state.json.tmp", b'{"n": 2}', os.fsync)
        os.replace(root / "state.json.tmp", root / "state.json")
        append(root / "other.tmp", b"never synced", os.fsync)
        (root / "other.tmp").write_bytes(b"rewritten, never synced")
        Path(root / "other.tmp").rename(root / "other")

    outcome = run_syncing(tmp_path, body)
    assert isinstance(outcome, Completed), outcome
    assert synced_sizes(tmp_path) == {"state.json": 8, "other": 12}
    (tmp_path / "logs" / "syncs-late.tsv").write_text(
        f">\t{tmp_path / 'unsynced.tmp'}\t{tmp_path / 'state.json'}\n", encoding="utf-8"
    )
    assert synced_sizes(tmp_path) == {"other": 12}  # replaced by a file never synced


def test_os_sync_syncs_every_file_as_it_stands(tmp_path: Path) -> None:
    """``os.sync()`` names no file: no fail point, and every file of the run directory is
    synced at the size it has then (a later write is not)."""

    def body(root: Path) -> None:
        (root / "state").mkdir()
        (root / "journal.jsonl").write_bytes(b"one\n")
        (root / "state" / "cursor").write_bytes(b"7")
        os.sync()
        with open(root / "journal.jsonl", "ab") as out:
            out.write(b"two\n")

    outcome = run_syncing(tmp_path, body)
    assert isinstance(outcome, Completed), outcome
    assert syncs(outcome.hits) == []
    sizes = synced_sizes(tmp_path)
    assert sizes["journal.jsonl"] == 4 and sizes["state/cursor"] == 1


def test_a_file_opened_with_o_sync_counts_as_synced_as_it_grows(tmp_path: Path) -> None:
    """Every write to a file opened with ``O_SYNC`` or ``O_DSYNC`` is synced before it
    returns: whatever it holds when the power goes is on disk, renamed or not; a file opened
    without them is not."""

    def synced_opener(path: str, flags: int) -> int:
        return os.open(path, flags | os.O_DSYNC)

    def body(root: Path) -> None:
        fd = os.open(root / "journal.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_SYNC)
        try:
            os.write(fd, b"one\n")
        finally:
            os.close(fd)
        with open(root / "cursor.tmp", "wb", opener=synced_opener) as out:
            out.write(b"7")
        os.replace(root / "cursor.tmp", root / "cursor")
        with open(root / "plain.txt", "wb") as out:
            out.write(b"unsynced")

    outcome = run_syncing(tmp_path, body)
    assert isinstance(outcome, Completed), outcome
    (tmp_path / "journal.jsonl").write_bytes(b"one\ntwo\n")  # a later synced write
    assert synced_sizes(tmp_path) == {"journal.jsonl": 8, "cursor": 1}
