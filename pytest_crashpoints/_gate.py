"""``crashpoints gate``, ``replay`` and ``show``: the deployment gate and its reports.

``gate`` runs pytest with the plugin over the crash suites (strict coverage on), then writes
the JSON report, JUnit XML and a Markdown summary fit for a CI step summary (appended to
``$GITHUB_STEP_SUMMARY`` when that is set), prints a summary table, and exits non-zero on any
violation, unreached declared point or uncaught broken agent.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ._errors import CrashpointsError
from ._summary import verdict_of

__all__ = ["gate", "load_report", "render_markdown", "render_table", "replay", "show"]

REPORT_VERSION = 1
GATE_ERROR = 2
NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def load_report(path: Path) -> dict[str, Any]:
    """Read a ``--crashpoints-report`` JSON file; raise CrashpointsError if it is not one."""
    if not path.is_file():
        raise CrashpointsError(f"no report at {path}; run `crashpoints gate` to write one.")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CrashpointsError(
            f"{path} is not a crashpoints report (not JSON: {exc}); point at the file "
            "written by --crashpoints-report."
        ) from None
    if not isinstance(document, dict) or "tests" not in document:
        raise CrashpointsError(f"{path} is JSON but not a crashpoints report (no 'tests').")
    if document.get("version") != REPORT_VERSION:
        raise CrashpointsError(
            f"{path} is a crashpoints report of format version {document.get('version')!r}; "
            f"this release reads version {REPORT_VERSION}. Use the release that wrote it."
        )
    return document


def _totals(tests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    verdicts = [verdict_of(t) for t in tests]
    reached = sorted({p for t in tests for p, row in t["coverage"].items() if row["reached"]})
    # Exploration stops at the first failure: only a test that ran to its end has gaps.
    unreached = sorted({p for t in tests if not t.get("failure") for p in t.get("unreached", [])})
    return {
        "tests": len(tests),
        "cases": sum(int(t["cases"]) for t in tests),
        "passed": verdicts.count("passed"),
        "caught": verdicts.count("caught"),
        "failed": verdicts.count("failed"),
        "reached": reached,
        "unreached": unreached,
    }


def _rows(tests: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for test in tests:
        failure = test.get("failure") or {}
        found = ", ".join(str(n) for n in failure.get("invariants", [])) or "-"
        expected = ", ".join(str(n) for n in test.get("expect", [])) or "-"
        rows.append((test["nodeid"], verdict_of(test), str(test["cases"]), expected, found))
    return rows


def render_table(document: Mapping[str, Any]) -> str:
    """The plain-text summary the gate prints."""
    tests = document["tests"]
    totals = _totals(tests)
    header = ("test", "verdict", "cases", "expected", "violations")
    rows = [header, *_rows(tests)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [
        "",
        f"{totals['tests']} tests, {totals['cases']} cases: {totals['passed']} passed, "
        f"{totals['caught']} broken agents caught, {totals['failed']} failed",
        f"points reached: {', '.join(totals['reached']) or 'none'}",
    ]
    if totals["unreached"]:
        lines.append(f"declared but never reached: {', '.join(totals['unreached'])}")
    return "\n".join(lines)


def render_markdown(document: Mapping[str, Any], *, passed: bool) -> str:
    """A Markdown summary for a CI step summary."""
    tests = document["tests"]
    totals = _totals(tests)
    status = "passed" if passed else "FAILED"
    lines = [
        f"## crashpoints gate: {status}",
        "",
        f"{totals['tests']} tests, {totals['cases']} crash cases (seed {document.get('seed')}): "
        f"{totals['passed']} passed, {totals['caught']} broken agents caught, "
        f"{totals['failed']} failed.",
        "",
        "| test | verdict | cases | expected | violations |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| `{n}` | {v} | {c} | {e} | {f} |" for n, v, c, e, f in _rows(tests)]
    lines += ["", f"Points reached: {', '.join(totals['reached']) or 'none'}."]
    if totals["unreached"]:
        lines.append(f"Declared but never reached: {', '.join(totals['unreached'])}.")
    for test in tests:
        failure = test.get("failure")
        if failure and verdict_of(test) == "failed":
            lines += [
                "",
                f"### `{test['nodeid']}`",
                "",
                f"Minimal schedule: {failure['schedule_text']}",
                "",
                "```",
                *failure["violations"],
                "```",
                "",
                f"Replay: `{failure['replay_command']}`",
            ]
    return "\n".join(lines) + "\n"


def gate(
    paths: Sequence[str],
    *,
    report: Path,
    junit: Path,
    markdown: Path,
    pytest_args: Sequence[str] = (),
    out: TextIO | None = None,
) -> int:
    """Run the crash suites under ``paths`` as a deployment gate; return the exit status."""
    out = out or sys.stdout
    missing = [p for p in paths if not Path(p.split("::")[0]).exists()]
    if missing:
        print(f"crashpoints gate: error: no such path: {', '.join(missing)}", file=sys.stderr)
        return GATE_ERROR
    report.unlink(missing_ok=True)
    status = _pytest(
        [
            "--crashpoints-strict-coverage",
            f"--crashpoints-report={report}",
            f"--junitxml={junit}",
            *pytest_args,
            *paths,
        ]
    )
    if status == NO_TESTS_COLLECTED or not report.exists():
        print(
            f"crashpoints gate: error: no crash tests ran under {', '.join(paths)} "
            f"(pytest exit {status}); mark tests with @pytest.mark.crashpoints(...).",
            file=sys.stderr,
        )
        return GATE_ERROR
    document = load_report(report)
    if not document["tests"]:
        print("crashpoints gate: error: no crash tests ran.", file=sys.stderr)
        return GATE_ERROR
    totals = _totals(document["tests"])
    passed = status == 0 and totals["failed"] == 0 and not totals["unreached"]
    text = render_markdown(document, passed=passed)
    markdown.write_text(text, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text)
    print("", file=out)
    print(render_table(document), file=out)
    print(f"report: {report}  junit: {junit}  summary: {markdown}", file=out)
    print(f"crashpoints gate: {'passed' if passed else 'FAILED'}", file=out)
    return 0 if passed else (status or 1)


def _pytest(args: Sequence[str]) -> int:
    """Run pytest with the plugin in a fresh interpreter (so it imports, and rewrites,
    everything itself); its output streams through. Returns its exit status."""
    import subprocess

    command = [sys.executable, "-m", "pytest", "-p", "crashpoints", *args]
    return subprocess.run(command, check=False).returncode


def replay(token: str, *, pytest_args: Sequence[str] = ()) -> int:
    """Run the one schedule of a replay token against the test it came from."""
    from ._schedule import read_token

    try:
        read = read_token(token)
    except CrashpointsError as exc:
        print(f"crashpoints replay: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    if not read.nodeid:
        print(
            "crashpoints replay: error: this token does not name its test; run "
            f"`pytest <test> --crashpoints-replay={token}` instead.",
            file=sys.stderr,
        )
        return GATE_ERROR
    args = [read.nodeid, f"--crashpoints-replay={token}"]
    if read.seed is not None:
        args.append(f"--crashpoints-seed={read.seed}")
    return _pytest([*args, *pytest_args])


def show(path: Path, *, out: TextIO | None = None) -> int:
    """Print the timeline and evidence of every failure in a report."""
    out = out or sys.stdout
    try:
        document = load_report(path)
    except CrashpointsError as exc:
        print(f"crashpoints show: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    print(render_table(document), file=out)
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
