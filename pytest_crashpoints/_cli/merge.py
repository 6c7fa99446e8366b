"""``crashpoints merge A.json B.json ... -o merged.json``: the reports of the shards of one run
(``--crashpoints-shard=K/N`` on N machines) combined into the report one machine would have
written.

Each test is matched by node id. Its schedules are put back in the order one machine runs
them: the fault-free case once, then the exhaustive schedules by their index in the
enumeration, then the generated (Hypothesis) and coverage schedules, shard by shard. A case
two shards both ran (same schedule, same end state: the fault-free one, say) counts once.
The failure reported is the one one machine finds first (the first failing exhaustive
schedule). One machine then goes on through the rest of the enumeration for the invariants
that failure did not break, and so do the shards through theirs: the merge keeps every case,
and the schedules found after the failure (``failure.also``) are those one machine would
report: for each invariant the failure did not break, the first schedule in enumeration order
that breaks it (from every shard's failure and schedules found after it; for Hypothesis
shards, shard by shard). A failure after which no shard looked further (it broke no
invariant, or is no verdict on the agent) ends the cases kept, as it ends one machine's run.
A broken agent's ``expect=`` is judged again on what the merged failure and those schedules
broke. The cases, coverage and strict coverage are counted again on what is kept: a point
one shard never reached but another did is reached.

The merged report has ``"shard": null`` and ``"merged_shards": N``; ``crashpoints show`` and
the gate's readers take it as any other report.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._harness.case.schedule import COVERAGE_KINDS
from .._plugin.results import REPORT_VERSION
from .._plugin.summary import broken_invariants, verdict_of
from ..errors import CrashpointsError
from .gate import GATE_ERROR, say_write_error, write_atomically
from .reading import load_report, render_table

__all__ = ["merge", "merge_reports"]

Report = dict[str, Any]


def merge(paths: Sequence[Path], output: Path, *, out: TextIO | None = None) -> int:
    """Merge the shard reports at ``paths`` into ``output``: 0 when written, 2 on an error
    (said in one line on stderr; nothing is written)."""
    out = out or sys.stdout
    try:
        _not_an_input(paths, output)
        merged = merge_reports([(path, _load(path)) for path in paths])
        write_atomically(output, json.dumps(merged, indent=2, sort_keys=True) + "\n")
    except (CrashpointsError, OSError) as exc:
        say_write_error("merge", output, exc)
        return GATE_ERROR
    print(render_table(merged), file=out)
    print(f"crashpoints merge: wrote {output} ({len(paths)} shards)", file=out)
    return 0


def _not_an_input(paths: Sequence[Path], output: Path) -> None:
    if any(path.resolve() == output.resolve() for path in paths):
        raise CrashpointsError(
            f"-o {output} is one of the reports to merge; write the merged report to a new "
            "file (-o merged.json)."
        )


def _load(path: Path) -> Report:
    if not path.is_file():
        raise CrashpointsError(
            f"no report at {path}; each shard writes one with --crashpoints-report=PATH."
        )
    return load_report(path)


def merge_reports(reports: Sequence[tuple[Path, Report]]) -> Report:
    """The report of the run whose shards wrote ``reports`` (each with the file it came
    from, for the messages). Raises :class:`CrashpointsError` if they are not every shard of
    one run, each once."""
    by_shard = _check_shards(reports)
    _check_same_tests(by_shard)
    total = len(by_shard)
    nodeids = sorted({test["nodeid"] for _, report in reports for test in report["tests"]})
    tests = []
    for nodeid in nodeids:
        entries = [
            next((t for t in by_shard[k]["tests"] if t["nodeid"] == nodeid), None)
            for k in range(1, total + 1)
        ]
        tests.append(_merge_test(nodeid, entries))
    first = by_shard[1]
    return {
        "version": REPORT_VERSION,
        "seed": first["seed"],
        "interrupted": any(report["interrupted"] for report in by_shard.values()),
        "shard": None,
        "merged_shards": total,
        "tests": tests,
    }


def _check_shards(reports: Sequence[tuple[Path, Report]]) -> dict[int, Report]:
    """The reports by shard index, once each check passed."""
    if not reports:
        raise CrashpointsError("no reports to merge; pass the report of every shard.")
    for path, report in reports:
        if not isinstance(report.get("shard"), dict):
            raise CrashpointsError(
                f"{path} is not the report of a shard (it has no shard: written without "
                "--crashpoints-shard, or merged already); merge the reports written with "
                "--crashpoints-shard=K/N."
            )
    path0, report0 = reports[0]
    for path, report in reports[1:]:
        if report["seed"] != report0["seed"]:
            raise CrashpointsError(
                f"the reports are of different runs: {path0} has seed {report0['seed']}, "
                f"{path} seed {report['seed']}. Give every shard the same "
                "--crashpoints-seed (the CI run's id, say)."
            )
        if report["shard"]["total"] != report0["shard"]["total"]:
            raise CrashpointsError(
                f"the reports split the run differently: {path0} is shard "
                f"{_shard(report0)}, {path} shard {_shard(report)}; merge the shards of one "
                "run."
            )
    total = int(report0["shard"]["total"])
    by_shard: dict[int, Report] = {}
    origin: dict[int, Path] = {}
    for path, report in reports:
        index = int(report["shard"]["index"])
        if index > total:
            raise CrashpointsError(f"{path} is shard {_shard(report)}, which is not one.")
        if index in by_shard:
            raise CrashpointsError(
                f"shard {index} of {total} is given twice ({origin[index]} and {path}); "
                "pass each shard's report once."
            )
        by_shard[index] = report
        origin[index] = path
    missing = [k for k in range(1, total + 1) if k not in by_shard]
    if missing:
        raise CrashpointsError(
            f"shard(s) {', '.join(map(str, missing))} of {total} missing: the merge needs "
            "the report of every shard of the run."
        )
    return by_shard


def _check_same_tests(by_shard: dict[int, Report]) -> None:
    """Every shard that finished ran the same tests, declared alike: shards of different
    selections, or of different code, are not one run."""
    finished = {k: r for k, r in by_shard.items() if not r["interrupted"]}
    if not finished:
        return
    first, report0 = min(finished.items())
    tests0 = {t["nodeid"]: t for t in report0["tests"]}
    for k, report in sorted(finished.items()):
        tests = {t["nodeid"]: t for t in report["tests"]}
        for nodeid in sorted(set(tests) ^ set(tests0)):
            has, lacks = (k, first) if nodeid in tests else (first, k)
            raise CrashpointsError(
                f"{nodeid} is in the report of shard {has} but not in that of shard {lacks}: "
                "run every shard with the same tests selected (the same pytest arguments "
                "but --crashpoints-shard)."
            )
        for nodeid, test in sorted(tests.items()):
            for field in ("declared", "mode"):
                if test.get(field) != tests0[nodeid].get(field):
                    raise CrashpointsError(
                        f"{nodeid} differs between shards: shard {first} has {field} "
                        f"{tests0[nodeid].get(field)!r}, shard {k} {test.get(field)!r}; the "
                        "shards ran different code or options. Run every shard from the same "
                        "commit with the same options."
                    )


def _shard(report: Report) -> str:
    return f"{report['shard']['index']}/{report['shard']['total']}"


def _merge_test(nodeid: str, entries: Sequence[Report | None]) -> Report:
    """One test's entries, shard by shard (``None`` where a shard's report lacks it)."""
    present = [(k, t) for k, t in enumerate(entries, start=1) if t is not None]
    runs = _ordered_runs(present)
    deciding = _deciding(present, runs)
    merged = dict(deciding)
    if deciding.get("failure") and _looked_further(deciding):
        merged["failure"] = _merged_also(deciding, present, runs)
        _judge_expected(merged)
    elif (first := _first_failing(runs)) is not None:
        runs = runs[: first + 1]  # where one machine stops
    if any(isinstance(t.get("schedules"), list) for _, t in present):
        merged.update(_counted(present, runs))
        if _held_to_coverage(merged):
            merged["outcome"] = merged["verdict"] = "failed"
    missing = [str(k) for k, t in enumerate(entries, start=1) if t is None]
    if missing:
        merged.update(
            verdict="error",
            outcome="failed",
            error=f"{nodeid} is missing from the report of shard(s) {', '.join(missing)} of "
            f"{len(entries)} (that run was interrupted before it); run those shards again",
            error_origin="harness",
            error_phase="call",
        )
    return merged


def _ordered_runs(present: Sequence[tuple[int, Report]]) -> list[Report]:
    """Every shard's cases in one machine's order, each distinct case once."""

    def key(item: tuple[int, int, Report]) -> tuple[int, int, int, int]:
        shard, position, run = item
        if run.get("phase") == "fault-free":
            return (0, 0, shard, position)
        if run.get("phase") == "exhaustive" and isinstance(run.get("index"), int):
            return (1, run["index"], shard, position)
        return (2, shard, position, 0)

    found = [
        (shard, position, run)
        for shard, test in present
        for position, run in enumerate(test.get("schedules") or [])
    ]
    runs: list[Report] = []
    seen: set[tuple[str, str]] = set()
    for item in sorted(found, key=key):
        run = item[2]
        case = (run["schedule_text"], run["fingerprint"])
        if case in seen:
            continue
        seen.add(case)
        runs.append(run)
    return runs


def _first_failing(runs: Sequence[Report]) -> int | None:
    """Where the first failing case of the fault-free and exhaustive phases is in ``runs``
    (where one machine's failure is found), if there is one."""
    for position, run in enumerate(runs):
        ordered = run.get("phase") == "fault-free" or (
            run.get("phase") == "exhaustive" and isinstance(run.get("index"), int)
        )
        if ordered and run["verdict"] != "passed":
            return position
    return None


def _deciding(present: Sequence[tuple[int, Report]], runs: Sequence[Report]) -> Report:
    """The entry whose verdict, outcome and failure the merged test takes: a test that
    raised (its exploration is incomplete); else the shard of the failure one machine
    finds first (the first failing case of the fault-free and exhaustive phases), else the
    first shard that found a failure; else the first that did not pass; else the first."""
    for _, test in present:
        if verdict_of(test) == "error" and not test.get("failure"):
            return test
    first = _first_failing(runs)
    if first is not None:
        for _, test in present:
            failure = test.get("failure") or {}
            if failure.get("schedule_text") == runs[first]["schedule_text"]:
                return test
    for _, test in present:
        if test.get("failure"):
            return test
    for _, test in present:
        if test.get("outcome") != "passed":
            return test
    return present[0][1]


def _counted(present: Sequence[tuple[int, Report]], runs: Sequence[Report]) -> Report:
    """What is counted again on the cases kept: cases, coverage, recovered, gaps."""
    declared = list(_union(test.get("declared") or [] for _, test in present))
    reached: dict[str, int] = {}
    killed: dict[str, int] = {}
    for run in runs:
        for point in run.get("reached") or []:
            reached[point] = reached.get(point, 0) + 1
        for point in run.get("killed") or []:
            killed[point] = killed.get(point, 0) + 1
    tests = [test for _, test in present]
    unreached = [p for p in declared if not reached.get(p)]
    unkilled = [
        p for p in declared if p not in COVERAGE_KINDS and reached.get(p) and not killed.get(p)
    ]
    # A shard says why a point it left unreached or unkilled was out of reach; the union
    # keeps those the merge leaves so too.
    reasons = {p: why for test in tests for p, why in (test.get("out_of_reach") or {}).items()}
    return {
        "cases": len(runs),
        "schedules": list(runs),
        "declared": declared,
        "coverage": {
            point: {"reached": reached.get(point, 0), "killed": killed.get(point, 0)}
            for point in sorted(set(declared) | set(reached))
        },
        "recovered": sum(1 for run in runs if run.get("killed") and run["verdict"] == "passed"),
        "unreached": unreached,
        "unkilled": unkilled,
        "out_of_reach": {
            p: why for p, why in reasons.items() if p in unreached or p in unkilled
        },
        "unchecked": list(_union(test.get("unchecked") or [] for test in tests)),
        "not_applicable": list(_union(test.get("not_applicable") or [] for test in tests)),
        "differences": _distinct(d for test in tests for d in test.get("differences") or []),
        "engine": _engine(test.get("engine") or {} for test in tests),
        "seconds": max(float(test.get("seconds", 0.0)) for test in tests),
        "model": {
            key: sum(int((test.get("model") or {}).get(key, 0)) for test in tests)
            for key in ("calls", "asked_again")
        },
        "timeout_reruns": {
            key: sum(int((test.get("timeout_reruns") or {}).get(key, 0)) for test in tests)
            for key in ("cases", "finished")
        },
        "waits": {
            key: round(sum(float((test.get("waits") or {}).get(key, 0)) for test in tests), 3)
            for key in ("skipped", "real", "world")
        } | {"waits": sum(int((test.get("waits") or {}).get("waits", 0)) for test in tests)},
    }


def _looked_further(test: Report) -> bool:
    """Whether the run that found ``test``'s failure went on to look for the invariants it
    did not break: a report that has ``failure.also``, of a failure that broke one and is
    a verdict on the agent (no error, no disagreement of the engines)."""
    failure = test.get("failure") or {}
    return bool(
        "also" in failure
        and failure.get("invariants")
        and not failure.get("disagreement")
        and not test.get("error_origin")
    )


def _merged_also(
    deciding: Report, present: Sequence[tuple[int, Report]], runs: Sequence[Report]
) -> Report:
    """The deciding failure with the schedules one machine would have found after it: from
    every shard's failure and ``also``, the deciding failure first, then by enumeration
    index (Hypothesis's: shard by shard), each kept for the invariants no earlier one broke
    (``also.py`` on one machine)."""
    failure = dict(deciding["failure"])
    candidates: list[tuple[tuple[bool, int, int, int], Report]] = []
    for shard, test in present:
        found = test.get("failure") or {}
        if not found or (test is not deciding and not _looked_further(test)):
            continue  # nothing found, or no verdict on the agent
        if test is not deciding:  # another shard's failure: a schedule found after THE one
            own = {
                **{k: found.get(k) for k in ("schedule", "schedule_text", "token", "violations")},
                "replay_command": found.get("replay_command"),
                "invariants": list(found.get("invariants", [])),
                "broken": list(found.get("invariants", [])),
                "titles": dict(found.get("titles") or {}),
                "index": _index_of(test, found),
            }
            candidates.append((_order(own, shard, 0), own))
        for position, also in enumerate(found.get("also") or [], start=1):
            candidates.append((_order(also, shard, position), also))
    seen = set(failure.get("invariants", []))
    kept: list[Report] = []
    for _, also in sorted(candidates, key=lambda item: item[0]):
        broken = list(also.get("broken") or also["invariants"])
        new = [n for n in broken if n not in seen]
        if not new:
            continue
        kept.append(_narrowed(also, new))
        seen |= set(broken)
    first = _first_failing(runs)
    failure["also"] = kept
    failure["also_cases"] = (
        len(runs) - first - 1
        if first is not None
        else sum(int((t.get("failure") or {}).get("also_cases", 0)) for _, t in present)
    )
    stopped = [(t.get("failure") or {}).get("also_stopped") for _, t in present]
    failure["also_stopped"] = next((why for why in stopped if why), None)
    return failure


def _order(also: Report, shard: int, position: int) -> tuple[bool, int, int, int]:
    index = also.get("index")
    return (not isinstance(index, int), index if isinstance(index, int) else 0, shard, position)


def _index_of(test: Report, failure: Report) -> int | None:
    """The enumeration index of ``failure``'s schedule in ``test``'s cases (``None``: not an
    exhaustive schedule)."""
    for run in test.get("schedules") or []:
        if run.get("schedule_text") == failure.get("schedule_text") and run["verdict"] != "passed":
            index = run.get("index")
            return index if isinstance(index, int) else None
    return None


def _narrowed(also: Report, new: Sequence[Any]) -> Report:
    """``also`` reported for ``new`` alone: its violations of those (each violation's text
    starts with ``invariant N (``)."""
    prefixes = tuple(f"invariant {n} (" for n in new)
    return {
        **also,
        "invariants": list(new),
        "violations": [v for v in also.get("violations", []) if v.startswith(prefixes)],
        "titles": {k: v for k, v in (also.get("titles") or {}).items() if k in new},
    }


def _judge_expected(test: Report) -> None:
    """A broken agent (``expect=``) is caught when the merged failure and the schedules
    found after it broke every invariant it expects (as one machine judges it)."""
    failure = test.get("failure") or {}
    if not test.get("expect") or test.get("verdict") == "error":
        return
    caught = set(test["expect"]) <= set(broken_invariants(failure))
    test["outcome"] = "passed" if caught else "failed"


def _held_to_coverage(test: Report) -> bool:
    """Whether a test that passed in every shard fails its strict coverage on the union
    (each shard left that judgement to the merge)."""
    return bool(
        test.get("strict_coverage")
        and not test.get("failure")
        and not test.get("expect")
        and verdict_of(test) == "passed"
        and (test["unreached"] or test["unkilled"] or test["unchecked"])
    )


def _union(lists: Iterable[Sequence[str]]) -> dict[str, None]:
    """Every string of ``lists``, once each, in the order first seen."""
    return {item: None for items in lists for item in items}


def _distinct(items: Iterable[Report]) -> list[Report]:
    kept: dict[str, Report] = {}
    for item in items:
        kept.setdefault(json.dumps(item, sort_keys=True), item)
    return list(kept.values())


def _engine(engines: Iterable[Report]) -> Report:
    """What the engines of the shards did, added up (the name and job count of the first)."""
    merged: Report = {}
    for engine in engines:
        for key, value in engine.items():
            if key != "jobs" and _is_count(value) and _is_count(merged.get(key)):
                merged[key] += value
            else:
                merged.setdefault(key, value)
    return merged


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
