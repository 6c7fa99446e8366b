"""Item 1: the cost of one crash case against a bare fork + SIGKILL + waitpid.

One case: the reference worker on one message, killed with SIGKILL at point B (the provider
applied the request, the worker never saw the answer), then the quiet phase (recovery until
nothing changes), the second recovery run, the killed-recovery replay on a copy of the run
directory, and the six checks. The floor is a bare fork + SIGKILL + waitpid from the same
process, measured between the cases. A and C kills and the fault-free case are reported too,
as is the cost of one no-op worker (started, run, reaped) with and without the fork server:
the harness's own cost per process.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_crashpoints._process.forkserver import serving
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.harness import Deliver, HarnessClock, Schedule, run_case

from . import _floors, _forks, _stats
from ._scenarios import KillAt, email_scenario

GOAL = 4.0


def processes_per_case(scenario: Any, schedule: Schedule, base: Path) -> int:
    """How many processes one run of the case forks (the fork server included)."""
    return _forks.forks(lambda: run_case(scenario, schedule, base_dir=base))


def timed_cases(
    scenario: Any, schedule: Schedule, base: Path, reps: int
) -> tuple[list[float], list[float], list[str]]:
    """``reps`` runs of the case, each timed just after a bare fork + SIGKILL + waitpid: the
    seconds of each case, of each floor, and each case's fingerprint. A failing case ends the
    benchmark."""
    cases, floors, fingerprints = [], [], []
    for _ in range(reps):
        floors.append(_floors.fork_kill_wait())
        elapsed, case = _stats.timed_case(
            functools.partial(run_case, scenario, schedule, base_dir=base)
        )
        if not case.passed:
            raise SystemExit(f"the benchmark case failed: {schedule}: {case.violations}")
        cases.append(elapsed)
        fingerprints.append(case.fingerprint)
    return cases, floors, fingerprints


def _measure(scenario: Any, schedule: Schedule, base: Path, reps: int) -> dict[str, Any]:
    cases, floors, fingerprints = timed_cases(scenario, schedule, base, reps)
    return {
        "schedule": str(schedule),
        "case": _stats.summary(cases),
        "floor": _stats.summary(floors),
        "ratio": _stats.ratios(cases, floors),
        "processes": processes_per_case(scenario, schedule, base),
        "fingerprints": len(set(fingerprints)),
        "fingerprint": min(fingerprints),
    }


def _noop() -> None:
    return None


def noop_worker(base: Path, *, served: bool, samples: int = 30) -> float:
    """Median seconds to start, run and reap a worker that does nothing (clock pinned)."""
    clock = HarnessClock(base / "noop-clock")
    timings = []
    with serving() if served else contextlib.nullcontext():
        run_worker(_noop, clock=clock)
        for _ in range(samples):
            start = time.perf_counter()
            run_worker(_noop, clock=clock)
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
        floor = _floors.fork_kill_wait()
        served_noop, direct_noop = noop_worker(base, served=True), noop_worker(base, served=False)
    ratio = headline["ratio"]["median"]
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
                f"harness)"
            ),
            command="python -m bench.crash_case",
            details={
                "kill at B": headline,
                **others,
                "per process, median seconds": per_process,
            },
        )
    )


if __name__ == "__main__":
    main()
