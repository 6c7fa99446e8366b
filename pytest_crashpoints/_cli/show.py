"""``crashpoints show REPORT.json``: the timeline and evidence of each failure in a report; the
schedules one test ran (``--schedules TEST``); the HTML report (``--html -o PATH``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from .._plugin.summary import schedule_lines, verdict_of
from ..errors import CrashpointsError
from .gate import GATE_ERROR, write_atomically
from .report import load_report, render_table

__all__ = ["show", "show_html", "show_schedules"]


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
            origin = test.get("error_origin")
            at = f" at {test['error_at']}" if test.get("error_at") else ""
            print(f"error in {origin}{at}:" if origin else "error:", file=out)
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
    return 1 if any(verdict_of(t) in ("failed", "error") for t in document["tests"]) else 0


def show_schedules(path: Path, test: str, *, out: TextIO | None = None) -> int:
    """Print the schedules one test of a report ran, with their verdicts; ``test`` is its node
    id or a part of it that names one test. 0 when printed, 2 on an error."""
    out = out or sys.stdout
    try:
        document = load_report(path)
        chosen = _one_test(document["tests"], test, path)
        schedules = chosen.get("schedules")  # its entries are checked by load_report's schema
        if schedules is None and verdict_of(chosen) == "error":
            schedules = []  # it ended in an error before any case ran
        if not isinstance(schedules, list):
            raise CrashpointsError(
                f"{path} does not list the schedules {chosen['nodeid']} ran (a report written "
                "before they were recorded); run the tests again to write a new one."
            )
    except CrashpointsError as exc:
        print(f"crashpoints show: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    failed = sum(1 for run in schedules if run.get("verdict") != "passed")
    print(
        f"{chosen['nodeid']} ({verdict_of(chosen)}): {len(schedules)} schedule(s) run, "
        f"{len(schedules) - failed} passed, {failed} failed",
        file=out,
    )
    if chosen.get("error"):
        print(f"error: {chosen['error']}", file=out)
    try:
        for line in schedule_lines(schedules, fingerprints=True):
            print(line, file=out)
        out.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0


def _one_test(tests: list[dict[str, Any]], wanted: str, path: Path) -> dict[str, Any]:
    exact = [t for t in tests if t["nodeid"] == wanted]
    if exact:
        return exact[0]
    matches = [t for t in tests if wanted in t["nodeid"]]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise CrashpointsError(
            f"no test in {path} matches {wanted!r}; `crashpoints show {path}` lists them."
        )
    names = ", ".join(t["nodeid"] for t in matches[:3]) + (", ..." if len(matches) > 3 else "")
    raise CrashpointsError(
        f"{len(matches)} tests in {path} match {wanted!r} ({names}); give more of the node id."
    )


def show_html(path: Path, output: Path, *, out: TextIO | None = None) -> int:
    """Write the HTML report of a JSON report to ``output``. 0 when written, 2 on an error."""
    from .._plugin.html import render_html

    out = out or sys.stdout
    try:
        if output.resolve() == path.resolve():
            raise CrashpointsError(
                f"the HTML would overwrite the report itself ({output}); pass -o PATH."
            )
        document = load_report(path)
        write_atomically(output, render_html(document))
    except CrashpointsError as exc:
        print(f"crashpoints show: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    except OSError as exc:
        print(
            f"crashpoints show: error: cannot write {output}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return GATE_ERROR
    print(f"wrote {output}", file=out)
    return 0
