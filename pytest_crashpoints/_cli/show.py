"""``crashpoints show REPORT.json``: the timeline and evidence of each failure in a report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from .._plugin.summary import verdict_of
from ..errors import CrashpointsError
from .gate import GATE_ERROR
from .report import load_report, render_table

__all__ = ["show"]


def show(path: Path, *, out: TextIO | None = None) -> int:
    """Print the timeline and evidence of every failure in a report."""
    out = out or sys.stdout
    try:
        document = load_report(path)
    except CrashpointsError as exc:
        print(f"crashpoints show: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    print(render_table(document), file=out)
    for test in document["tests"]:
        if test.get("error") and not test.get("failure"):
            title = f"{test['nodeid']} ({verdict_of(test)})"
            print("", file=out)
            print(title, file=out)
            print("=" * len(title), file=out)
            print(test["error"], file=out)
    failures = [t for t in document["tests"] if t.get("failure")]
    for test in failures:
        failure = test["failure"]
        title = f"{test['nodeid']} ({verdict_of(test)})"
        print("", file=out)
        print(title, file=out)
        print("=" * len(title), file=out)
        print(f"minimal schedule: {failure['schedule_text']}", file=out)
        for violation in failure["violations"]:
            print(violation, file=out)
        print("timeline:", file=out)
        print(failure["timeline"], file=out)
        print(f"replay: {failure['replay_command']}", file=out)
    return 1 if any(verdict_of(t) == "failed" for t in document["tests"]) else 0
