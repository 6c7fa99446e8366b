"""The terminal summary: one section for the whole session, aggregated from every test."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .._harness.case.schedule import COVERAGE_KINDS
from .._harness.verdict.invariants import invariant_key
from .._harness.verdict.printable import for_terminal
from .columns import columns

__all__ = [
    "also_lines",
    "broken_invariants",
    "schedule_lines",
    "summary_lines",
    "verdict_of",
]


def verdict_of(result: Mapping[str, Any]) -> str:
    """passed, caught (a broken-on-purpose agent whose bug was found), failed, or error (the
    test raised before it had a verdict: its ``error`` says what)."""
    if result.get("verdict") == "error":
        return "error"
    if result.get("outcome") != "passed":
        return "failed"
    return "caught" if result.get("expect") else "passed"


def summary_lines(results: Iterable[Mapping[str, Any]], *, seed: int | None) -> list[str]:
    results = list(results)
    cases, points, violations = _tally(results)
    verdicts = [verdict_of(r) for r in results]
    lines = [
        f"{len(results)} crash test(s), {cases} case(s), seed {seed}: "
        f"{verdicts.count('passed')} passed, {verdicts.count('caught')} caught (broken on "
        f"purpose), {verdicts.count('failed')} failed"
        + (f", {verdicts.count('error')} error(s)" if "error" in verdicts else ""),
        f"{'point':<20}{'reached':>10}{'killed':>10}",
    ]
    lines += _point_lines(points)
    recovered = sum(int(r.get("recovered", 0)) for r in results)
    lines.append(f"cases with a kill that recovered cleanly: {recovered}")
    models = [r.get("model") or {} for r in results]
    calls = sum(int(m.get("calls", 0)) for m in models)
    if calls:
        again = sum(int(m.get("asked_again", 0)) for m in models)
        lines.append(
            f"model answers: {calls}, {again} of them to a question asked again (after a "
            "crash or a lost answer)"
        )
    reruns = [r.get("timeout_reruns") or {} for r in results]
    slow = sum(int(r.get("cases", 0)) for r in reruns)
    if slow:
        finished = sum(int(r.get("finished", 0)) for r in reruns)
        lines.append(
            f"cases run again after a process timed out (a longer deadline each time): {slow}, "
            f"{finished} of them then finished in time"
        )
    if violations:
        ordered = sorted(violations.items(), key=lambda item: invariant_key(item[0]))
        found = ", ".join(f"invariant {n}: {c} test(s)" for n, c in ordered)
        lines.append(f"violations: {found}")
    for result in results:
        lines += _result_lines(result)
    return [for_terminal(line) for line in lines]


def _tally(
    results: Sequence[Mapping[str, Any]],
) -> tuple[int, dict[str, dict[str, int]], dict[int | str, int]]:
    """Summed over ``results``: the cases, each point's reached and killed counts, and how
    many tests broke each invariant."""
    points: dict[str, dict[str, int]] = {}
    violations: dict[int | str, int] = {}
    cases = 0
    for result in results:
        cases += int(result.get("cases", 0))
        for point, row in result.get("coverage", {}).items():
            agg = points.setdefault(point, {"reached": 0, "killed": 0})
            agg["reached"] += int(row.get("reached", 0))
            agg["killed"] += int(row.get("killed", 0))
        for number in broken_invariants(result.get("failure")):
            violations[number] = violations.get(number, 0) + 1
    return cases, points, violations


def broken_invariants(failure: Mapping[str, Any] | None) -> list[int | str]:
    """Every invariant a test's failure broke, those of the schedules found after it
    (``failure.also``) too, each once, in order (the six by number, then your own)."""
    if not failure:
        return []
    found = {*failure.get("invariants", [])}
    found |= {n for also in failure.get("also") or [] for n in also.get("invariants", [])}
    return sorted(found, key=invariant_key)


def also_lines(nodeid: str, failure: Mapping[str, Any]) -> list[str]:
    """One line per schedule found after a test's failure for other invariants: what it
    breaks, the schedule, and its replay command."""
    return [
        f"also breaks invariant(s) {', '.join(str(n) for n in also['invariants'])} in "
        f"{nodeid}: {also['schedule_text']}; replay: {also['replay_command']}"
        for also in failure.get("also") or []
    ]


def _point_lines(points: Mapping[str, Mapping[str, int]]) -> list[str]:
    """The coverage table's rows, one per fail point, and the faults injected."""
    lines = []
    # Faults that are not a place in the code (lost responses, racing recoveries...) are
    # injected, never "killed at": they get a line of their own, counted in cases.
    faults = {p: row for p, row in points.items() if p in COVERAGE_KINDS and len(p) > 1}
    for point in sorted(points.keys() - faults.keys(), key=lambda p: (len(p) > 1, p)):
        row = points[point]
        lines.append(f"{point:<20}{row['reached']:>10}{row['killed']:>10}")
    if faults:
        injected = ", ".join(f"{kind} {row['reached']}" for kind, row in sorted(faults.items()))
        lines.append(f"faults injected (cases): {injected}")
    return lines


def _result_lines(result: Mapping[str, Any]) -> list[str]:
    """What the summary says of one test: its error, or what it left unproven, how it
    differs from the reference, and how to replay its failure."""
    if verdict_of(result) == "error":
        at = f" at {result['error_at']}" if result.get("error_at") else ""
        return [
            f"ERROR in {result['nodeid']} ({result.get('error_origin', 'harness')}{at}): "
            f"{result.get('error', 'the test raised')}"
        ]
    lines = []
    # Exploration stops at the first failure: then unreached points say nothing.
    if result.get("unreached") and not result.get("failure"):
        lines.append(
            f"UNREACHED in {result['nodeid']}: {', '.join(result['unreached'])} "
            "(declared but never reached: it proves nothing about them)"
        )
    if result.get("unkilled") and not result.get("failure"):
        lines.append(
            f"NEVER KILLED in {result['nodeid']}: {', '.join(result['unkilled'])} "
            "(reached, but no kill scheduled there took effect)"
        )
    if result.get("out_of_reach") and not result.get("failure"):
        lines += [
            f"OUT OF REACH in {result['nodeid']}: {', '.join(points)}: {why}"
            for why, points in _grouped(result["out_of_reach"]).items()
        ]
    if result.get("not_applicable") and not result.get("failure"):
        lines.append(
            f"NOT APPLICABLE in {result['nodeid']} (left out: a point its recovery never "
            "reaches, or nothing to fail, would test nothing): "
            f"{'; '.join(result['not_applicable'])}"
        )
    unchecked = result.get("unchecked") or ()
    if unchecked and not result.get("failure"):
        lines.append(f"NOT CHECKED in {result['nodeid']} (the ledger view reads too little):")
        lines += [f"    {what}" for what in unchecked]
    differences = result.get("differences") or []
    if differences:
        first = differences[0]
        lines.append(
            f"differs from the reference in {result['nodeid']}: {len(differences)} "
            f"schedule(s); e.g. {first['schedule']}: worker "
            f"{'; '.join(first['worker_only']) or '-'} | reference "
            f"{'; '.join(first['reference_only']) or '-'}"
        )
    failure = result.get("failure")
    if failure and verdict_of(result) == "failed":
        lines.append(f"replay {result['nodeid']}: {failure['replay_command']}")
        lines += also_lines(result["nodeid"], failure)
    return lines


def _grouped(reasons: Mapping[str, str]) -> dict[str, list[str]]:
    """Points by the reason they share, in the order first given."""
    grouped: dict[str, list[str]] = {}
    for point, why in reasons.items():
        grouped.setdefault(why, []).append(point)
    return grouped


def schedule_lines(
    schedules: Iterable[Mapping[str, Any]], *, fingerprints: bool = False
) -> list[str]:
    """One aligned line per schedule a test ran: number, verdict, time, where it came from,
    the schedule (and the invariants it broke); with ``fingerprints``, a header and the first
    12 hex digits of each final state's fingerprint too."""
    rows = []
    for number, run in enumerate(schedules, start=1):
        broken = run.get("invariants") or []
        text = str(run.get("schedule_text", ""))
        if broken:
            text += f" (broke invariant(s) {', '.join(str(n) for n in broken)})"
        row = [
            str(number),
            str(run.get("verdict", "")),
            f"{float(run.get('seconds', 0.0)):.2f}s",
            str(run.get("phase", "")),
        ]
        if fingerprints:
            row.append(str(run.get("fingerprint", ""))[:12])
        rows.append([*row, text])
    if not rows:
        return []
    header = ["#", "verdict", "time", "from"] + (["fingerprint"] if fingerprints else [])
    header.append("schedule")
    table = [header, *rows] if fingerprints else rows
    return [for_terminal(line) for line in columns(table, right={0, 2}, free_last=True)]
