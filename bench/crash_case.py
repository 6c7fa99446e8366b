"""Item 1: the cost of one crash case against a bare fork + SIGKILL + waitpid.

One case: the reference worker on one message, killed with SIGKILL at point B (the provider
applied the request, the worker never saw the answer), then the quiet phase (recovery until
nothing changes), the second recovery run, the killed-recovery replay on a copy of the run
directory, and the six checks. The floor is a bare fork + SIGKILL + waitpid from the same
process, measured between the cases. A and C kills and the fault-free case are reported too,
as are the same case with every worker forked by the harness itself (no fork server, as
before recommendation R2) and the cost of one no-op worker (started, run, reaped) with and
without the fork server: the harness's own cost per process.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest_crashpoints._case as case_module
import pytest_crashpoints._worker as worker_module
from pytest_crashpoints._case import run_case
from pytest_crashpoints._clock import HarnessClock
from pytest_crashpoints._forkserver import serving
from pytest_crashpoints._schedule import Deliver, Schedule

from . import _floors, _stats
from ._scenarios import KillAt, email_scenario

GOAL = 4.0


def processes_per_case(scenario: Any, schedule: Schedule, base: Path) -> int:
    """How many worker and recovery processes one run of the case starts."""
    started = []
    original = worker_module.start_worker

    def counting(*args: Any, **kwargs: Any) -> Any:
        started.append(args[0])
        return original(*args, **kwargs)

    worker_module.start_worker = counting
    try:
        run_case(scenario, schedule, base_dir=base)
    finally:
        worker_module.start_worker = original
    return len(started)


def _measure(scenario: Any, schedule: Schedule, base: Path, reps: int) -> dict[str, Any]:
    cases, floors, fingerprints = [], [], set()
    for _ in range(reps):
        floors.append(_floors.fork_kill_wait())
        elapsed, case = _stats.timed_case(
            functools.partial(run_case, scenario, schedule, base_dir=base)
        )
        cases.append(elapsed)
        if not case.passed:
            raise SystemExit(f"the benchmark case failed: {case.violations}")
        fingerprints.add(case.fingerprint)
    return {
        "schedule": str(schedule),
        "case": _stats.summary(cases),
        "floor": _stats.summary(floors),
        "ratio": _stats.ratios(cases, floors),
        "processes": processes_per_case(scenario, schedule, base),
        "fingerprints": len(fingerprints),
        "fingerprint": sorted(fingerprints)[0],
    }


@contextlib.contextmanager
def no_fork_server(*scenarios: object) -> Iterator[None]:
    """What ``run_case`` did before the fork server: prepare the parent, fork from it."""
    case_module._prepare_parent()
    yield


def _noop() -> None:
    return None


def noop_worker(base: Path, *, served: bool, samples: int = 30) -> float:
    """Median seconds to start, run and reap a worker that does nothing (clock pinned)."""
    clock = HarnessClock(base / "noop-clock")
    timings = []
    with serving() if served else contextlib.nullcontext():
        worker_module.run_worker(_noop, clock=clock)
        for _ in range(samples):
            start = time.perf_counter()
            worker_module.run_worker(_noop, clock=clock)
            timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def main() -> None:
    reps = 4 if _stats.quick() else 15
    side_reps = 3 if _stats.quick() else 7
    scenario = email_scenario()
    crash = Schedule((Deliver(0, KillAt("B")),))
    with tempfile.TemporaryDirectory(prefix="bench-case-") as tmp:
        base = Path(tmp)
        run_case(scenario, crash, base_dir=base)  # first-use imports in the parent
        headline = _measure(scenario, crash, base, reps)
        others = {
            label: _measure(scenario, schedule, base, side_reps)
            for label, schedule in (
                ("kill at A", Schedule((Deliver(0, KillAt("A")),))),
                ("kill at C", Schedule((Deliver(0, KillAt("C")),))),
                ("fault-free", Schedule((Deliver(0),))),
            )
        }
        original = case_module.fork_server_for
        case_module.fork_server_for = no_fork_server  # type: ignore[assignment]
        try:
            direct = _measure(scenario, crash, base, reps)
        finally:
            case_module.fork_server_for = original
        floor = _floors.fork_kill_wait()
        served_noop, direct_noop = noop_worker(base, served=True), noop_worker(base, served=False)
    ratio = headline["ratio"]["median"]
    direct["same_end_state"] = direct["fingerprint"] == headline["fingerprint"]
    per_process = {
        "floor (fork+SIGKILL+waitpid)": floor,
        "no-op worker through the fork server": served_noop,
        "no-op worker forked by the harness": direct_noop,
    }
    _stats.emit(
        _stats.result(
            1,
            "crash-case cost",
            goal=f"<= {GOAL:g}x a bare fork+SIGKILL+waitpid",
            met=ratio <= GOAL,
            figure=(
                f"{ratio:.0f}x ({headline['case']['median'] * 1e3:.0f} ms vs "
                f"{headline['floor']['median'] * 1e3:.2f} ms); {headline['processes']} "
                f"processes per case; one no-op worker costs {served_noop / floor:.1f}x the "
                f"floor through the fork server ({direct_noop / floor:.1f}x forked by the "
                f"harness); without the fork server the case is {direct['ratio']['median']:.0f}x "
                f"({direct['case']['median'] * 1e3:.0f} ms)"
            ),
            command="python -m bench.crash_case",
            details={
                "kill at B": headline,
                **others,
                "kill at B, no fork server": direct,
                "per process, median seconds": per_process,
            },
        )
    )


if __name__ == "__main__":
    main()
