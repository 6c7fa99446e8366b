"""Item 8: how a worker's wall time is pinned: freezegun (``tick=True``) against time-machine.

A worker's wall time starts at the harness clock and then moves with real time; harness
``Advance`` steps jump it. Both libraries can do that; this item measures what each costs
and what each gets right, with the public API of each only (no cache priming, no private
helpers), in children forked from a parent that imported what a crash test imports:

- **start cost**: ``freeze_time(t, tick=True).start()`` against
  ``time_machine.travel(t, tick=True).start()`` in a freshly forked child (median and max
  over the forks); and the cost of moving an inherited pin (what a worker forked from the
  fork server does);
- **correctness**: a list of checks a real agent relies on (timers, deadlines, asyncio,
  threads, references captured before the pin), each run in its own child with a timeout.

The goal: the library the harness uses passes every check, and starts a worker in at most
1 ms.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from . import _stats

GOAL_MS = 1.0
TARGET = dt.datetime(2026, 1, 1, 1, 0, tzinfo=dt.timezone.utc)  # harness second 3600
# Real clocks, out of the reach of freezegun's module walk (it patches module attributes).
_REAL: dict[str, Callable[[], float]] = {
    "mono": lambda: time.clock_gettime(time.CLOCK_MONOTONIC),
}


def _warm_parent() -> None:
    """Import what a crash test's process has imported when its workers start."""
    import freezegun  # noqa: F401
    import httpx  # noqa: F401
    import hypothesis  # noqa: F401
    import time_machine  # noqa: F401

    import fake_providers  # noqa: F401
    import pytest_crashpoints.harness
    import pytest_crashpoints.ledger  # noqa: F401


def _start(library: str) -> Any:
    if library == "freezegun":
        from freezegun import freeze_time

        return freeze_time(TARGET, tick=True).start()
    import time_machine

    return time_machine.travel(TARGET, tick=True).start()


def _in_child(work: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Run ``work`` in a forked child; its JSON answer, or ``{"error": ...}``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            answer = {"value": work()}
        except BaseException as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(answer).encode())
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        return {"error": f"did not finish within {timeout:g} s"}
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "no answer"}')


def _start_cost(library: str) -> float:
    def work() -> float:
        begin = _REAL["mono"]()
        _start(library)
        return _REAL["mono"]() - begin

    answer = _in_child(work)
    return float(answer["value"])


def _move_cost(library: str, pinned: Any) -> float:
    later = TARGET + dt.timedelta(seconds=400)

    def work() -> float:
        begin = _REAL["mono"]()
        pinned.move_to(later)
        return _REAL["mono"]() - begin

    return float(_in_child(work)["value"])


# -- correctness: each check returns (passed, what was seen) -----------------------------------


def _starts_at_target() -> tuple[bool, str]:
    seen = time.time() - TARGET.timestamp()
    return abs(seen) < 0.05, f"time.time() - target = {seen:.4f} s"


def _across_sleep(clock: Callable[[], float]) -> tuple[bool, float]:
    """How far ``clock`` moved across ``time.sleep(0.05)``, and whether that is real time."""
    before = clock()
    time.sleep(0.05)
    moved = clock() - before
    return 0.04 <= moved <= 1.0, moved


def _wall_moves_across_sleep() -> tuple[bool, str]:
    real, moved = _across_sleep(time.time)
    return real, f"time.time() moved {moved:.3f} s across sleep(0.05)"


def _datetime_moves() -> tuple[bool, str]:
    real, moved = _across_sleep(lambda: dt.datetime.now(dt.timezone.utc).timestamp())
    today = dt.date.today() == TARGET.date()
    return real and today, f"datetime.now() moved {moved:.3f} s; today {today}"


def _monotonic_is_real() -> tuple[bool, str]:
    gap = abs(time.monotonic() - _REAL["mono"]())
    return gap < 0.01, f"|monotonic() - CLOCK_MONOTONIC| = {gap:.3g} s"


def _perf_counter_measures() -> tuple[bool, str]:
    real, spent = _across_sleep(time.perf_counter)
    return real, f"perf_counter() measured {spent:.3f} s of sleep(0.05)"


def _deadline_loop() -> tuple[bool, str]:
    deadline = time.monotonic() + 0.2
    real_start = _REAL["mono"]()
    rounds = 0
    while time.monotonic() < deadline:
        time.sleep(0.01)
        rounds += 1
        if _REAL["mono"]() - real_start > 3.0:
            return False, f"a 200 ms monotonic() deadline was not over after 3 s ({rounds} rounds)"
    spent = _REAL["mono"]() - real_start
    return spent < 1.0, f"a 200 ms monotonic() deadline ended after {spent:.3f} s"


def _asyncio_timers() -> tuple[bool, str]:
    async def main() -> str:
        begin = time.monotonic()
        await asyncio.sleep(0.05)
        slept = time.monotonic() - begin
        try:
            await asyncio.wait_for(asyncio.sleep(10), timeout=0.1)
        except asyncio.TimeoutError:
            timed_out = True
        else:
            timed_out = False
        return (
            f"asyncio.sleep(0.05) took {slept:.3f} s; wait_for(timeout=0.1) timed out: {timed_out}"
        )

    real_start = _REAL["mono"]()
    text = asyncio.run(main())
    spent = _REAL["mono"]() - real_start
    return spent < 1.0 and "True" in text, f"{text}; {spent:.3f} s in all"


def _advance_jumps_wall_only(pinned: Any) -> tuple[bool, str]:
    mono = time.monotonic()
    pinned.move_to(TARGET + dt.timedelta(seconds=400))
    wall = time.time() - TARGET.timestamp()
    mono_moved = time.monotonic() - mono
    ok = 399.9 <= wall <= 401.0 and mono_moved < 1.0
    return ok, f"after a move of +400 s: wall +{wall:.2f} s, monotonic +{mono_moved:.2f} s"


def _thread_sees_pin() -> tuple[bool, str]:
    seen: list[float] = []
    thread = threading.Thread(target=lambda: seen.append(time.time()))
    thread.start()
    thread.join()
    gap = seen[0] - TARGET.timestamp()
    return 0 <= gap < 1.0, f"a thread's time.time() - target = {gap:.4f} s"


_CAPTURED: list[Callable[[], float]] = []


def _captured_reference() -> tuple[bool, str]:
    # A reference taken before the pin, as ``from time import time`` in a module imported
    # earlier would be (kept out of module attributes: a module walk would not find it).
    gap = _CAPTURED[0]() - TARGET.timestamp()
    return 0 <= gap < 1.0, f"time.time captured before the pin - target = {gap:.1f} s"


CHECKS: dict[str, Callable[..., tuple[bool, str]]] = {
    "wall time starts at the harness time": _starts_at_target,
    "wall time advances across time.sleep": _wall_moves_across_sleep,
    "datetime.now() advances, date.today() pinned": _datetime_moves,
    "time.monotonic() is the real clock": _monotonic_is_real,
    "time.perf_counter() measures real durations": _perf_counter_measures,
    "a 200 ms monotonic() deadline loop ends": _deadline_loop,
    "asyncio.sleep and wait_for(timeout=) work": _asyncio_timers,
    "an Advance jumps wall time, not monotonic()": _advance_jumps_wall_only,
    "a thread the worker starts sees the pin": _thread_sees_pin,
    "a reference to time.time taken before the pin": _captured_reference,
}


def _check(library: str, name: str) -> dict[str, Any]:
    check = CHECKS[name]

    def work() -> list[Any]:
        pinned = _start(library)
        args = (pinned,) if check is _advance_jumps_wall_only else ()
        passed, seen = check(*args)
        return [passed, seen]

    answer = _in_child(work, timeout=5.0)
    if "error" in answer:
        return {"passed": False, "seen": answer["error"]}
    return {"passed": bool(answer["value"][0]), "seen": answer["value"][1]}


def main() -> None:
    _warm_parent()
    _CAPTURED.append(time.time)
    forks = 10 if _stats.quick() else 40
    details: dict[str, Any] = {}
    for library in ("freezegun", "time-machine"):
        starts = [_start_cost(library) for _ in range(forks)]
        # A pin inherited from a pinned parent (the fork server) and only moved.
        mover = _in_child(lambda lib=library: [_move_cost(lib, _start(lib)) for _ in range(forks)])
        checks = {name: _check(library, name) for name in CHECKS}
        details[library] = {
            "start": _stats.summary(starts),
            "move inherited pin": _stats.summary(mover["value"]) if "value" in mover else mover,
            "checks": checks,
            "checks passed": sum(c["passed"] for c in checks.values()),
        }
    chosen = details["time-machine"]
    other = details["freezegun"]
    met = chosen["checks passed"] == len(CHECKS) and chosen["start"]["median"] * 1e3 <= GOAL_MS
    figure = (
        f"time-machine (chosen): start {chosen['start']['median'] * 1e3:.3f} ms median, "
        f"{chosen['start']['max'] * 1e3:.3f} ms max, {chosen['checks passed']}/{len(CHECKS)} "
        f"checks; freezegun tick=True: start {other['start']['median'] * 1e3:.1f} ms median, "
        f"{other['start']['max'] * 1e3:.1f} ms max, {other['checks passed']}/{len(CHECKS)} checks"
    )
    _stats.emit(
        _stats.result(
            8,
            "worker wall-time pin",
            goal=f"every correctness check passes; start <= {GOAL_MS:g} ms",
            met=met,
            figure=figure,
            command="python -m bench.clock_pin",
            details=details,
        )
    )


if __name__ == "__main__":
    main()
