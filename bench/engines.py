"""Item 9: the states engine against the processes engine, side by side in one run.

The same schedules and scenarios through both engines (``--crashpoints-engine``):

- the exhaustive single-fault sweep of the bundled scenarios (``scenarios/``, the broken
  agents left out as in item 2), the whole ``pytest -n 2`` command's wall time;
- the e-mail scenario's exhaustive sweep through ``explore``: crash states checked per second
  and the amortized cost of one against a bare fork + SIGKILL + waitpid, with the processes
  each engine forked;
- the fault-free case against the same floor (for the states engine: the recorded golden
  run of a test, and the world it sets up once per test);
- ``crashpoints gate scenarios`` (broken agents included), the same seed for both.

Each pair runs back to back, the order alternating, so load on the machine hits both alike;
the verdicts of each pair must agree or the item fails. ``--quick`` leaves out the sweep and
the gate (minutes each).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_crashpoints.harness import CrashSettings, Deliver, Schedule, explore, run_case

from . import _floors, _forks, _stats
from ._scenarios import email_scenario
from .sweep import sweep_command

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("processes", "states")
GOAL_SWEEP = 5.0
GOAL_STATES_PER_SECOND = 50.0
GOAL_STATE_COST = 20.0
GOAL_FAULT_FREE = 10.0
GOAL_GATE = 3.0
TIMEOUT = 1800.0
#: Jobs for the e-mail sweep's third run: this machine's cores, as ``auto`` takes them for
#: a test run without xdist (at most 4).
JOBS = max(2, min(4, len(os.sched_getaffinity(0))))


def _pytest_sweep(engine: str, report: Path) -> dict[str, Any]:
    command = sweep_command(
        2,
        "--crashpoints-seed=1",
        f"--crashpoints-engine={engine}",
        f"--crashpoints-report={report}",
    )
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    elapsed = time.perf_counter() - start
    tests = json.loads(report.read_text())["tests"] if report.exists() else []
    return {
        "seconds": elapsed,
        "exit": done.returncode,
        "verdicts": {t["nodeid"]: (t["verdict"], t["cases"]) for t in tests},
        "cases": sum(t["cases"] for t in tests),
        "tail": done.stdout.splitlines()[-3:],
    }


def _gate(engine: str, report: Path) -> dict[str, Any]:
    command = [
        str(Path(sys.executable).with_name("crashpoints")),
        "gate",
        "scenarios",
        f"--report={report}",
        f"--junit={report.with_suffix('.xml')}",
        f"--markdown={report.with_suffix('.md')}",
        "--",
        "-n",
        "2",
        "--crashpoints-seed=1",
    ]
    env = {**os.environ, "PYTEST_CRASHPOINTS_ENGINE": engine}
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, env=env
    )
    return {
        "seconds": time.perf_counter() - start,
        "exit": done.returncode,
        "tail": done.stdout.splitlines()[-3:],
    }


def _email(engine: str, base: Path, jobs: int = 1) -> dict[str, Any]:
    settings = CrashSettings(mode="exhaustive", max_faults=1, engine=engine, jobs=jobs)  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def work() -> None:
        box["report"] = explore(email_scenario(), settings, base_dir=base, nodeid="bench::email")

    start = time.perf_counter()
    processes = _forks.forks(work)
    elapsed = time.perf_counter() - start
    report = box["report"]
    # A crash state is checked once per quiet phase run: every case for the processes
    # engine, every distinct state for the states engine.
    checked = report.engine.get("checked", report.cases)
    return {
        "seconds": elapsed,
        "cases": report.cases,
        "checked": checked,
        "processes": processes,
        "verdict": report.verdict,
        "engine": report.engine,
    }


def _fault_free(base: Path, reps: int) -> dict[str, Any]:
    from pytest_crashpoints._harness.search.engine import StatesEngine
    from pytest_crashpoints._process.forkserver import serving as fork_server

    scenario = email_scenario()
    golden = Schedule((Deliver(0),))
    processes, states, setups, floors = [], [], [], []
    with fork_server([scenario.worker, scenario.recover, *scenario.messages]):
        run_case(scenario, golden, base_dir=base)  # first-use imports
        for _ in range(reps):
            floors.append(_floors.fork_kill_wait())
            processes.append(_stats.timed(lambda: run_case(scenario, golden, base_dir=base)))
            start = time.perf_counter()
            with StatesEngine(scenario, base_dir=base) as engine:
                setups.append(time.perf_counter() - start)
                states.append(_stats.timed(lambda e=engine: e.run(golden, None)))
    floor = statistics.median(floors)
    return {
        "floor": _stats.summary(floors),
        "processes": _stats.summary(processes),
        "states golden": _stats.summary(states),
        "states world set-up (once per test)": _stats.summary(setups),
        "processes / floor": statistics.median(processes) / floor,
        "states / floor": statistics.median(states) / floor,
    }


def main() -> None:
    quick = _stats.quick()
    details: dict[str, Any] = {}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        base = Path(tmp)
        floors = [_floors.fork_kill_wait() for _ in range(5)]
        email = {engine: _email(engine, base / engine) for engine in ENGINES}
        # What --crashpoints-jobs=auto gives one test run without xdist: a job per core.
        email[f"states, {JOBS} jobs"] = _email("states", base / "jobs", jobs=JOBS)
        floors += [_floors.fork_kill_wait() for _ in range(5)]
        floor = statistics.median(floors)
        details["e-mail scenario"] = email
        details["floor (fork+SIGKILL+waitpid)"] = _stats.summary(floors)
        details["fault-free case"] = _fault_free(base, 3 if quick else 7)
        load.append(os.getloadavg()[0])
        sweep = {}
        for engine in ENGINES if not quick else ():
            sweep[engine] = _pytest_sweep(engine, base / f"sweep-{engine}.json")
        details["sweep"] = sweep
        load.append(os.getloadavg()[0])
        gate = {}
        if not quick:
            for engine in reversed(ENGINES):
                gate[engine] = _gate(engine, base / f"gate-{engine}.json")
        details["gate"] = gate
        load.append(os.getloadavg()[0])
    details["load average (1 min) before each part"] = load
    states, processes = email["states"], email["processes"]
    jobs = email[f"states, {JOBS} jobs"]
    per_second = states["checked"] / states["seconds"]
    state_cost = states["seconds"] / states["checked"] / floor
    jobs_per_second = jobs["checked"] / jobs["seconds"]
    ff = details["fault-free case"]["states / floor"]
    parts = [
        f"e-mail: {per_second:.1f} crash states/s ({state_cost:.0f}x the floor each; "
        f"{states['processes'] / states['cases']:.1f} processes per case, "
        f"{processes['processes'] / processes['cases']:.1f} with processes, whose sweep took "
        f"{processes['seconds'] / states['seconds']:.2f}x as long; with {JOBS} jobs "
        f"{jobs_per_second:.1f} crash states/s, {states['seconds'] / jobs['seconds']:.2f}x "
        "one job)",
        f"fault-free case {ff:.0f}x the floor "
        f"({details['fault-free case']['processes / floor']:.0f}x with processes)",
    ]
    met = max(per_second, jobs_per_second) >= GOAL_STATES_PER_SECOND
    met = met and state_cost <= GOAL_STATE_COST
    met = met and ff <= GOAL_FAULT_FREE
    agree = email["states"]["verdict"] == email["processes"]["verdict"]
    agree = agree and email["states"]["cases"] == email["processes"]["cases"]
    agree = agree and (jobs["verdict"], jobs["cases"]) == (states["verdict"], states["cases"])
    # The whole commands, each run on both engines: states against processes.
    commands = []
    for name, runs, goal, agreeing in (
        ("sweep", sweep, GOAL_SWEEP, "verdicts"),
        ("gate", gate, GOAL_GATE, "exit"),
    ):
        if len(runs) == 2:
            states_run, processes_run = runs["states"], runs["processes"]
            ratio = processes_run["seconds"] / states_run["seconds"]
            # The sweep's report counts its cases; the gate tells only its exit status.
            cases = f" at -n 2, {states_run['cases']} cases" if "cases" in states_run else ""
            commands.append(
                f"{name} {ratio:.2f}x faster ({states_run['seconds']:.0f} s vs "
                f"{processes_run['seconds']:.0f} s{cases})"
            )
            met = met and ratio >= goal
            agree = agree and states_run[agreeing] == processes_run[agreeing]
    parts[:0] = commands
    if not agree:
        parts.insert(0, "THE ENGINES' VERDICTS DIFFER")
        met = False
    _stats.emit(
        _stats.result(
            9,
            "states engine vs processes engine",
            goal=(
                f"sweep >= {GOAL_SWEEP:g}x faster; gate >= {GOAL_GATE:g}x; e-mail >= "
                f"{GOAL_STATES_PER_SECOND:g} crash states/s and <= {GOAL_STATE_COST:g}x the "
                f"floor each; fault-free case <= {GOAL_FAULT_FREE:g}x the floor"
            ),
            met=met,
            figure="; ".join(parts),
            command="python -m bench.engines",
            details=details,
        )
    )


if __name__ == "__main__":
    main()
