"""The test results the plugin gathers: carried on each test's report (so they come back from
xdist workers), aggregated at the end of the session, and written as the JSON report."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "REPORT_ATTR",
    "REPORT_VERSION",
    "collect",
    "junit_properties",
    "new_file_beside",
    "report_document",
    "write_report",
    "write_text",
]

#: Format version of the JSON report (``--crashpoints-report``).
REPORT_VERSION = 1
#: The attribute of a pytest ``TestReport`` that carries a crash test's result, as JSON.
REPORT_ATTR = "crashpoints"


def junit_properties(data: dict[str, Any], *, outcome: str) -> list[tuple[str, object]]:
    """What a crash test adds to its JUnit XML ``<properties>``: the seed, the number of
    cases, the verdict, and, for a failing schedule, the invariants broken and its replay
    token, and for each schedule found after it for other invariants, those and its token."""
    from .summary import verdict_of

    properties: list[tuple[str, object]] = [
        ("crashpoints.seed", data.get("seed")),
        ("crashpoints.cases", data.get("cases")),
        ("crashpoints.verdict", verdict_of({**data, "outcome": outcome})),
    ]
    failure = data.get("failure")
    if failure:
        invariants = " ".join(str(number) for number in failure.get("invariants", []))
        properties.append(("crashpoints.invariants", invariants))
        properties.append(("crashpoints.replay", failure.get("token")))
        # The other invariants broken, each by a schedule found after the failure.
        for also in failure.get("also") or []:
            invariants = " ".join(str(number) for number in also.get("invariants", []))
            properties.append(("crashpoints.also", f"{invariants} {also.get('token')}"))
    return properties


def collect(terminalreporter: Any) -> list[dict[str, Any]]:
    """Every crash test's result, sorted by node id. A test whose process died before it
    could report (an xdist worker that crashed under it) is there too, as failed with no
    cases, its ``error`` saying what happened."""
    results: dict[str, dict[str, Any]] = {}
    crashed: dict[str, Any] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            raw = getattr(report, REPORT_ATTR, None)
            when = getattr(report, "when", None)
            if isinstance(raw, str) and when in ("setup", "call"):
                data = json.loads(raw)
                data["outcome"] = report.outcome
                results[data["nodeid"]] = data
            elif when == "???" and getattr(report, "failed", False):  # xdist: a crashed worker
                crashed[report.nodeid] = report
    for nodeid, report in crashed.items():
        results.setdefault(nodeid, _died(nodeid, report))
    return [results[nodeid] for nodeid in sorted(results)]


def _died(nodeid: str, report: Any) -> dict[str, Any]:
    text = str(getattr(report, "longrepr", "") or "").strip()
    return {
        "nodeid": nodeid,
        "outcome": "failed",
        "verdict": "error",
        "cases": 0,
        "coverage": {},
        "failure": None,
        "error": text.splitlines()[0] if text else "the test's process died",
        "error_origin": "harness",
        "error_phase": "call",
    }


def report_document(
    results: list[dict[str, Any]],
    *,
    seed: int,
    interrupted: bool = False,
    shard: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The JSON report of a session. ``interrupted``: the run was stopped (Ctrl-C), and the
    report holds the tests that finished. ``shard``: ``(K, N)`` when the session ran shard K
    of N of each crash test's schedules (``crashpoints merge`` combines the N reports)."""
    return {
        "version": REPORT_VERSION,
        "seed": seed,
        "interrupted": interrupted,
        "shard": None if shard is None else {"index": shard[0], "total": shard[1]},
        "tests": results,
    }


def write_report(
    path: Path,
    results: list[dict[str, Any]],
    *,
    seed: int,
    interrupted: bool = False,
    shard: tuple[int, int] | None = None,
) -> None:
    """Write the JSON report to ``path`` atomically (a partial file, then a rename)."""
    document = report_document(results, seed=seed, interrupted=interrupted, shard=shard)
    write_text(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: through a temporary file of its own in the same
    folder (created new, with a name nobody can guess, so never through a link someone
    planted), renamed over ``path``. A reader sees the old file or the new one, never a part;
    a symlink at ``path`` is replaced by the file, its target left untouched. Its folders are
    created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with new_file_beside(path, suffix=".partial") as temporary:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)


@contextlib.contextmanager
def new_file_beside(path: Path, *, suffix: str) -> Iterator[Path]:
    """A new, empty file in ``path``'s folder, named after it (``.NAME.XXXXXXXX<suffix>``),
    readable as a file the user made (``0666`` less the umask); removed when the block ends
    unless it was renamed meanwhile."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
    finally:
        os.close(fd)
    try:
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current
