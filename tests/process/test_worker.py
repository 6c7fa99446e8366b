"""The worker runner: real subprocesses, real SIGKILLs, structured outcomes, nothing left behind."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Count, Fault, Kill, Pause, Raise
from pytest_crashpoints._process.handle import live_worker_pids
from pytest_crashpoints._process.outcome import Completed, Died, Killed, Raised, TimedOut
from pytest_crashpoints._process.worker import run_worker, start_worker
from pytest_crashpoints.errors import HarnessUsageError, WorkerNotPaused
from pytest_crashpoints.harness import RunDir

POINTS = ["A", "B", "C", "D", "ledger.write", "my.own.point"]


def child_pids() -> set[int]:
    """Live (non-zombie counts too) children of this process, from /proc."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: split after the last ')'.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me:
            found.add(int(entry))
    try:
        from multiprocess import resource_tracker

        tracker = resource_tracker._resource_tracker._pid
    except (ImportError, AttributeError):
        tracker = None
    # The spawn start method's resource tracker is a long-lived helper, not a worker.
    found.discard(tracker)  # type: ignore[arg-type]
    return found


def living_in_group(pgid: int) -> set[int]:
    """Processes of group ``pgid`` that are not zombies (killed ones init has not reaped yet)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            found.add(int(entry))
    return found


def wait_gone(pid: int, timeout: float) -> bool:
    """Block (no polling) until process ``pid`` has ended, or ``timeout`` passes."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def worker_with_cleanup(point: str, directory: str) -> str:
    base = Path(directory)
    atexit.register(lambda: (base / "atexit-ran").write_text("x"))
    try:
        crashpoint(point, tool="send_email")
        return "passed the point"
    finally:
        (base / "finally-ran").write_text("x")


@pytest.mark.parametrize("point", POINTS)
def test_kill_skips_finally_and_atexit(point: str, tmp_path: Path) -> None:
    outcome = run_worker(
        worker_with_cleanup, args=(point, str(tmp_path)), faults=[Fault(point, Kill())]
    )
    assert isinstance(outcome, Killed)
    assert (outcome.point, outcome.hit, outcome.fired_at) == (point, 1, point)
    assert outcome.context == {"tool": "send_email"}
    assert not (tmp_path / "finally-ran").exists()
    assert not (tmp_path / "atexit-ran").exists()


@pytest.mark.parametrize("point", POINTS)
def test_exception_at_a_point_is_raised_not_killed(point: str, tmp_path: Path) -> None:
    outcome = run_worker(
        worker_with_cleanup,
        args=(point, str(tmp_path)),
        faults=[Fault(point, Raise(ConnectionResetError("peer went away")))],
    )
    assert isinstance(outcome, Raised)
    assert outcome.exc_type == "builtins.ConnectionResetError"
    assert outcome.message == "peer went away"
    assert "worker_with_cleanup" in outcome.traceback
    assert outcome.injected_at == (point, 1)
    assert (tmp_path / "finally-ran").exists()


def test_kill_under_spawn_skips_atexit_that_a_clean_exit_runs(tmp_path: Path) -> None:
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    killed_dir.mkdir()
    clean_dir.mkdir()
    killed = run_worker(
        worker_with_cleanup,
        args=("A", str(killed_dir)),
        faults=[Fault("A", Kill())],
        start_method="spawn",
    )
    clean = run_worker(worker_with_cleanup, args=("A", str(clean_dir)), start_method="spawn")
    assert isinstance(killed, Killed)
    assert not (killed_dir / "atexit-ran").exists()
    assert isinstance(clean, Completed)
    # The control: a spawned worker that ends normally does run its atexit handlers.
    assert (clean_dir / "atexit-ran").exists()


def test_completed_reports_value_and_every_hit() -> None:
    def work(n: int) -> list[int]:
        for i in range(n):
            crashpoint("step", i=i, obj=object)
        return list(range(n))

    outcome = run_worker(work, args=(3,), faults=[Fault("step", Count(), hit=None)])
    assert isinstance(outcome, Completed)
    assert outcome.value == [0, 1, 2]
    assert [(h.point, h.n, h.context["i"]) for h in outcome.hits] == [
        ("step", 1, 0),
        ("step", 2, 1),
        ("step", 3, 2),
    ]
    assert outcome.hits[0].context["obj"] == repr(object)
    assert outcome.matched == (3,)


def test_kill_on_the_nth_matching_hit_only() -> None:
    def work() -> None:
        for tool in ["a", "send_email", "b", "send_email", "send_email"]:
            crashpoint("A", tool=tool)

    fault = Fault("A", Kill(), hit=2, when={"tool": "send_email"})
    outcome = run_worker(work, faults=[fault])
    assert isinstance(outcome, Killed)
    assert (outcome.point, outcome.hit, outcome.context) == ("A", 4, {"tool": "send_email"})
    assert outcome.matched == (2,)


def test_spawn_runs_a_closure_over_a_local() -> None:
    secret = {"greeting": "hello"}
    factor = 7

    outcome = run_worker(
        lambda: f"{secret['greeting']} {factor * 6}", start_method="spawn", timeout=30
    )
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == "hello 42"


def hang_with_a_grandchild(pid_file: Path) -> None:
    """A worker that never ends, with a grandchild in its process group (asleep until killed)
    whose pid it writes to ``pid_file``: to show that the whole group goes."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid_file.write_text(str(child.pid))
    threading.Event().wait()


def test_hanging_worker_times_out_and_its_group_is_gone(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    worker = start_worker(hang_with_a_grandchild, args=(pid_file,), timeout=1.0)
    began = time.monotonic()
    outcome = worker.wait()
    elapsed = time.monotonic() - began
    assert isinstance(outcome, TimedOut)
    assert 1.0 <= outcome.after < 1.0 + 1.0
    assert elapsed < 1.0 + 1.0
    assert worker.pid not in child_pids()
    assert worker.pid not in live_worker_pids()
    # The grandchild was killed with the group; init reaps it, so wait for that, briefly.
    assert wait_gone(int(pid_file.read_text()), timeout=5)
    assert living_in_group(worker.pid) == set()


_CPU_WAIT = """
import json, os, subprocess, sys, time
from pytest_crashpoints._process.worker import run_worker

cpu = min(os.sched_getaffinity(0))
spin = f"import os\\nos.sched_setaffinity(0, {{{cpu}}})\\nwhile True:\\n    pass\\n"
busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(15)]


def burn():
    os.sched_setaffinity(0, {cpu})
    # CPU time measured exactly (the scheduler's own count). Not os.times().user: Linux splits
    # a process's time between user and system by sampling at its timer tick, and with sixteen
    # processes on one core the samples could all land in the kernel, the user time staying
    # at zero while the worker ran seconds.
    end = time.process_time() + 0.2
    while time.process_time() < end:
        for _ in range(100_000):  # the CPU time is spent here, not in the clock call
            pass


try:
    outcome = run_worker(burn, timeout=3.0)
finally:
    for process in busy:
        process.kill()
        process.wait()
print(json.dumps([outcome.kind, outcome.duration, repr(outcome)]))
"""


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/schedstat").exists(), reason="Linux schedstat is needed"
)
def test_time_spent_waiting_for_a_cpu_does_not_count_against_the_timeout() -> None:
    """A busy machine delays a worker, it does not hang it: fifteen CPU-bound processes
    share one core with the worker, which needs 0.2 s of CPU and so takes 3.2 s of wall time
    or more; its timeout of 3 s counts only the time it could run.

    The harness forks the worker from a small, fresh Python process here. Forked from this
    test's own process (a pytest worker that has run hundreds of tests), the child paid
    seconds of its own CPU copying the parent's pages on write before it burned anything:
    real time of the worker, which its timeout rightly counts, and which made the test time
    out on a loaded CI runner (TimedOut after 47 s, 44 s stalled)."""
    done = subprocess.run(
        [sys.executable, "-c", _CPU_WAIT], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    kind, duration, shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert kind == "completed", shown
    assert duration > 3.0, shown  # longer than its timeout, in wall time


def test_many_killed_runs_leave_no_children_and_no_passing_run_dirs(tmp_path: Path) -> None:
    def work(run_dir: str) -> None:
        Path(run_dir, "ledger.sqlite3").write_text("intent")
        crashpoint("A")

    base = tmp_path / "runs"
    failing = set(range(0, 500, 100))
    for i in range(500):
        expect_failure = pytest.raises(AssertionError) if i in failing else _nothing()
        with expect_failure, RunDir.create(base, f"tests/test_x.py::case[{i}]") as run_dir:
            outcome = run_worker(work, args=(str(run_dir.path),), faults=[Fault("A")])
            assert isinstance(outcome, Killed)
            assert i not in failing, "a failing case"
    assert child_pids() == set()
    assert live_worker_pids() == frozenset()
    kept = sorted(base.iterdir())
    assert len(kept) == len(failing)
    assert all((path / "ledger.sqlite3").read_text() == "intent" for path in kept)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_pause_and_release() -> None:
    def work() -> str:
        crashpoint("A")
        crashpoint("B")
        return "done"

    with start_worker(work, faults=[Fault("B", Pause("at-b"))], timeout=10) as worker:
        worker.wait_paused("at-b")
        assert worker.paused_at == {"at-b"}
        worker.release("at-b")
        outcome = worker.wait()
    assert isinstance(outcome, Completed)
    assert outcome.value == "done"


def test_waiting_for_a_gate_the_worker_never_reaches() -> None:
    worker = start_worker(lambda: 1, faults=[Fault("never", Pause("g"))], timeout=10)
    with pytest.raises(WorkerNotPaused, match="without reaching gate 'g'") as info:
        worker.wait_paused("g")
    assert isinstance(info.value.outcome, Completed)
    with pytest.raises(WorkerNotPaused, match="not paused at gate 'g'"):
        worker.release("g")


def test_leaving_the_block_kills_a_paused_worker() -> None:
    with start_worker(lambda: crashpoint("A"), faults=[Fault("A", Pause("g"))]) as worker:
        worker.wait_paused("g")
    assert isinstance(worker.outcome, Died)
    assert worker.outcome.signal == signal.SIGKILL
    assert worker.pid not in child_pids()


def test_worker_killed_from_outside_died() -> None:
    outcome = run_worker(lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert isinstance(outcome, Died)
    assert outcome.signal == signal.SIGTERM


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan")])
def test_every_run_needs_a_finite_timeout(timeout: float) -> None:
    with pytest.raises(HarnessUsageError, match="timeout"):
        start_worker(lambda: None, timeout=timeout)


INNER_TEST = """
    import contextlib
    import threading
    from pytest_crashpoints._process.forkserver import serving
    from pytest_crashpoints._process.worker import start_worker

    def hang():
        threading.Event().wait()

    def test_long():
        with serving() if {served} else contextlib.nullcontext():
            worker = start_worker(hang, timeout=120)
            print("WORKER", worker.pid, flush=True)
            if {blocked_in_wait}:
                worker.wait()
            else:
                threading.Event().wait()
"""


# Registered before the harness is imported, so it runs after the harness's own exit hook
# (atexit is LIFO) and before the kernel's PR_SET_PDEATHSIG could kill anything: it sees what
# the harness itself left behind.
INNER_CONFTEST = """
    import atexit, os

    def report_children():
        me = os.getpid()
        alive = []
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] not in ("Z", "X"):
                alive.append(int(entry))
        print("CHILDREN-AT-EXIT", alive, flush=True)

    atexit.register(report_children)
"""


@pytest.mark.parametrize("served", [False, True], ids=["forked", "from-the-fork-server"])
@pytest.mark.parametrize("blocked_in_wait", [True, False], ids=["in-wait", "in-test-body"])
def test_sigint_to_the_parent_leaves_no_worker(
    pytester: pytest.Pytester, blocked_in_wait: bool, served: bool
) -> None:
    pytester.makeconftest(textwrap.dedent(INNER_CONFTEST))
    test_file = pytester.makepyfile(
        textwrap.dedent(INNER_TEST.format(blocked_in_wait=blocked_in_wait, served=served))
    )
    inner = pytester.popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-s",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:crashpoints",
            str(test_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # Ctrl-C's default: a shell's background job (`make test &`) ignores SIGINT, and
        # Python then never installs its KeyboardInterrupt handler in the child.
        preexec_fn=_default_sigint,
    )
    with reaped(inner) as proc:
        worker_pid = _read_worker_pid(proc, timeout=30)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        rest = _read_output(proc, timeout=10)
        assert b"CHILDREN-AT-EXIT []" in rest, rest.decode()
        assert wait_gone(worker_pid, timeout=5)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_output(
    proc: subprocess.Popen[bytes],
    *,
    timeout: float,
    until: Callable[[bytes], object] = lambda seen: False,
) -> bytes:
    """What ``proc`` writes to its stdout until ``until(what was read so far)`` is true, it
    closes its stdout, or ``timeout`` seconds pass."""
    # Raw reads: a buffered readline could hold the line in its buffer while select() waits.
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = b""
    while not until(seen) and (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        if not readable:
            break
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        seen += chunk
    return seen


_WORKER_LINE = re.compile(rb"WORKER (\d+)\n")


def _read_worker_pid(proc: subprocess.Popen[bytes], *, timeout: float) -> int:
    seen = _read_output(proc, timeout=timeout, until=_WORKER_LINE.search)
    found = _WORKER_LINE.search(seen)
    if found is None:
        raise AssertionError(f"the inner pytest never started its worker; output:\n{seen.decode()}")
    return int(found.group(1))


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """``proc`` (started with its stdout on a pipe), killed and reaped on the way out, whatever
    happened, and its pipe closed."""
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_a_killed_parent_takes_its_workers_along(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import threading
            from pytest_crashpoints._process.worker import start_worker

            if __name__ == "__main__":
                worker = start_worker(lambda: threading.Event().wait(), timeout=120)
                print("WORKER", worker.pid, flush=True)
                threading.Event().wait()
            """
        )
    )
    with reaped(subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)) as proc:
        worker_pid = _read_worker_pid(proc, timeout=30)
        proc.kill()
        proc.wait(timeout=10)
        assert wait_gone(worker_pid, timeout=5)


def test_a_callable_that_cannot_cross_a_spawn_is_a_clear_error() -> None:
    from pytest_crashpoints.errors import HarnessError

    numbers = (n for n in range(3))
    with pytest.raises(HarnessError, match="must be picklable by dill"):
        start_worker(lambda: next(numbers), start_method="spawn")
    assert live_worker_pids() == frozenset()


def test_worker_output_goes_to_its_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "worker.log"
    log.parent.mkdir()

    def chatty() -> None:
        print("flushed before the kill", flush=True)
        print("still in the buffer", file=sys.stderr, end="")
        os.write(2, b"raw stderr\n")
        crashpoint("A")

    outcome = run_worker(chatty, faults=[Fault("A")], log=log)
    assert isinstance(outcome, Killed)
    assert log.read_text().splitlines() == ["flushed before the kill", "raw stderr"]


def test_a_worker_that_ended_before_its_deadline_is_not_timed_out_by_a_late_harness() -> None:
    """The harness itself may be starved of a CPU: when it looks only after the deadline, a
    worker that ended (and reported) in time has ended in time, not timed out."""
    worker = start_worker(lambda: "done", timeout=0.5)
    try:
        time.sleep(1.5)  # the harness looks late: the worker ended long before its deadline
        outcome = worker.wait()
    finally:
        worker.kill()
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == "done"
