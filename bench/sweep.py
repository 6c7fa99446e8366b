"""Item 2: the exhaustive sweep of the bundled scenarios, at ``-n 1`` and ``-n 2``.

Every single-fault schedule (``--crashpoints-mode=exhaustive --crashpoints-max-faults=1``) of
every test in ``scenarios/``, through the pytest plugin and pytest-xdist, wall time of the
whole ``pytest`` command. ``scenarios/broken`` is excluded: its tests are meant to fail, and a
failing test stops at its first violation, so it would time the search for a bug, not the
sweep. The item is reported as not measurable while ``scenarios/`` or the plugin's options
are not there yet.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import _stats

GOAL_SECONDS = 10.0
GOAL_SPEEDUP = 1.7
TIMEOUT = 300.0
ROOT = Path(__file__).resolve().parent.parent


def sweep_command(workers: int, *options: str) -> list[str]:
    """The ``pytest`` command of the exhaustive single-fault sweep of ``scenarios/`` (the broken
    agents left out) on ``workers`` xdist workers, with ``options`` added (item 9 runs it on
    each engine)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "crashpoints",
        "scenarios/",
        "--ignore=scenarios/broken",
        "--crashpoints-mode=exhaustive",
        "--crashpoints-max-faults=1",
        "-n",
        str(workers),
        "-q",
        "-p",
        "no:cacheprovider",
        *options,
    ]


def _command(workers: int) -> list[str]:
    # Each test's call duration too: the longest test bounds the speed-up.
    return sweep_command(workers, "--durations=0")


def _missing() -> str | None:
    if not any((ROOT / "scenarios").glob("test_*.py")):
        return "scenarios/ has no test files yet"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "crashpoints", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if "--crashpoints-mode" not in done.stdout:
        return "the plugin has no --crashpoints-mode option yet"
    return None


def _run(workers: int) -> tuple[float, str | None, dict[str, float]]:
    start = time.perf_counter()
    try:
        done = subprocess.run(
            _command(workers), cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return TIMEOUT, f"-n {workers} did not finish within {TIMEOUT:g} s", {}
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-15:])
        return elapsed, f"-n {workers} exited {done.returncode}:\n{tail}", {}
    tests = {
        match.group(2): float(match.group(1))
        for match in re.finditer(r"^\s*([\d.]+)s call\s+(\S+)", done.stdout, re.MULTILINE)
    }
    return elapsed, None, tests


def _not_measurable(why: str, details: dict[str, Any]) -> None:
    _stats.emit(
        _stats.result(
            2,
            "exhaustive sweep",
            goal=f"<= {GOAL_SECONDS:g} s at -n 2, speed-up >= {GOAL_SPEEDUP:g}x",
            met=None,
            figure=f"not measurable yet: {why.splitlines()[0]}",
            command=" ".join(_command(2)[2:]),
            details={"why": why, **details},
        )
    )


def main() -> None:
    missing = _missing()
    if missing is not None:
        _not_measurable(missing, {})
        return
    one: list[float] = []
    two: list[float] = []
    tests: dict[str, float] = {}
    for rep in range(3):
        for workers, times in ((1, one), (2, two)):
            elapsed, error, durations = _run(workers)
            if error is not None:
                _not_measurable(error, {"-n 1 (s)": one, "-n 2 (s)": two})
                return
            times.append(elapsed)
            if workers == 1 and not tests:
                tests = durations
        if rep == 0 and (_stats.quick() or one[0] + two[0] > 60):
            break  # one repetition of a long sweep, to stay within the bench's budget
    at_two = _stats.summary(two)
    speedup = _stats.ratios(one, two)
    met = at_two["median"] <= GOAL_SECONDS and speedup["median"] >= GOAL_SPEEDUP
    # Tests are the unit xdist distributes: the longest one bounds the speed-up.
    total = sum(tests.values())
    longest = max(tests.values(), default=0.0)
    bound = total / max(longest, total / 2) if total else float("nan")
    _stats.emit(
        _stats.result(
            2,
            "exhaustive sweep",
            goal=f"<= {GOAL_SECONDS:g} s at -n 2, speed-up >= {GOAL_SPEEDUP:g}x",
            met=met,
            figure=(
                f"{at_two['median']:.1f} s at -n 2, {_stats.summary(one)['median']:.1f} s at "
                f"-n 1: speed-up {speedup['median']:.2f}x (at most {bound:.2f}x: the longest "
                f"test is {longest:.1f} s of {total:.1f} s)"
            ),
            command=" ".join(_command(2)[2:]),
            details={
                "excluded": "scenarios/broken (meant to fail)",
                "-n 1": _stats.summary(one),
                "-n 2": at_two,
                "speed-up": speedup,
                "test call durations at -n 1 (s)": dict(
                    sorted(tests.items(), key=lambda kv: -kv[1])
                ),
                "speed-up bound from the longest test": bound,
            },
        )
    )


if __name__ == "__main__":
    main()
