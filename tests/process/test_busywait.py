"""Futile busy waits (``_process/busywait.py``): an SQLite lock wait that only a held worker
could end is not slept out, and every other wait is."""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._harness.storage.crashstates import Blobs, RunDirReader
from pytest_crashpoints._process import busywait
from pytest_crashpoints._process.clock import HarnessClock
from pytest_crashpoints._process.interleaving import run_interleaved
from pytest_crashpoints._process.outcome import Completed, TimedOut

pytestmark = pytest.mark.skipif(
    not busywait.supported(), reason="needs Linux and the sqlite3 module on a shared libsqlite3"
)

#: The waiter waits at "start" until the holder has taken the write lock and waits at "held";
#: then the waiter runs to its end, then the holder (commits).
ORDER = [(1, "start"), (0, "held"), (1, None), (0, None)]


def hold_the_lock(db: Path, *, extra_thread: bool = False) -> str:
    if extra_thread:  # a second thread that could, in general, release a lock meanwhile
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES ('holder')")
    crashpoint("held")
    conn.execute("COMMIT")
    return "committed"


def wait_for_the_lock(db: Path, busy_timeout: float, *, extra_thread: bool = False) -> tuple:
    if extra_thread:
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
    crashpoint("start")
    conn = sqlite3.connect(db, isolation_level=None, timeout=busy_timeout)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        return (str(exc), busywait.skipped())
    conn.execute("ROLLBACK")
    return ("got the lock", busywait.skipped())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (who TEXT)")
    return path


@pytest.fixture
def clock(tmp_path: Path) -> HarnessClock:
    return HarnessClock(tmp_path / "clock")


def _run(db: Path, clock: HarnessClock | None, busy: float, timeout: float = 30, **kw: bool):
    holder_thread = kw.get("holder_thread", False)
    waiter_thread = kw.get("waiter_thread", False)
    return run_interleaved(
        [
            lambda: hold_the_lock(db, extra_thread=holder_thread),
            lambda: wait_for_the_lock(db, busy, extra_thread=waiter_thread),
        ],
        ORDER,
        timeout=timeout,
        clock=clock,
    )


def _value(outcome: object) -> object:
    assert isinstance(outcome, Completed), outcome
    return outcome.value


def test_a_wait_only_a_held_worker_could_end_is_skipped_with_the_same_error(
    db: Path, clock: HarnessClock
) -> None:
    holder, waiter = _run(db, clock, busy=4.0)
    assert _value(holder) == "committed"
    error, skipped = _value(waiter)
    assert error == "database is locked"
    # SQLite plans 4 s of sleeps before it gives up; all of them were skipped, none slept.
    assert 3.9 <= skipped <= 4.0
    assert not busywait.plan_path(clock.path).exists()  # the plan is gone with the wait


def test_without_the_harness_clock_every_wait_is_slept(db: Path) -> None:
    _, waiter = _run(db, None, busy=0.5)
    assert _value(waiter) == ("database is locked", 0.0)


def test_the_switch_turns_the_skipping_off(
    db: Path, clock: HarnessClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(busywait, "_shim", None)  # as in a process not patched yet
    monkeypatch.setattr(busywait, "_originals", {})
    monkeypatch.setenv(busywait.REAL_WAITS_ENV, "1")
    _, waiter = _run(db, clock, busy=0.5)
    assert _value(waiter) == ("database is locked", 0.0)


@pytest.mark.parametrize("who", ["holder_thread", "waiter_thread"])
def test_a_second_thread_in_either_worker_makes_the_wait_real(
    db: Path, clock: HarnessClock, who: str
) -> None:
    """A held worker with another thread, or a runner with one, might release the lock: the
    wait is slept (and still ends as SQLite ends it)."""
    holder, waiter = _run(db, clock, busy=0.5, **{who: True})
    assert _value(holder) == "committed"
    assert _value(waiter) == ("database is locked", 0.0)


def _idle_threads() -> None:
    """Threads that sleep until a thread of their process wakes them, as an agent's are: an
    idle executor thread, a queue's reader, a condition's waiter."""
    ThreadPoolExecutor(1).submit(lambda: None).result()
    threading.Thread(target=queue.Queue().get, daemon=True).start()
    threading.Thread(target=threading.Event().wait, daemon=True).start()


def hold_with_idle_threads(db: Path) -> str:
    _idle_threads()
    return hold_the_lock(db)


def wait_with_idle_threads(db: Path, busy_timeout: float) -> tuple:
    _idle_threads()
    return wait_for_the_lock(db, busy_timeout)


def hold_in_a_pool_thread(db: Path) -> str:
    """The gate is met in a thread of a pool while the main thread waits for its result (a
    LangGraph worker runs its nodes so)."""
    with ThreadPoolExecutor(2) as pool:
        return pool.submit(hold_the_lock, db).result()


def hold_and_commit_from_another_thread(db: Path) -> str:
    """The lock is taken and, after a timed wait, committed by a second thread while the main
    thread waits at the gate: the lock is released before the waiter's busy timeout runs out."""
    conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t VALUES ('holder')")

    def commit_soon() -> None:
        threading.Event().wait(0.5)
        conn.execute("COMMIT")

    committer = threading.Thread(target=commit_soon)
    committer.start()
    crashpoint("held")
    committer.join()
    return "committed"


@pytest.mark.parametrize(
    ("holder", "waiter"),
    [
        (hold_with_idle_threads, wait_for_the_lock),
        (hold_the_lock, wait_with_idle_threads),
        (hold_in_a_pool_thread, wait_for_the_lock),
    ],
    ids=["holder-idle-threads", "waiter-idle-threads", "gate-in-a-pool-thread"],
)
def test_threads_asleep_until_their_own_process_wakes_them_do_not_count(
    db: Path, clock: HarnessClock, holder, waiter
) -> None:
    """A thread asleep in an untimed wait on a private futex can be woken only by a thread of
    its own process: in a held worker (its gate thread reads its release) or around the
    runner's waiting thread, nothing can release the lock, and the wait is skipped."""
    outcomes = run_interleaved(
        [lambda: holder(db), lambda: waiter(db, 4.0)], ORDER, timeout=30, clock=clock
    )
    assert _value(outcomes[0]) == "committed"
    error, skipped = _value(outcomes[1])
    assert error == "database is locked"
    assert 3.9 <= skipped <= 4.0


def test_a_lock_released_by_another_thread_of_the_held_worker_is_waited_for(
    db: Path, clock: HarnessClock
) -> None:
    """The held worker's second thread waits with a timeout, then commits: the waiter must get
    the lock, as it does with every wait slept (skipped, it would fail "database is locked")."""
    holder, waiter = run_interleaved(
        [lambda: hold_and_commit_from_another_thread(db), lambda: wait_for_the_lock(db, 10.0)],
        ORDER,
        timeout=30,
        clock=clock,
    )
    assert _value(holder) == "committed"
    assert _value(waiter) == ("got the lock", 0.0)


def test_a_wait_that_would_reach_the_timeout_is_slept_and_times_out(
    db: Path, clock: HarnessClock
) -> None:
    """Skipping stops at half the worker's timeout and what was skipped is slept: a worker
    waiting longer than its timeout times out, as it does with every wait slept."""
    _, waiter = _run(db, clock, busy=20.0, timeout=2.0)
    assert isinstance(waiter, TimedOut), waiter


def test_the_plan_is_never_part_of_a_crash_state(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    plan = busywait.plan_path(clock.path)
    plan.write_text("1 0.0\n")
    (tmp_path / "ledger.sqlite3").write_bytes(b"x")
    reader = RunDirReader(tmp_path)
    try:
        names = [name for name, _ in reader.capture(Blobs()).files]
    finally:
        reader.close()
    assert "ledger.sqlite3" in names
    assert plan.name not in names
