"""Where the time of one crash case goes (the profile behind the "Known costs" section).

Runs the item-1 case (kill at B) with the worker machinery instrumented: for every worker
and recovery process, the time from ``start`` to the child's first instruction (fork), the
time the child spends pinning its wall time to the harness clock (freezegun: import and
``start``), the time in the callable (the worker's or recovery's real work, up to its end or
its kill), and the time from there until the parent has reaped it (result pickling, exit,
join). What is left of the case's wall time is the parent's own work (set-up, observations,
snapshots, checks). Measured as shipped, then with every worker forked by the harness itself
(no fork server, as before recommendation R2).
Timestamps come from ``CLOCK_MONOTONIC``, which freezegun does not pin.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest_crashpoints._case as case_module
import pytest_crashpoints._worker as worker_module
from pytest_crashpoints._case import run_case
from pytest_crashpoints._schedule import Deliver, Schedule

from . import _stats
from ._scenarios import KillAt, email_scenario
from .crash_case import no_fork_server


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class _Probe:
    """Instruments ``_worker`` so every process of a case reports its phases to a log file."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.runs: list[tuple[float, float]] = []

    def _mark(self, label: str) -> None:
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {label} {_now()!r}\n".encode())
        finally:
            os.close(fd)

    def install(self) -> None:
        probe = self
        child_main, pin, run_worker = (
            worker_module._child_main,
            worker_module.pin_wall_time,
            worker_module.run_worker,
        )

        def timed_child_main(fn: Any, *args: Any) -> None:
            probe._mark("child")

            def timed_fn(*a: Any, **k: Any) -> object:
                probe._mark("fn")
                value = fn(*a, **k)
                probe._mark("returned")
                return value

            child_main(timed_fn, *args)

        def timed_pin(clock: Any) -> Any:
            probe._mark("pin")
            resync = pin(clock)
            probe._mark("pinned")
            return resync

        def timed_run_worker(fn: Any, **kwargs: Any) -> Any:
            start = _now()
            outcome = run_worker(fn, **kwargs)
            if kwargs.get("clock") is not None:  # a worker or recovery (not the run-dir copy)
                probe.runs.append((start, _now()))
            return outcome

        worker_module._child_main = timed_child_main
        worker_module.pin_wall_time = timed_pin
        worker_module.run_worker = timed_run_worker
        self._originals = (child_main, pin, run_worker)

    def uninstall(self) -> None:
        (
            worker_module._child_main,
            worker_module.pin_wall_time,
            worker_module.run_worker,
        ) = self._originals

    def phases(self) -> dict[str, float]:
        marks: dict[int, dict[str, float]] = {}
        for line in self.log.read_text().splitlines():
            pid, label, at = line.split()
            marks.setdefault(int(pid), {})[label] = float(at)
        # The fork server is a child too, but no run: it never pins a clock.
        children = sorted((m for m in marks.values() if "pin" in m), key=lambda m: m["child"])
        totals = dict.fromkeys(("fork", "pin wall time", "callable", "exit and reap"), 0.0)
        for (start, end), m in zip(sorted(self.runs), children, strict=True):
            totals["fork"] += m["child"] - start
            totals["pin wall time"] += m["pinned"] - m["pin"]
            stop = m.get("returned", end)
            totals["callable"] += stop - m["fn"]
            totals["exit and reap"] += end - stop
        return totals


def _profile_once(scenario: Any, schedule: Schedule, base: Path, log: Path) -> dict[str, Any]:
    log.unlink(missing_ok=True)
    probe = _Probe(log)
    probe.install()
    try:
        start = _now()
        result = run_case(scenario, schedule, base_dir=base)
        wall = _now() - start
    finally:
        probe.uninstall()
    assert result.passed, result.violations
    phases = probe.phases()
    in_processes = sum(end - start for start, end in probe.runs)
    return {
        "wall": wall,
        "processes": len(probe.runs),
        "phases": {**phases, "parent": wall - in_processes},
    }


def _child_hotspots(scenario: Any, schedule: Schedule, base: Path, out: Path) -> list[str]:
    """cProfile of every worker process that ends normally; the top functions by own time."""
    original = worker_module._child_main

    def profiled(*args: Any) -> None:
        profile = cProfile.Profile()
        profile.enable()
        try:
            original(*args)
        finally:
            profile.disable()
            profile.dump_stats(str(out / f"{os.getpid()}.prof"))

    worker_module._child_main = profiled
    try:
        run_case(scenario, schedule, base_dir=base)
    finally:
        worker_module._child_main = original
    stats = pstats.Stats(*(str(p) for p in sorted(out.glob("*.prof"))))
    rows = []
    for (filename, line, name), (_cc, _nc, _tt, cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name in ("pin_wall_time", "start", "_recover_entry", "_deliver_entry"):
            rows.append((cum, f"{Path(filename).name}:{line} {name}"))
    rows.sort(reverse=True)
    return [f"{text}: {cum * 1e3:.0f} ms" for cum, text in rows[:6]]


def main() -> None:
    scenario = email_scenario()
    schedule = Schedule((Deliver(0, KillAt("B")),))
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        base = Path(tmp)
        log = base / "marks.log"
        run_case(scenario, schedule, base_dir=base)
        cold = _profile_once(scenario, schedule, base, log)
        hot_dir = base / "profiles-cold"
        hot_dir.mkdir()
        cold["child cumulative (completed processes)"] = _child_hotspots(
            scenario, schedule, base, hot_dir
        )
        original = case_module.fork_server_for
        case_module.fork_server_for = no_fork_server  # type: ignore[assignment]
        try:
            direct = _profile_once(scenario, schedule, base, log)
        finally:
            case_module.fork_server_for = original
    share = cold["phases"]["pin wall time"] / cold["wall"]
    _stats.emit(
        _stats.result(
            0,
            "where a crash case's time goes",
            goal="(profile, no goal)",
            met=None,
            status="profile",
            figure=(
                f"{cold['wall'] * 1e3:.0f} ms in {cold['processes']} processes; pinning wall "
                f"time (freezegun) {share:.0%}; without the fork server: "
                f"{direct['wall'] * 1e3:.0f} ms"
            ),
            command="python -m bench.case_profile",
            details={"as shipped": cold, "no fork server": direct},
        )
    )


if __name__ == "__main__":
    main()
