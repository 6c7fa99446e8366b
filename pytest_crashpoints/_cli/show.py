"""``crashpoints show REPORT.json``: the timeline and evidence of each failure in a report; the
schedules one test ran (``--schedules TEST``); the HTML report (``--html -o PATH``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from .._harness.verdict.printable import for_terminal
from .._plugin.summary import schedule_lines, verdict_of
from ..errors import CrashpointsError
from .gate import GATE_ERROR, say_write_error, write_atomically
from .reading import load_report, render_table

__all__ = ["show", "show_html", "show_schedules"]


class _Escaped:
    """A text stream that writes what the code under test said with its control characters
    escaped (a report's names, messages and timelines come from it)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(for_terminal(text))

    def flush(self) -> None:
        self.stream.flush()


def show(path: Path, *, out: TextIO | None = None) -> int:
    """Print the timeline and evidence of every failure in a report."""
    stream = _Escaped(out or sys.stdout)
    try:
        document = load_report(path)
    except CrashpointsError as exc:
        print(f"crashpoints show: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    print(render_table(document), file=stream)
    for test in document["tests"]:
        if test.get("error") and not test.get("failure"):
            title = f"{test['nodeid']} ({verdict_of(test)})"
            print("", file=stream)
            print(title, file=stream)
            print("=" * len(title), file=stream)
            origin = test.get("error_origin")
            at = f" at {test['error_at']}" if test.get("error_at") else ""
            print(f"error in {origin}{at}:" if origin else "error:", file=stream)
            print(test["error"], file=stream)
    failures = [t for t in document["tests"] if t.get("failure")]
    for test in failures:
        failure = test["failure"]
        title = f"{test['nodeid']} ({verdict_of(test)})"
        print("", file=stream)
        print(title, file=stream)
        print("=" * len(title), file=stream)
        print(f"minimal schedule: {failure['schedule_text']}", file=stream)
        for violation in failure["violations"]:
            print(violation, file=stream)
        print("timeline:", file=stream)
        print(failure["timeline"], file=stream)
        print(f"replay: {failure['replay_command']}", file=stream)
        for also in failure.get("also") or []:
            broken = ", ".join(str(n) for n in also["invariants"])
            print(f"also breaks invariant(s) {broken}: {also['schedule_text']}", file=stream)
            for violation in also["violations"]:
                print(violation, file=stream)
            print(f"replay: {also['replay_command']}", file=stream)
        if failure.get("also_stopped"):
            print(f"the search for other invariants stopped early: {failure['also_stopped']}",
                  file=stream)
    return 1 if any(verdict_of(t) in ("failed", "error") for t in document["tests"]) else 0


def show_schedules(path: Path, test: str, *, out: TextIO | None = None) -> int:
    """Print the schedules one test of a report ran, with their verdicts; ``test`` is its node
    id or a part of it that names one test. 0 when printed, 2 on an error."""
    stream = _Escaped(out or sys.stdout)
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
        file=stream,
    )
    if chosen.get("error"):
        print(f"error: {chosen['error']}", file=stream)
    try:
        for line in schedule_lines(schedules, fingerprints=True):
            print(line, file=stream)
        stream.flush()
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


def _write_derived(
    path: Path, output: Path, what: str, render: Callable[[dict[str, Any]], str],
    out: TextIO | None,
) -> str | None:
    """Write ``render(report)`` to ``output``; the text written, or ``None`` after saying on
    stderr why not (the caller exits 2)."""
    try:
        if output.resolve() == path.resolve():
            raise CrashpointsError(
                f"the {what} would overwrite the report itself ({output}); pass -o PATH."
            )
        text = render(load_report(path))
        write_atomically(output, text)
    except (CrashpointsError, OSError) as exc:
        say_write_error("show", output, exc)
        return None
    return text


def show_html(path: Path, output: Path, *, out: TextIO | None = None) -> int:
    """Write the HTML report of a JSON report to ``output``. 0 when written, 2 on an error."""
    from .._plugin.html import render_html

    if _write_derived(path, output, "HTML", render_html, out) is None:
        return GATE_ERROR
    print(f"wrote {output}", file=out or sys.stdout)
    return 0


def show_otel(path: Path, output: Path, *, out: TextIO | None = None) -> int:
    """Write the failing cases of a JSON report as OpenTelemetry traces (OTLP/JSON) to
    ``output``. 0 when written, 2 on an error."""
    import json

    from .._plugin.otel import render_otlp

    text = _write_derived(path, output, "traces", render_otlp, out)
    if text is None:
        return GATE_ERROR
    spans = json.loads(text)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    cases = sum(1 for span in spans if "parentSpanId" not in span)
    print(f"wrote {output}: {cases} failing case(s), {len(spans)} span(s)",
          file=out or sys.stdout)
    return 0
