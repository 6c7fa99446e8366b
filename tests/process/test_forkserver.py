"""The fork server: workers forked from one pinned process keep every guarantee of a worker."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Kill, Pause
from pytest_crashpoints._process.clock import HARNESS_EPOCH
from pytest_crashpoints._process.forkserver import ForkServer, serving
from pytest_crashpoints._process.handle import live_worker_pids
from pytest_crashpoints._process.outcome import Completed, Died, Killed, Raised, TimedOut
from pytest_crashpoints._process.worker import run_worker, start_worker
from pytest_crashpoints.harness import HarnessClock

from .test_worker import (
    _read_worker_pid,
    child_pids,
    hang_with_a_grandchild,
    living_in_group,
    reaped,
    wait_gone,
)


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def whoami() -> tuple[int, int]:
    return os.getpid(), os.getppid()


def test_workers_are_forked_by_the_server_and_report_every_outcome(tmp_path: Path) -> None:
    with serving() as server:
        assert server is not None
        done = run_worker(whoami)
        assert isinstance(done, Completed)
        assert done.value[1] == server.pid  # the server forked it, not the harness

        killed = run_worker(lambda: crashpoint("A", tool="t"), faults=[Fault("A", Kill())])
        assert isinstance(killed, Killed)
        assert (killed.point, killed.hit, dict(killed.context)) == ("A", 1, {"tool": "t"})

        raised = run_worker(lambda: 1 / 0)
        assert isinstance(raised, Raised)
        assert raised.exc_type == "builtins.ZeroDivisionError"

        died = run_worker(lambda: os.kill(os.getpid(), signal.SIGTERM))
        assert isinstance(died, Died)
        assert died.signal == signal.SIGTERM

        exited = run_worker(lambda: os._exit(3))
        assert isinstance(exited, Died)
        assert exited.exitcode == 3
        assert live_worker_pids() == {server.pid}
    after = run_worker(os.getppid)  # the server is gone: started by the harness itself
    assert isinstance(after, Completed) and after.value == os.getpid()
    assert live_worker_pids() == frozenset()
    assert child_pids() == set()


def test_a_served_worker_that_hangs_times_out_with_its_whole_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    with serving() as server:
        assert server is not None
        worker = start_worker(hang_with_a_grandchild, args=(pid_file,), timeout=1.0)
        assert parent_of(worker.pid) == server.pid
        outcome = worker.wait()
        assert isinstance(outcome, TimedOut)
        assert wait_gone(int(pid_file.read_text()), timeout=5)
        assert living_in_group(worker.pid) == set()
    assert child_pids() == set()


def test_pause_and_release_through_the_server() -> None:
    def work() -> str:
        crashpoint("A")
        return "done"

    with serving(), start_worker(work, faults=[Fault("A", Pause("g"))], timeout=10) as worker:
        worker.wait_paused("g")
        worker.release("g")
        outcome = worker.wait()
    assert isinstance(outcome, Completed) and outcome.value == "done"


def now_and_after_a_point() -> tuple[datetime.datetime, float, datetime.datetime]:
    first = datetime.datetime.now(datetime.timezone.utc)
    stamp = time.time()
    crashpoint("A")  # the parent advanced the clock meanwhile: the pin follows it here
    return first, stamp, datetime.datetime.now(datetime.timezone.utc)


def test_served_workers_see_harness_time_each_their_own(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    with serving():
        for start in (5.0, 65.0, 3600.0):
            clock.set(start)
            worker = start_worker(
                now_and_after_a_point, clock=clock, faults=[Fault("A", Pause("g"))], timeout=10
            )
            worker.wait_paused("g")
            clock.advance(30)
            worker.release("g")
            outcome = worker.wait()
            assert isinstance(outcome, Completed)
            first, stamp, after = outcome.value
            # Wall time starts at harness time and moves on with real time (a few ms here).
            pinned = HARNESS_EPOCH + datetime.timedelta(seconds=start)
            assert datetime.timedelta(0) <= first - pinned < datetime.timedelta(seconds=1)
            assert 0 <= stamp - first.timestamp() < 1
            jumped = after - (pinned + datetime.timedelta(seconds=30))
            assert datetime.timedelta(0) <= jumped < datetime.timedelta(seconds=1)
    # The harness's own wall time was never pinned.
    assert abs(time.time() - datetime.datetime.now().timestamp()) < 60


def test_closures_travel_by_value_and_kept_objects_by_reference() -> None:
    numbers = (n for n in range(3))  # a generator cannot be pickled, even by dill

    def next_number() -> int:
        return next(numbers)

    greeting = "hello"
    with serving(keep=[next_number]) as server:
        assert server is not None
        by_value = run_worker(lambda: (greeting, os.getppid()))
        assert isinstance(by_value, Completed)
        assert by_value.value == ("hello", server.pid)
        # The lambda holds next_number in its closure: passed by reference, the generator is
        # never pickled, and each worker starts from the server's copy of it.
        for _ in range(2):
            kept = run_worker(lambda: (next_number(), os.getppid()))
            assert isinstance(kept, Completed)
            assert kept.value == (0, server.pid)

    with serving() as server:
        assert server is not None
        # Neither kept nor picklable: started directly by the harness, as without a server.
        fallback = run_worker(lambda: (next_number(), os.getppid()))
        assert isinstance(fallback, Completed)
        assert fallback.value == (0, os.getpid())


def test_serving_nests_and_the_outer_server_keeps_serving() -> None:
    with serving() as outer:
        with serving() as inner:
            assert inner is None
            outcome = run_worker(os.getppid)
        after = run_worker(os.getppid)  # the outer server still serves once the inner ends
    assert isinstance(outcome, Completed) and isinstance(after, Completed)
    assert outer is not None and outcome.value == outer.pid == after.value


def test_workers_die_with_a_killed_server_and_later_ones_start_directly() -> None:
    with serving() as server:
        assert server is not None
        worker = start_worker(lambda: threading.Event().wait(), timeout=30)
        os.kill(server.pid, signal.SIGKILL)
        assert wait_gone(worker.pid, timeout=5)  # PR_SET_PDEATHSIG tied to the server
        outcome = worker.kill()
        assert isinstance(outcome, Died)
        after = run_worker(os.getppid)
        assert isinstance(after, Completed)
        assert after.value == os.getpid()
    assert child_pids() == set()
    assert live_worker_pids() == frozenset()


def test_closing_the_server_kills_the_workers_still_running() -> None:
    server = ForkServer()
    try:
        worker = server.start_worker(
            threading.Event().wait,
            args=(),
            kwargs={},
            faults=(),
            timeout=30,
            clock_path=None,
            log_path=None,
        )
        assert worker is not None
    finally:
        server.close()
    assert wait_gone(worker.pid, timeout=5)
    worker.kill()
    assert child_pids() == set()


def test_a_killed_harness_takes_the_server_and_its_workers_along(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading
            from pytest_crashpoints._process.forkserver import serving
            from pytest_crashpoints._process.worker import start_worker

            if __name__ == "__main__":
                with serving() as server:
                    worker = start_worker(lambda: threading.Event().wait(), timeout=120)
                    print("SERVER", server.pid, flush=True)
                    print("WORKER", worker.pid, flush=True)
                    threading.Event().wait()
            """
        )
    )
    with reaped(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)) as proc:
        worker_pid = _read_worker_pid(proc, timeout=30)
        server_pid = parent_of(worker_pid)
        proc.kill()
        proc.wait(timeout=10)
        assert wait_gone(server_pid, timeout=5)
        assert wait_gone(worker_pid, timeout=5)


def write_intent(path: str, key: str) -> None:
    from pytest_crashpoints import Authority, Ledger

    ledger = Ledger(path, clock=lambda: 1.0)
    ledger.record_intent(
        task_id="t-1",
        tool_name="send_email",
        args={"n": key},
        idempotency_key=key,
        authority=Authority.of(tenant_id="t", credential_scope=["email:send"], policy_version="p1"),
        actor="w",
    )
    ledger.close()


def test_the_run_dir_copy_leaves_the_harness_connections_their_locks(tmp_path: Path) -> None:
    """Regression: copying the run directory in the harness process closed descriptors of its
    open SQLite files, which drops all of the process's POSIX locks on them. A worker that
    then closed the ledger took itself for its last user and deleted the WAL; the next one
    started a new WAL the harness's connection never saw: it read a stale snapshot for good.
    (Workers forked straight from the harness inherited its SQLite state and hid this.)"""
    from pytest_crashpoints import Ledger
    from pytest_crashpoints.harness import RunDir

    run = tmp_path / "run"
    run.mkdir()
    path = str(run / "ledger.sqlite3")
    mine = Ledger(path, clock=lambda: 1.0)
    with serving():
        assert isinstance(run_worker(write_intent, args=(path, "k1")), Completed)
        assert len(mine.attempts()) == 1  # the harness's connection is open from here on
        copy = RunDir(run).copy(run / "copy", timeout=10.0)
        seen = ["k1"]
        for key in ("k2", "k3", "k4"):
            assert isinstance(run_worker(write_intent, args=(path, key)), Completed)
            seen.append(key)
            assert [a.idempotency_key for a in mine.attempts()] == seen
    with Ledger(copy.ledger_path) as copied:
        assert [a.idempotency_key for a in copied.attempts()] == ["k1"]
    assert not (run / "copy" / "copy").exists()
    mine.close()


@pytest.mark.parametrize("start_method", ["spawn"])
def test_spawn_workers_never_go_through_the_server(start_method: str) -> None:
    with serving():
        outcome = run_worker(os.getppid, start_method=start_method)  # type: ignore[arg-type]
    assert isinstance(outcome, Completed)
    assert outcome.value == os.getpid()


def test_a_spawn_scenario_runs_without_a_fork_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    from pytest_crashpoints.harness import Deliver, KillAt, Schedule, run_case
    from tests.cases.test_broken_on_purpose import scenario

    def no_server(*args: object, **kwargs: object) -> None:
        raise AssertionError("a spawn scenario started a fork server")

    monkeypatch.setattr(ForkServer, "__init__", no_server)
    spawned = dataclasses.replace(scenario(), start_method="spawn")
    result = run_case(spawned, Schedule((Deliver(0, KillAt("B")),)), base_dir=tmp_path)
    assert result.passed, [str(v) for v in result.violations] + list(result.errors)
    assert result.kills == ("B#1",)
    assert child_pids() == set()


def test_a_request_the_server_cannot_unpickle_is_started_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with serving() as server:
        assert server is not None

        class _Late:  # defined after the server forked: its copy of this module lacks it
            pass

        _Late.__module__, _Late.__qualname__ = __name__, "_Late"
        monkeypatch.setattr(sys.modules[__name__], "_Late", _Late, raising=False)
        outcome = run_worker(os.getppid, kwargs={}, args=())
        assert isinstance(outcome, Completed) and outcome.value == server.pid
        late = run_worker(lambda value: os.getppid(), args=(_Late(),))
        assert isinstance(late, Completed)
        assert late.value == os.getpid()  # the server answered "error": started directly
        assert server.reap(os.getpid()) is None  # not its child: nothing to tell, no crash
        again = run_worker(os.getppid)
        assert isinstance(again, Completed) and again.value == server.pid
