"""``crashpoints gate``: run the crash suites as a deployment gate.

It runs pytest with the plugin over the crash suites (strict coverage on), then writes the
JSON report, JUnit XML and a Markdown summary fit for a CI step summary (appended to
``$GITHUB_STEP_SUMMARY`` when that is set), prints a summary table, and exits non-zero on any
violation, unreached declared point or uncaught broken agent.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .report import load_report, render_markdown, render_table, report_totals

__all__ = ["GATE_ERROR", "gate", "run_pytest"]

GATE_ERROR = 2
NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


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
    status = run_pytest(
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
    totals = report_totals(document["tests"])
    passed = (
        status == 0 and totals["failed"] == 0 and not totals["unreached"] and not totals["unkilled"]
    )
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


def run_pytest(args: Sequence[str]) -> int:
    """Run pytest with the plugin in a fresh interpreter (so it imports, and rewrites,
    everything itself); its output streams through. Returns its exit status."""
    import subprocess

    command = [sys.executable, "-m", "pytest", "-p", "crashpoints", *args]
    return subprocess.run(command, check=False).returncode


