"""The reference ledger across processes: two writers racing on one key, a writer killed in
the middle of a transaction, a connection inherited over fork."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pytest_crashpoints import Ledger, State
from tests.fakes import AUTH
from tests.unit.test_ledger import intent


def _insert_same_key(path: str, barrier_fd: int, key: str) -> None:
    # Wait for the start signal so both processes insert at the same moment.
    os.read(barrier_fd, 1)
    ledger = Ledger(path)
    _attempt, created = ledger.record_intent(
        task_id="t-1",
        tool_name="charge",
        args={"amount": 100},
        idempotency_key=key,
        authority=AUTH,
        actor=f"pid-{os.getpid()}",
    )
    os._exit(0 if created else 3)


def test_two_processes_inserting_the_same_key_make_exactly_one_attempt(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite3")
    for round_ in range(8):
        # Half the rounds race on creating the file too.
        if round_ % 2:
            with Ledger(path) as made:
                made.attempts()
        else:
            Path(path).unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(path + suffix).unlink(missing_ok=True)
        read_fd, write_fd = os.pipe()
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                os.close(write_fd)
                _insert_same_key(path, read_fd, f"charge:round-{round_}")
            pids.append(pid)
        os.close(read_fd)
        os.write(write_fd, b"go")
        os.close(write_fd)
        codes = sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids)
        assert codes == [0, 3]
        ledger = Ledger(path)
        assert len(ledger.attempts(task_id="t-1")) == (1 if round_ % 2 == 0 else 2)
        assert ledger.find(f"charge:round-{round_}") is not None
        ledger.close()


def test_sigkill_in_the_middle_of_a_transaction_leaves_nothing_half_written(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger(path)
    attempt, _ = intent(ledger)
    ledger.close()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        # Die after the UPDATE of the state, before the event row and the COMMIT.
        def die(*_args: object) -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        Ledger._log = staticmethod(die)  # type: ignore[method-assign, assignment]
        Ledger(path).transition(attempt.attempt_id, State.DISPATCHED, actor="w", reason="send")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    reopened = Ledger(path)
    try:
        assert reopened._connection().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert reopened.get(attempt.attempt_id) == attempt  # still INTENT_RECORDED
        assert [e.to_state for e in reopened.events()] == [State.INTENT_RECORDED]
        # And the ledger is writable again: no lock was left behind.
        moved = reopened.transition(
            attempt.attempt_id, State.DISPATCHED, actor="w2", reason="retry"
        )
        assert moved.state is State.DISPATCHED
    finally:
        reopened.close()


def test_connection_is_not_reused_across_fork(ledger: Ledger) -> None:
    intent(ledger)
    parent_conn = ledger._connection()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        ok = ledger._connection() is not parent_conn and len(ledger.attempts()) == 1
        os.write(write_fd, b"1" if ok else b"0")
        os._exit(0)
    os.close(write_fd)
    assert os.read(read_fd, 1) == b"1"
    os.close(read_fd)
    os.waitpid(pid, 0)
    assert ledger._connection() is parent_conn
