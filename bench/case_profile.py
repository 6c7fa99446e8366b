"""Where the time of one crash case goes (the profile behind the "Known costs" section).

Runs the item-1 case (kill at B) and splits its wall time, from the outside and with the
public harness only:

- the processes it forks (counted by an ``os.register_at_fork`` hook that every forked process
  inherits, the fork server's children included);
- the harness's own cost per process: a no-op worker started, pinned to the harness clock, run
  and reaped through the fork server, against the same without the clock pin (the difference
  is what pinning wall time costs);
- the time inside the worker's and recovery's callables (the real work), measured by wrapping
  the scenario's own callables (a killed process never reports, so this counts the processes
  that ended by themselves);
- the parent's own work: a cProfile of the harness process, by cumulative time.
"""

from __future__ import annotations

import cProfile
import dataclasses
import os
import pstats
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_crashpoints._process.forkserver import serving as fork_server
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.harness import Deliver, HarnessClock, Scenario, Schedule, run_case

from . import _forks, _stats
from ._scenarios import KillAt, email_scenario


def _now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # freezegun does not pin it


@dataclasses.dataclass(frozen=True)
class _Timed:
    """A scenario callable that appends its own run time to a log (per process)."""

    fn: Any
    log: str

    def __call__(self, *args: Any) -> object:
        start = _now()
        value = self.fn(*args)
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{_now() - start!r}\n".encode())
        finally:
            os.close(fd)
        return value


def _noop() -> None:
    return None


def _cpu() -> float:
    """CPU seconds of this process and of its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _per_process(base: Path, *, pinned: bool, samples: int = 30) -> tuple[float, float]:
    """A no-op worker's median wall seconds, and its CPU seconds (this process, the fork
    server and the worker: the server is reaped, and counted, when its block ends)."""
    clock = HarnessClock(base / "noop-clock") if pinned else None
    timings = []
    with fork_server():
        run_worker(_noop, clock=clock)
        cpu = _cpu()
        for _ in range(samples):
            start = _now()
            run_worker(_noop, clock=clock)
            timings.append(_now() - start)
    return statistics.median(timings), (_cpu() - cpu) / samples


def _parent_hotspots(scenario: Scenario, schedule: Schedule, base: Path) -> list[str]:
    profile = cProfile.Profile()
    profile.enable()
    run_case(scenario, schedule, base_dir=base)
    profile.disable()
    stats = pstats.Stats(profile)
    rows = []
    for (filename, line, name), (_cc, _nc, _tt, cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "pytest_crashpoints" in filename or "fake_providers" in filename:
            where = filename.split("site-packages/")[-1].split("/main/")[-1]
            rows.append((cum, f"{where}:{line} {name}"))
    rows.sort(reverse=True)
    return [f"{text}: {cum * 1e3:.0f} ms" for cum, text in rows[1:9]]


def main() -> None:
    scenario = email_scenario()
    schedule = Schedule((Deliver(0, KillAt("B")),))
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        base = Path(tmp)
        log = base / "callables.log"
        timed = dataclasses.replace(
            scenario,
            worker=_Timed(scenario.worker, str(log)),
            recover=_Timed(scenario.recover, str(log)),
        )
        run_case(timed, schedule, base_dir=base)  # first-use imports in the parent
        log.unlink(missing_ok=True)
        start = _now()
        result = run_case(timed, schedule, base_dir=base)
        wall = _now() - start
        assert result.passed, result.violations
        callables = [float(x) for x in log.read_text().split()]
        processes = _forks.forks(lambda: run_case(scenario, schedule, base_dir=base))
        pinned, pinned_cpu = _per_process(base, pinned=True, samples=100)
        bare, _ = _per_process(base, pinned=False)
        hotspots = _parent_hotspots(scenario, schedule, base)
    profile = {
        "wall": wall,
        "processes": processes,
        "completed callables": len(callables),
        "phases": {
            "in the callables (completed processes)": sum(callables),
            "harness per process (no-op worker, pinned) x processes": pinned * processes,
            "of which pinning wall time": (pinned - bare) * processes,
        },
        "per process, median seconds": {"no-op worker pinned": pinned, "no-op worker": bare},
        "no-op worker pinned, cpu seconds": pinned_cpu,
        "parent cumulative": hotspots,
    }
    _stats.emit(
        _stats.result(
            0,
            "where a crash case's time goes",
            goal="(profile, no goal)",
            met=None,
            status="profile",
            figure=(
                f"{wall * 1e3:.0f} ms in {processes} processes; a no-op worker costs "
                f"{pinned * 1e3:.1f} ms ({(pinned - bare) * 1e3:.1f} ms of it pinning wall time; "
                f"{pinned_cpu * 1e3:.1f} ms of CPU)"
            ),
            command="python -m bench.case_profile",
            details={"as shipped": profile},
        )
    )


if __name__ == "__main__":
    main()
