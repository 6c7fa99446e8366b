"""The test results the plugin gathers: carried on each test's report (so they come back from
xdist workers), aggregated at the end of the session, and written as the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["REPORT_ATTR", "REPORT_VERSION", "collect", "write_report"]

#: Format version of the JSON report (``--crashpoints-report``).
REPORT_VERSION = 1
#: The attribute of a pytest ``TestReport`` that carries a crash test's result, as JSON.
REPORT_ATTR = "crashpoints"


def collect(terminalreporter: Any) -> list[dict[str, Any]]:
    results = []
    for reports in terminalreporter.stats.values():
        for report in reports:
            raw = getattr(report, REPORT_ATTR, None)
            if isinstance(raw, str) and getattr(report, "when", None) == "call":
                data = json.loads(raw)
                data["outcome"] = report.outcome
                results.append(data)
    return sorted(results, key=lambda d: d["nodeid"])


def write_report(
    path: Path, results: list[dict[str, Any]], *, seed: int, interrupted: bool = False
) -> None:
    """Write the JSON report to ``path`` atomically (a partial file, then a rename).
    ``interrupted``: the run was stopped (Ctrl-C), and the report holds the tests that
    finished."""
    document = {
        "version": REPORT_VERSION,
        "seed": seed,
        "interrupted": interrupted,
        "tests": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    partial.replace(path)
