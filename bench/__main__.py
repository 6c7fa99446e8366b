"""Run every benchmark item, each in a fresh interpreter; write ``bench/results.json`` and the
table in ``docs/performance.md``.

    python -m bench                  # everything (about ten minutes on two cores)
    python -m bench --quick          # fewer repetitions: a smoke run of the bench itself
    python -m bench --only 1,3       # some items; the others keep their last results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import _machine, report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results.json"
#: Item number -> module, in the order they run (the long sweeps last).
ITEMS = {
    0: "case_profile",
    1: "crash_case",
    3: "failpoint",
    4: "guarded_call",
    5: "startup",
    7: "scaling",
    6: "memory",
    11: "session_memory",
    14: "postgres_case",
    8: "clock_pin",
    10: "peer",
    2: "sweep",
    9: "engines",
    12: "absolute",
    13: "waits",
}


def _run(item: int, module: str, quick: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", f"bench.{module}", *(["--quick"] if quick else [])]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=HERE.parent, capture_output=True, text=True, timeout=1200)
    elapsed = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        record: dict[str, Any] = {
            "item": item,
            "name": module,
            "goal": "",
            "status": "error",
            "figure": f"the benchmark failed (exit {done.returncode})",
            "command": f"python -m bench.{module}",
            "details": {"stderr": tail},
        }
    else:
        record = json.loads(lines[-1])
    record["seconds"] = round(elapsed, 1)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", help="comma-separated item numbers (0 is the profile)")
    options = parser.parse_args()
    chosen = ITEMS
    if options.only:
        wanted = {int(n) for n in options.only.split(",")}
        chosen = {n: m for n, m in ITEMS.items() if n in wanted}
    load_before = round(os.getloadavg()[0], 2)
    previous: dict[int, dict[str, Any]] = {}
    if options.only and RESULTS.exists():
        previous = {r["item"]: r for r in json.loads(RESULTS.read_text())["items"]}
    for item, module in chosen.items():
        print(f"bench: item {item} ({module}) ...", flush=True)
        previous[item] = _run(item, module, options.quick)
        print(f"    {previous[item]['status']}: {previous[item]['figure']}", flush=True)
    machine = _machine.facts()
    machine["load_average_1m"] = {"start": load_before, "end": machine["load_average_1m"]}
    results = {
        "machine": machine,
        "quick": options.quick,
        "items": [previous[n] for n in sorted(previous)],
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    report.write(results)
    print(f"bench: wrote {RESULTS.relative_to(HERE.parent)} and {report.DOC}")


if __name__ == "__main__":
    main()
