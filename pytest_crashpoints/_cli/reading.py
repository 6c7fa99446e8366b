"""The gate's reports: read a ``--crashpoints-report`` JSON file, render its table and Markdown."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._harness.verdict.printable import for_terminal, markdown_code, markdown_fence, markdown_text
from .._plugin.columns import columns
from .._plugin.results import REPORT_VERSION
from .._plugin.schema import problem, report_schema
from .._plugin.summary import broken_invariants, verdict_of
from ..errors import CrashpointsError

__all__ = ["load_report", "render_markdown", "render_table", "report_totals"]


def load_report(path: Path) -> dict[str, Any]:
    """Read a ``--crashpoints-report`` JSON file; raise CrashpointsError if it is not one of
    this format version, or does not follow its schema (``schemas/report-vN.json``)."""
    if not path.is_file():
        raise CrashpointsError(f"no report at {path}; run `crashpoints gate` to write one.")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CrashpointsError(
            f"{path} is not a crashpoints report (not JSON: {exc}); point at the file "
            "written by --crashpoints-report."
        ) from None
    except (ValueError, RecursionError) as exc:  # a number too long to read, nesting too deep
        what = "nested too deep" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
        raise CrashpointsError(
            f"{path} is not a crashpoints report ({what}); point at the file written by "
            "--crashpoints-report."
        ) from None
    if not isinstance(document, dict) or "tests" not in document:
        raise CrashpointsError(f"{path} is JSON but not a crashpoints report (no 'tests').")
    version = document.get("version")
    if version != REPORT_VERSION or isinstance(version, bool):
        raise CrashpointsError(
            f"{path} is a crashpoints report of format version {version!r}; "
            f"this release reads version {REPORT_VERSION}. Use the release that wrote it."
        )
    damage = problem(document, report_schema(REPORT_VERSION))
    if damage is not None:
        raise CrashpointsError(
            f"{path} is a damaged crashpoints report ({damage}); run the tests again to "
            "write a new one."
        )
    return document


def report_totals(tests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    verdicts = [verdict_of(t) for t in tests]
    reached = sorted({p for t in tests for p, row in t["coverage"].items() if row["reached"]})
    # Exploration stops at the first failure: only a test that ran to its end has gaps. A
    # test marked strict_coverage=False accepted its gaps: they are listed, not held.
    held = [t for t in tests if not t.get("failure") and t.get("strict_coverage", True)]
    unreached = sorted({p for t in held for p in t.get("unreached", [])})
    unkilled = sorted({p for t in held for p in t.get("unkilled", [])})
    return {
        "tests": len(tests),
        "cases": sum(int(t["cases"]) for t in tests),
        "passed": verdicts.count("passed"),
        "caught": verdicts.count("caught"),
        "failed": verdicts.count("failed"),
        "errors": verdicts.count("error"),
        "reached": reached,
        "unreached": unreached,
        "unkilled": unkilled,
    }


def why(test: Mapping[str, Any]) -> str:
    """Why a test did not pass, in a few words ("" when it passed or was caught)."""
    verdict = verdict_of(test)
    failure = test.get("failure") or {}
    if test.get("error"):
        origin = test.get("error_origin")
        at = f" at {test['error_at']}" if test.get("error_at") else ""
        return f"error in {origin}{at}: {test['error']}" if origin else f"error: {test['error']}"
    if test.get("expect") and (verdict == "failed" or not failure):
        found = set(broken_invariants(failure))
        if not set(test["expect"]) <= found:
            return "broken agent not caught"
    if verdict != "failed":
        return ""
    if failure.get("invariants"):
        return "invariant violated"
    if failure:
        return "harness error"
    strict = test.get("strict_coverage", True)
    gaps = []
    if strict and test.get("unreached"):
        gaps.append(f"never reached: {', '.join(test['unreached'])}")
    if strict and test.get("unkilled"):
        gaps.append(f"never killed: {', '.join(test['unkilled'])}")
    if strict and test.get("unchecked"):
        gaps.append("not checked: the ledger view reads too little")
    return "; ".join(gaps) or "the test failed (see pytest's output)"


def _rows(tests: Sequence[Mapping[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for test in tests:
        failure = test.get("failure") or {}
        found = ", ".join(str(n) for n in failure.get("invariants", [])) or "-"
        also = [n for n in broken_invariants(failure) if n not in failure.get("invariants", [])]
        if also:  # broken by schedules found after the failure
            found += f"; also {', '.join(str(n) for n in also)}"
        expected = ", ".join(str(n) for n in test.get("expect", [])) or "-"
        row = (test["nodeid"], verdict_of(test), str(test["cases"]), expected, found, why(test))
        rows.append(row)
    return rows


def render_table(document: Mapping[str, Any]) -> str:
    """The plain-text summary the gate prints."""
    tests = document["tests"]
    totals = report_totals(tests)
    header = ("test", "verdict", "cases", "expected", "violations", "why")
    rows = [header, *_rows(tests)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = columns([header, tuple("-" * width for width in widths), *rows[1:]])
    lines += [
        "",
        f"{totals['tests']} tests, {totals['cases']} cases: {totals['passed']} passed, "
        f"{totals['caught']} broken agents caught, {totals['failed']} failed, "
        f"{totals['errors']} error(s)",
        f"points reached: {', '.join(totals['reached']) or 'none'}",
    ]
    if totals["unreached"]:
        lines.append(f"declared but never reached: {', '.join(totals['unreached'])}")
    if totals["unkilled"]:
        lines.append(f"reached but never killed: {', '.join(totals['unkilled'])}")
    return for_terminal("\n".join(lines))


def render_markdown(document: Mapping[str, Any], *, passed: bool) -> str:
    """A Markdown summary for a CI step summary."""
    tests = document["tests"]
    totals = report_totals(tests)
    status = "passed" if passed else "FAILED"
    lines = [f"## crashpoints gate: {status}", ""]
    if document.get("interrupted"):
        lines = [
            "## crashpoints gate: interrupted",
            "",
            "The run was interrupted: only the crash tests that finished are listed.",
            "",
        ]
    lines += [
        f"{totals['tests']} tests, {totals['cases']} crash cases (seed {document.get('seed')}): "
        f"{totals['passed']} passed, {totals['caught']} broken agents caught, "
        f"{totals['failed']} failed, {totals['errors']} error(s).",
        "",
        "| test | verdict | cases | expected | violations | why |",
        "|---|---|---|---|---|---|",
    ]
    # Everything below but the counts comes from the code under test (node ids, point names,
    # messages): written as literal Markdown, never as markup.
    for nodeid, *cells, reason in _rows(tests):
        shown = " | ".join(markdown_text(cell) for cell in cells)
        lines.append(f"| {markdown_code(nodeid)} | {shown} | {markdown_text(reason or '-')} |")
    lines += ["", f"Points reached: {_md_list(totals['reached'])}."]
    if totals["unreached"]:
        lines.append(f"Declared but never reached: {_md_list(totals['unreached'])}.")
    if totals["unkilled"]:
        lines.append(f"Reached but never killed: {_md_list(totals['unkilled'])}.")
    for test in tests:
        unchecked = test.get("unchecked") or []
        heading = f"### {markdown_code(test['nodeid'])}"
        if unchecked and not test.get("failure"):
            lines += [
                "",
                f"Not checked in {markdown_code(test['nodeid'])} (the ledger view reads too "
                "little):",
            ]
            lines += [f"- {markdown_text(what)}" for what in unchecked]
        failure = test.get("failure")
        if test.get("error") and not failure:
            lines += ["", heading, "", markdown_text(why(test))]
        if failure and verdict_of(test) in ("failed", "error"):
            lines += [
                "",
                heading,
                "",
                f"Minimal schedule: {markdown_text(failure['schedule_text'])}",
                "",
                *markdown_fence(failure["violations"] or [str(test.get("error") or "")]),
                "",
                f"Replay: {markdown_code(failure['replay_command'])}",
            ]
            for also in failure.get("also") or []:
                broken = ", ".join(str(n) for n in also["invariants"])
                lines += [
                    "",
                    f"Also breaks invariant(s) {markdown_text(broken)}: "
                    f"{markdown_text(also['schedule_text'])}",
                    "",
                    *markdown_fence(also["violations"]),
                    "",
                    f"Replay: {markdown_code(also['replay_command'])}",
                ]
    return "\n".join(lines) + "\n"


def _md_list(names: Sequence[str]) -> str:
    return ", ".join(markdown_text(name) for name in names) or "none"


