"""A worker's waits move the case's clock, and cost no real time where nothing real needs it.

Each skipped wait here is an hour (or more): were it slept, the worker would time out and the
test fail; no test measures real time. Each wait that must be real says why in the wait log,
and moves the clock with real time.
"""

from __future__ import annotations

import asyncio
import os
import queue
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Pause
from pytest_crashpoints._process import process_clock, waits
from pytest_crashpoints._process.clock import HARNESS_EPOCH
from pytest_crashpoints._process.forkserver import serving
from pytest_crashpoints._process.interleaving import run_interleaved
from pytest_crashpoints._process.outcome import Completed, Outcome, Raised
from pytest_crashpoints._process.worker import run_worker, start_worker
from pytest_crashpoints.harness import HarnessClock

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="which waits can be skipped is read in /proc"
)

HOUR = 3600.0
STEP = HOUR + waits.OVERSHOOT  # what a skipped hour moves the clocks


@pytest.fixture(params=["direct", "served"])
def clock(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HarnessClock]:
    """A harness clock for the workers of a test, started directly or by the fork server."""
    if request.param == "served":
        with serving():
            yield HarnessClock(tmp_path / "clock")
    else:
        yield HarnessClock(tmp_path / "clock")


def _value(outcome: Outcome) -> Any:
    assert isinstance(outcome, Completed), outcome
    return outcome.value


def _log(clock: HarnessClock) -> list[waits.WaitRecord]:
    return waits.read_log(waits.log_path(clock.path))[0]


def _run(fn: Callable[[], object], clock: HarnessClock, timeout: float = 60) -> Any:
    return _value(run_worker(fn, clock=clock, timeout=timeout))


# -- skipped: the wait returns at once, every clock moved by it -------------------------------


def sleeps_an_hour() -> tuple[float, float, float]:
    from time import sleep  # bound before anything could patch the module's attribute

    wall, mono, perf = time.time(), time.monotonic(), time.perf_counter()
    sleep(HOUR)
    return time.time() - wall, time.monotonic() - mono, time.perf_counter() - perf


def test_time_sleep_is_skipped_and_moves_every_clock(clock: HarnessClock) -> None:
    wall, mono, perf = _run(sleeps_an_hour, clock)
    assert mono == pytest.approx(STEP, abs=1e-9) and perf == pytest.approx(STEP, abs=1e-9)
    assert wall == pytest.approx(STEP, abs=1e-6)
    assert clock.now() == pytest.approx(STEP, abs=1e-9)  # what the providers see next
    [record] = _log(clock)
    assert (record["what"], record["why"], record["seconds"]) == ("time.sleep", None, STEP)


async def asyncio_waits() -> tuple[float, float, str]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(HOUR)
    fired = loop.create_future()
    loop.call_later(HOUR, fired.set_result, "called later")
    said = await fired
    try:
        await asyncio.wait_for(asyncio.Event().wait(), timeout=HOUR)
    except asyncio.TimeoutError:
        said += ", timed out"
    return loop.time() - start, time.monotonic() - start, said


def test_an_event_loops_timers_are_skipped(clock: HarnessClock) -> None:
    on_loop, monotonic, said = _run(lambda: asyncio.run(asyncio_waits()), clock)
    assert said == "called later, timed out"
    assert on_loop == pytest.approx(3 * STEP, abs=1e-6)
    assert monotonic == pytest.approx(on_loop, abs=1e-9)  # the loop's clock is monotonic()
    assert clock.now() == pytest.approx(3 * STEP, abs=1e-6)
    assert [r["why"] for r in _log(clock)] == [None, None, None]


def timed_waits() -> list[object]:
    start = time.monotonic()
    seen: list[object] = [threading.Event().wait(HOUR)]
    condition = threading.Condition()
    with condition:
        seen.append(condition.wait(HOUR))
    try:
        queue.Queue().get(timeout=HOUR)
    except queue.Empty:
        seen.append("empty")
    seen.append(threading.Semaphore(0).acquire(timeout=HOUR))
    seen.append(time.monotonic() - start)
    return seen


def test_timed_waits_of_threading_and_queue_are_skipped(clock: HarnessClock) -> None:
    event, condition, got, semaphore, waited = _run(timed_waits, clock)
    assert (event, condition, got, semaphore) == (False, False, "empty", False)
    assert waited == pytest.approx(4 * STEP, abs=1e-6)
    assert all(r["why"] is None for r in _log(clock))


def selects_on_its_own_pair() -> tuple[list[object], float]:
    mine, other = socket.socketpair()
    with selectors.DefaultSelector() as selector:
        selector.register(mine, selectors.EVENT_READ)
        start = time.monotonic()
        ready = selector.select(HOUR)  # only this process could write to ``other``
        waited = time.monotonic() - start
        other.send(b"x")
        return [ready, selector.select(HOUR) != []], waited


def test_a_select_only_this_process_could_end_is_skipped(clock: HarnessClock) -> None:
    (ready, then_ready), waited = _run(selects_on_its_own_pair, clock)
    assert ready == [] and then_ready is True  # data there: returned at once, no wait
    assert waited == pytest.approx(STEP, abs=1e-9)
    assert len(_log(clock)) == 1


def test_the_same_waits_give_the_same_times_every_run(tmp_path: Path) -> None:
    """Determinism: the same waits, the same timestamps (wall, loop, harness), every run."""

    def stamps() -> tuple[float, ...]:
        time.sleep(1.5)
        sum(range(100_000))
        on_loop = asyncio.run(asyncio_waits())[0]
        # monotonic() keeps its real origin (it never goes back against a reading taken before
        # the worker began): durations on it are exact to the nanosecond.
        return time.time(), round(on_loop, 9), 0.0

    seen = set()
    for run in range(3):
        clock = HarnessClock(tmp_path / f"clock-{run}")
        wall, on_loop, _ = _run(stamps, clock)
        seen.add((wall, on_loop, clock.now()))
    assert len(seen) == 1, seen
    [(wall, _, harness)] = seen
    assert wall == HARNESS_EPOCH.timestamp() + harness


# -- real: something could act during the wait -------------------------------------------------


def sleeps_beside_a_thread() -> float:
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [time.sleep(0.001) for _ in range(10_000)
                                              if not stop.is_set()])
    thread.start()
    start = time.monotonic()
    time.sleep(0.05)
    waited = time.monotonic() - start
    stop.set()
    thread.join()
    return waited


def test_a_wait_another_thread_could_end_is_real(clock: HarnessClock) -> None:
    """Real, and the clock moves by its length: what the process's own thread computes
    meanwhile is no time, and the thread's own waits, at the same time, are not added."""
    waited = _run(sleeps_beside_a_thread, clock)
    # At least its length: the thread's own 1 ms sleeps, one after another meanwhile, move
    # the same clock (each from where it began), about as far as real time went.
    assert waited >= 0.05
    mine = [r for r in _log(clock) if r["seconds"] == 0.05]
    assert mine and "another thread" in mine[0]["why"] and mine[0]["real"] is False
    assert clock.now() >= 0.05


def sleeps_beside_a_child() -> str:
    child = subprocess.Popen(["sleep", "5"])
    try:
        time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    return str(child.pid)


def test_a_wait_a_child_process_could_end_is_real(clock: HarnessClock) -> None:
    pid = _run(sleeps_beside_a_child, clock)
    record = next(r for r in _log(clock) if r["what"] == "time.sleep")
    assert record["why"] == f"a child process (pid {pid}) can move" and not record["real"]


SERVER = """
import socket, sys, time
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(1)
print("listening", flush=True)
connection, _ = server.accept()
time.sleep(0.5)  # the server's own work, in real time
connection.sendall(b"ready")
connection.recv(1)
"""


@pytest.fixture
def real_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A server in a process of its own that is ready half a second of real time after a
    client connects."""
    path = str(tmp_path / "server.sock")
    server = subprocess.Popen([sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE,
                              text=True)
    assert server.stdout is not None
    with server.stdout:
        try:
            assert server.stdout.readline() == "listening\n"
            yield path, server.pid
        finally:
            server.kill()
            server.wait(timeout=10)


def polls_until_ready(path: str) -> tuple[str, int]:
    """Poll a real server every 10 ms until a 2 s deadline: in virtual time the loop would
    pass its deadline long before the server had had real time to get ready."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(path)
        connection.setblocking(False)
        deadline = time.monotonic() + 2.0
        polls = 0
        while time.monotonic() < deadline:
            try:
                return connection.recv(5).decode(), polls
            except BlockingIOError:
                polls += 1
                time.sleep(0.01)
        return "gave up", polls


def test_a_poll_of_a_real_server_waits_real_time(
    clock: HarnessClock, real_server: tuple[str, int]
) -> None:
    path, pid = real_server
    said, polls = _run(lambda: polls_until_ready(path), clock)
    assert said == "ready"
    record = _log(clock)[0]
    assert record["why"].startswith(f"a connection to pid {pid}") and record["real"] is True
    # The server took real time, and the case's clock moved with it (the providers' view).
    assert clock.now() >= polls * 0.01


def sends_to_itself_over_a_pair_in_another_process(path: str) -> str:
    """An event loop waiting on a socket another process writes to is woken by it."""

    async def main() -> str:
        reader, writer = await asyncio.open_unix_connection(path)
        got = await asyncio.wait_for(reader.read(5), timeout=HOUR)
        writer.write(b"x")
        writer.close()
        return got.decode()

    return asyncio.run(main())


def test_an_event_loop_waiting_on_another_process_is_not_skipped(
    clock: HarnessClock, real_server: tuple[str, int]
) -> None:
    path, _ = real_server
    assert _run(lambda: sends_to_itself_over_a_pair_in_another_process(path), clock) == "ready"
    assert all(r["why"] is not None for r in _log(clock))


def sleeps_while_a_twin_runs() -> float:
    crashpoint("D")
    start = time.monotonic()
    time.sleep(HOUR)
    return time.monotonic() - start


def test_a_worker_alone_in_an_interleaving_skips_and_one_running_beside_another_does_not(
    tmp_path: Path,
) -> None:
    clock = HarnessClock(tmp_path / "clock")
    # Both are held at D; then worker 0 runs alone to its end (its hour is skipped), and
    # worker 1 alone after it.
    first, second = run_interleaved(
        [sleeps_while_a_twin_runs, sleeps_while_a_twin_runs],
        [(1, "D"), (0, "D"), (0, None), (1, None)],
        clock=clock,
        timeout=60,
    )
    assert _value(first) == pytest.approx(STEP, abs=1e-9)
    assert _value(second) == pytest.approx(STEP, abs=1e-9)
    assert [r["why"] for r in _log(clock)] == [None, None]
    assert not (tmp_path / "clock.runner").exists()  # the plan is gone with the interleaving


def sleeps_a_moment() -> None:
    time.sleep(0.02)


def test_two_workers_running_at_once_wait_for_real(tmp_path: Path) -> None:
    clock = HarnessClock(tmp_path / "clock")
    outcomes = run_interleaved([sleeps_a_moment, sleeps_a_moment], [], clock=clock, timeout=60)
    assert all(isinstance(o, Completed) for o in outcomes)
    assert [r["why"] for r in _log(clock)] == ["another process of the case runs"] * 2


def test_the_switch_makes_every_wait_real_with_the_same_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(waits.REAL_WAITS_ENV, "1")
    clock = HarnessClock(tmp_path / "clock")
    waited = _run(lambda: (time.sleep(0.05), time.monotonic())[1] - 0, clock)
    assert waited is not None
    [record] = _log(clock)
    assert record["why"] == f"{waits.REAL_WAITS_ENV} is set" and not record["real"]
    assert clock.now() == pytest.approx(0.05 + waits.OVERSHOOT, abs=1e-9)  # as if skipped


def test_past_the_bound_waits_are_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waits, "SKIP_BOUND", 10.0)  # the worker is forked with it
    clock = HarnessClock(tmp_path / "clock")
    _run(lambda: [time.sleep(s) for s in (5.0, 4.0, 1.5)], clock)
    assert [r["why"] is None for r in _log(clock)] == [True, True, False]


# -- the worker's clock ----------------------------------------------------------------------


def blocks_where_nobody_sees(seconds: float) -> tuple[float, float]:
    import select

    start = time.monotonic()
    sum(range(100_000))
    computed = time.monotonic() - start
    select.select([], [], [], seconds)  # a wait in C, not seen: only the grace moves the clock
    crashpoint("after")  # a fail point syncs with harness time: which does not follow the grace
    return computed, time.monotonic() - start


def test_a_still_clock_moves_with_real_time_after_the_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_clock, "_GRACE_NS", 100_000_000)  # 0.1 s, for the test
    clock = HarnessClock(tmp_path / "clock")
    computed, after = _run(lambda: blocks_where_nobody_sees(0.3), clock)
    assert computed == 0.0  # computing takes no time on the clock
    assert after >= 0.2  # past the grace, real time moves it
    assert clock.now() == 0.0  # the worker's own: what the providers see did not move


def held_at_a_gate() -> float:
    start = time.monotonic()
    crashpoint("gate")
    return time.monotonic() - start


def test_a_held_worker_finds_harness_time_not_the_real_time_it_was_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_clock, "_GRACE_NS", 200_000_000)  # 0.2 s, for the test
    clock = HarnessClock(tmp_path / "clock")
    with start_worker(held_at_a_gate, faults=[Fault("gate", Pause("g"))], clock=clock,
                      timeout=60) as worker:
        worker.wait_paused("g")
        time.sleep(0.8)  # held four times the grace: the behaviour under test
        worker.release("g")
        moved = _value(worker.wait())
    # Harness time did not move, and the 0.8 s it was held is not the world's (a clock
    # that went on standing still would have leaked 0.6 s of it).
    assert moved < 0.3
    assert clock.now() == 0.0


def raises_what_sleep_raises() -> list[str]:
    seen = []
    for bad in (-1, "a", float("nan")):
        try:
            time.sleep(bad)  # type: ignore[arg-type]
        except (ValueError, TypeError) as exc:
            seen.append(type(exc).__name__)
    return seen


def test_a_sleep_refuses_what_the_real_one_refuses(clock: HarnessClock) -> None:
    assert _run(raises_what_sleep_raises, clock) == ["ValueError", "TypeError", "ValueError"]


def test_without_a_clock_every_wait_and_clock_is_real(tmp_path: Path) -> None:
    def readings() -> float:
        return abs(time.monotonic() - time.clock_gettime(time.CLOCK_MONOTONIC))

    assert _value(run_worker(readings, timeout=60)) < 0.5
    outcome = run_worker(lambda: time.sleep(HOUR), timeout=0.5)
    assert not isinstance(outcome, (Completed, Raised))  # slept for real, and timed out


def test_the_harness_process_is_never_patched() -> None:
    assert waits.install.__module__ == "pytest_crashpoints._process.waits"
    assert not process_clock.armed()
    assert time.sleep.__self__ is time  # type: ignore[attr-defined]
    assert abs(time.monotonic() - time.clock_gettime(time.CLOCK_MONOTONIC)) < 0.5
    assert os.getpid() == os.getpid()


def looks_like_the_builtin() -> list[object]:
    import pickle

    return [repr(time.sleep), pickle.loads(pickle.dumps(time.sleep)) is time.sleep,
            time.sleep.__name__, time.sleep.__module__, threading._time is time.monotonic]


def test_the_replaced_builtins_still_look_and_pickle_as_themselves(clock: HarnessClock) -> None:
    assert _run(looks_like_the_builtin, clock) == [
        "<built-in function sleep>", True, "sleep", "time", True,
    ]


def selects_on_its_own_pipe() -> float:
    read, _write = os.pipe()  # both ends held: only this process could write
    with selectors.DefaultSelector() as selector:
        selector.register(read, selectors.EVENT_READ)
        start = time.monotonic()
        assert selector.select(HOUR) == []
        return time.monotonic() - start


def test_a_select_on_a_pipe_whose_both_ends_it_holds_is_skipped(clock: HarnessClock) -> None:
    assert _run(selects_on_its_own_pipe, clock) == pytest.approx(STEP, abs=1e-9)


@pytest.fixture
def slow_server() -> Iterator[tuple[str, int]]:
    """A server in this (the harness's) process that answers a request after 0.3 s of real
    time, as a fake provider that takes its time does."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with server:
            connection, _ = server.accept()
            with connection:
                connection.recv(5)
                time.sleep(0.3)  # the provider's own latency, in real time: under test
                connection.sendall(b"hello")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield "127.0.0.1", server.getsockname()[1]
    thread.join(timeout=10)


def asks_a_provider(address: tuple[str, int], of_the_case: bool) -> tuple[str, float, float]:
    if of_the_case:
        waits.world([address])  # what the harness tells a worker of its providers' servers

    async def main() -> tuple[str, float, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        reader, writer = await asyncio.open_connection(*address)
        writer.write(b"hello")
        answer = await asyncio.wait_for(reader.read(5), timeout=HOUR)
        writer.close()
        return answer.decode(), loop.time() - start, time.time()

    return asyncio.run(main())


def test_a_request_in_flight_to_the_cases_provider_is_waited_for_and_costs_no_time(
    clock: HarnessClock, slow_server: tuple[str, int]
) -> None:
    """The loop waits for the answer for real (it is not skipped: the provider answers), and
    the provider's 0.3 s of real latency is no time in the case: the clock stays put."""
    said, moved, wall = _run(lambda: asks_a_provider(slow_server, True), clock)
    assert said == "hello"
    assert moved == 0.0 and wall == HARNESS_EPOCH.timestamp()
    assert all(r["real"] is False for r in _log(clock))


def test_the_same_request_to_a_server_not_of_the_case_runs_on_real_time(
    clock: HarnessClock, slow_server: tuple[str, int]
) -> None:
    """Unnamed, the same server is a real one: the clock moves with real time meanwhile."""
    said, moved, _ = _run(lambda: asks_a_provider(slow_server, False), clock)
    assert said == "hello"
    assert moved >= 0.2  # most of the server's 0.3 s (it began before the loop waited)
    assert any(r["real"] and r["why"].startswith("a connection to 127.0.0.1:")
               for r in _log(clock))


def sleeps_while_a_thread_finishes() -> tuple[float, list[object]]:
    spinning = threading.Event()

    def spin() -> None:  # busy for a second of real time, then gone
        spinning.set()
        until = time.clock_gettime(time.CLOCK_MONOTONIC) + 1.0
        while time.clock_gettime(time.CLOCK_MONOTONIC) < until:
            pass

    thread = threading.Thread(target=spin)
    thread.start()
    spinning.wait()
    start = time.monotonic()
    time.sleep(HOUR)
    thread.join()
    return time.monotonic() - start, []


def test_a_real_wait_is_skipped_from_the_moment_nothing_else_can_act(
    clock: HarnessClock,
) -> None:
    """Begun while a thread of the process works, the hour is real; once the thread is done,
    the rest is skipped (slept, it would time the worker out). The clock moves by the hour."""
    waited, _ = _run(sleeps_while_a_thread_finishes, clock)
    assert waited == pytest.approx(STEP, abs=1e-6)
    real, rest = _log(clock)
    assert "another thread" in real["why"] and rest["why"] is None
    assert rest["seconds"] > HOUR - 60


def sleeps_beside_its_own_server() -> float:
    """A server of the worker's own in a thread (as an MCP server served over HTTP by its
    worker) and the worker's client connected to it: both ends are this process's."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    done = threading.Event()

    def serve() -> None:
        connection, _ = server.accept()
        accepted.set()
        done.wait()  # idle until told: an untimed wait only this process can end
        connection.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = socket.create_connection(server.getsockname())
    accepted.wait()
    start = time.monotonic()
    time.sleep(HOUR)
    waited = time.monotonic() - start
    done.set()
    thread.join()
    client.close()
    server.close()
    return waited


def test_a_server_and_its_client_in_one_worker_are_its_own(clock: HarnessClock) -> None:
    assert _run(sleeps_beside_its_own_server, clock) == pytest.approx(STEP, abs=1e-9)
    # (its first slice may be real: the server thread is on its way to its idle wait)
    whys = [r["why"] for r in _log(clock) if r["what"] == "time.sleep"]
    assert whys[-1] is None and not any("connection" in (why or "") for why in whys)


def forks_a_sleeper() -> float:
    """A process the worker forks sleeps: for real, on its own clock, moving nothing else."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        start = time.monotonic()
        time.sleep(0.2)
        os.write(write, repr(time.monotonic() - start).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as answer:
        return float(answer.read())


def test_a_process_the_worker_forks_runs_on_real_time(clock: HarnessClock) -> None:
    """Skipped, the child's sleep would let the worker see its end before its time; so it is
    real, the child's clock moves with real time, and harness time does not move."""
    assert _run(forks_a_sleeper, clock) >= 0.2
    assert _log(clock) == [] and clock.now() == 0.0
