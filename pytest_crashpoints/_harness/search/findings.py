"""What exploring one crash test found: the report, its failure, and the text a user reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ..case.runner import CaseResult
from ..case.schedule import COVERAGE_KINDS, Schedule, fault_kinds
from ..case.steps import INCONCLUSIVE, WORLD_LIMIT
from ..case.waited import Waited
from ..verdict.invariants import INVARIANTS, invariant_key
from ..verdict.printable import for_terminal

__all__ = [
    "AlsoBroken",
    "ExplorationReport",
    "Failure",
    "ScheduleRun",
    "also_names",
    "out_of_reach",
    "render_failure",
]


@dataclasses.dataclass(frozen=True)
class AlsoBroken:
    """A failing schedule found after the failure, reported for the invariants it breaks
    that neither the failure nor an ``AlsoBroken`` before it broke: in exhaustive mode (and
    the coverage schedules) the first such schedule in their order, in Hypothesis mode one
    shrunk for them. Its replay token replays it alone, as the failure's does."""

    #: The invariants it is reported for (those no schedule reported before it broke): the
    #: six by number, then invariants of your own by name.
    invariants: tuple[int | str, ...]
    #: Every invariant the schedule broke (``invariants`` and some the failure broke too).
    broken: tuple[int | str, ...]
    schedule: Schedule
    token: str
    replay_command: str
    #: The violations of ``invariants``, each with its evidence lines.
    violations: tuple[str, ...]
    #: What each invariant of your own among ``invariants`` says.
    titles: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Its place among the faulted schedules enumerated (exhaustive mode), else ``None``.
    index: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "invariants": list(self.invariants),
            "broken": list(self.broken),
            "schedule": self.schedule.to_dict(),
            "schedule_text": str(self.schedule),
            "token": self.token,
            "replay_command": self.replay_command,
            "violations": list(self.violations),
            "titles": dict(self.titles),
            "index": self.index,
        }


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failing schedule, minimal for its mode, with everything needed to act on it."""

    schedule: Schedule
    token: str
    replay_command: str
    violations: tuple[str, ...]
    #: The six by number, then invariants of your own by name.
    invariants: tuple[int | str, ...]
    errors: tuple[str, ...]
    timeline: str
    run_dir: str | None
    fingerprint: str
    deterministic: bool
    rerun_fingerprint: str
    #: What each invariant of your own among ``invariants`` says (its docstring's first line).
    titles: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Where the states engine and a real kill disagreed on a schedule (a harness bug),
    #: if they did.
    disagreement: str | None = None
    #: The failing case as data (its timeline, ledger rows and violations with what they
    #: name): see ``record.case_record``.
    case: Mapping[str, Any] | None = None
    #: What the rest of the exploration's budget found after this failure: a schedule for
    #: each invariant this one did not break (``AlsoBroken``), in the order found.
    also: tuple[AlsoBroken, ...] = ()
    #: Cases that search ran (0: it did not run: a replay, a failure that broke no
    #: invariant or is no verdict on the agent, or no budget left).
    also_cases: int = 0
    #: Why that search stopped before its budget was spent (a case of it raised), if it did.
    also_stopped: str | None = None

    @property
    def every_invariant(self) -> tuple[int | str, ...]:
        """The invariants this failure and the schedules found after it broke, in order
        (the six by number, then your own by name)."""
        found = {*self.invariants, *(n for also in self.also for n in also.invariants)}
        return tuple(sorted(found, key=invariant_key))

    @property
    def inconclusive(self) -> str | None:
        """Why the case proves nothing (a process timed out), if it does not: its first
        inconclusive error's first line."""
        return self._first(INCONCLUSIVE)

    @property
    def world_limit(self) -> str | None:
        """What the agent asked of the simulated world that it does not serve (a route of a
        fake provider's), if anything: the error's first line. The case proves nothing of
        the agent."""
        return self._first(WORLD_LIMIT)

    @property
    def origin(self) -> str | None:
        """Why the case is no verdict on the agent, as the JSON report's ``error_origin``
        says it: ``"world"`` (the world's limit), ``"timeout"`` (inconclusive), or ``None``
        (it is a verdict)."""
        if self.world_limit is not None:
            return "world"
        return "timeout" if self.inconclusive is not None else None

    def _first(self, prefix: str) -> str | None:
        for error in self.errors:
            if error.startswith(prefix):
                return error.splitlines()[0]
        return None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["titles"] = dict(self.titles)
        data["schedule"] = self.schedule.to_dict()
        data["schedule_text"] = str(self.schedule)
        data["also"] = [also.to_json() for also in self.also]
        return data


@dataclasses.dataclass(frozen=True)
class ScheduleRun:
    """One case an exploration ran: where its schedule came from (``phase``: ``fault-free``,
    ``exhaustive``, ``hypothesis``, ``coverage`` or ``replay``), the schedule in words, the
    verdict (``passed`` or ``failed``), the invariants it broke, the fingerprint of its final
    state and its wall time; what it counts for the coverage table, and, for an exhaustive
    schedule, its place in the enumeration (what merging the reports of shards orders by)."""

    phase: str
    schedule_text: str
    verdict: str
    #: The six by number, then invariants of your own by name.
    invariants: tuple[int | str, ...]
    fingerprint: str
    seconds: float
    #: The index of an exhaustive schedule among the faulted schedules enumerated (``None``
    #: for the other phases).
    index: int | None = None
    #: The points and kinds of fault the case reached (once each), and the point of each
    #: kill that took effect: what it adds to the report's ``reached`` and ``killed``.
    reached: tuple[str, ...] = ()
    killed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["invariants"] = list(self.invariants)
        data["reached"] = list(self.reached)
        data["killed"] = list(self.killed)
        data["seconds"] = round(self.seconds, 3)
        return data


#: The points a command reaches only through the hooks at its commits: A after a commit, the
#: commit points themselves, and a kill at C (deferred at the relay to the next fail point,
#: which the commit hooks give).
HOOKED_POINTS = {"A": "unreached", "db.commit": "unreached", "db.committed": "unreached",
                 "C": "unkilled"}


def out_of_reach(
    unhooked: str, *, unreached: list[str], unkilled: list[str]
) -> dict[str, str]:
    """Of the ``unreached`` and ``unkilled`` points of a test whose command got no hooks
    (``unhooked`` says why; ``""``: it got them), those the hooks would have reached, each
    with why and what to do."""
    if not unhooked:
        return {}
    why = (
        f"{unhooked}; mark your own fail points (docs/howto-any-language.md) or run it under "
        "Python"
    )
    left = {"unreached": unreached, "unkilled": unkilled}
    return {point: why for point, how in HOOKED_POINTS.items() if point in left[how]}


@dataclasses.dataclass
class ExplorationReport:
    """What exploring one test found."""

    nodeid: str
    seed: int | None
    mode: str
    cases: int = 0
    reached: dict[str, int] = dataclasses.field(default_factory=dict)
    killed: dict[str, int] = dataclasses.field(default_factory=dict)
    recovered: int = 0
    declared: tuple[str, ...] = ()
    failure: Failure | None = None
    #: Where the worker's final outcome differed from the reference worker's, per schedule
    #: (only with a differential check).
    differences: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The checks the ledger view could not support (one line each).
    unchecked: list[str] = dataclasses.field(default_factory=list)
    #: Answers the models made in all cases, and how many answered a question asked again
    #: (an agent restarted after a crash, or retrying a lost answer, asks the model again).
    model_calls: int = 0
    model_reasks: int = 0
    #: Which engine ran the cases and, for the states engine, how much it shared: crash
    #: states checked (quiet phase and replay run), cases that shared one, recordings.
    engine: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Faults of recovery that could not be placed: at a point the test's recovery never
    #: reaches (``"recovery killed at recovery.claimed"``). Not run, never counted as covered.
    not_applicable: list[str] = dataclasses.field(default_factory=list)
    #: Every case run, in order (the fault-free one first).
    schedules: list[ScheduleRun] = dataclasses.field(default_factory=list)
    #: How many cases the exploration expects to run in all (an estimate: Hypothesis may
    #: stop early or shrink a failure with more); 0 until it is known.
    planned: int = 0
    #: Wall time of the whole exploration, in seconds.
    seconds: float = 0.0
    #: Cases run again because a process of theirs timed out (each with a longer deadline),
    #: and how many of them then finished in time: a slow machine is never a verdict.
    slow_cases: int = 0
    slow_cases_finished: int = 0
    #: For a worker that is a command: why its fault-free deliveries got no hooks at their
    #: commits (``""``: they did, or the worker is a Python function).
    unhooked: str = ""
    #: What the cases' processes waited, in all (skipped, for real, on the case's providers).
    waited: Waited = dataclasses.field(default_factory=Waited)

    @property
    def unreached(self) -> list[str]:
        return [p for p in self.declared if not self.reached.get(p)]

    @property
    def unkilled(self) -> list[str]:
        """Declared kill points that cases reached but where no kill ever took effect (a C
        deferred to a next fail point that never came, say): they prove nothing either."""
        return [
            p
            for p in self.declared
            if p not in COVERAGE_KINDS and self.reached.get(p) and not self.killed.get(p)
        ]

    @property
    def out_of_reach(self) -> dict[str, str]:
        """The declared points a command could not reach (or be killed at) because it got
        no hooks, each with why and what to do (:func:`out_of_reach`)."""
        return out_of_reach(self.unhooked, unreached=self.unreached, unkilled=self.unkilled)

    @property
    def verdict(self) -> str:
        """passed, failed, or error (the case that ended the exploration was inconclusive:
        a process timed out)."""
        if self.failure is None:
            return "passed"
        return "error" if self.failure.origin is not None else "failed"

    def to_json(self) -> dict[str, Any]:
        said = {}
        failure = self.failure
        if failure is not None and failure.origin is not None:
            error = failure.world_limit or failure.inconclusive
            said = {"error": error, "error_origin": failure.origin, "error_phase": "call"}
        return {
            **said,
            "nodeid": self.nodeid,
            "verdict": self.verdict,
            "seed": self.seed,
            "mode": self.mode,
            "cases": self.cases,
            "coverage": {
                point: {
                    "reached": self.reached.get(point, 0),
                    "killed": self.killed.get(point, 0),
                }
                for point in sorted(set(self.declared) | set(self.reached))
            },
            "recovered": self.recovered,
            "declared": list(self.declared),
            "unreached": self.unreached,
            "unkilled": self.unkilled,
            **({"out_of_reach": self.out_of_reach} if self.out_of_reach else {}),
            "unchecked": self.unchecked,
            "not_applicable": self.not_applicable,
            "failure": None if self.failure is None else self.failure.to_json(),
            "differences": self.differences,
            "engine": self.engine,
            "schedules": [run.to_json() for run in self.schedules],
            "seconds": round(self.seconds, 3),
            "model": {"calls": self.model_calls, "asked_again": self.model_reasks},
            "timeout_reruns": {
                "cases": self.slow_cases, "finished": self.slow_cases_finished,
            },
            "waits": self.waited.to_json(),
        }

    def count(
        self,
        result: CaseResult,
        *,
        phase: str = "",
        seconds: float = 0.0,
        index: int | None = None,
    ) -> None:
        """Count one case run (``phase``, ``seconds`` and ``index``: see
        :class:`ScheduleRun`)."""
        self.cases += 1
        reached = [point for point, hits in result.hits.items() if hits]
        # A fault kind named as its point (D: the delivery harness fires D in each worker)
        # is reached once: a case counts once per point.
        reached += sorted(set(fault_kinds(result.schedule.steps)).difference(reached))
        killed = [kill.partition("#")[0] for kill in result.kills]
        self.schedules.append(
            ScheduleRun(
                phase=phase,
                schedule_text=str(result.schedule),
                verdict="passed" if result.passed else "failed",
                invariants=tuple(
                    sorted({v.invariant for v in result.violations}, key=invariant_key)
                ),
                fingerprint=result.fingerprint,
                seconds=seconds,
                index=index,
                reached=tuple(reached),
                killed=tuple(killed),
            )
        )
        for point in reached:
            self.reached[point] = self.reached.get(point, 0) + 1
        for point in killed:
            self.killed[point] = self.killed.get(point, 0) + 1
        if result.kills and result.passed:
            self.recovered += 1
        self.model_calls += result.model_calls
        self.model_reasks += result.model_reasks
        # What a case's rows left unchecked (a row that accounts for nothing) is said once.
        self.unchecked += [line for line in result.unaccounted if line not in self.unchecked]
        self.waited.merge(result.waited)
        if result.timeout_reruns:
            self.slow_cases += 1
            self.slow_cases_finished += not any(e.startswith(INCONCLUSIVE) for e in result.errors)


def render_failure(report: ExplorationReport) -> str:
    """The failure report a user reads: what broke, the schedule, evidence, timeline, replay."""
    failure = report.failure
    if failure is None:
        return ""
    lines = [
        _heading(failure),
        f"minimal schedule: {failure.schedule}",
        "",
        *failure.violations,
    ]
    if failure.errors:
        lines += ["", "harness errors:"]
        lines += [f"    {line}" for e in failure.errors for line in e.rstrip("\n").splitlines()]
    if not failure.deterministic:
        lines += [
            "",
            "NONDETERMINISM: the same schedule run again ended in another state "
            f"(fingerprint {failure.fingerprint[:12]} vs {failure.rerun_fingerprint[:12]}); "
            "the harness or the code under test depends on something the schedule does not fix.",
        ]
    lines += [
        "",
        "timeline:",
        failure.timeline,
        "",
        f"cases run: {report.cases}; seed: {report.seed}",
        f"run directory (kept): {failure.run_dir}",
        f"replay: {failure.replay_command}",
        *_also_lines(failure),
    ]
    # Names, messages and output of the code under test are in it: no control character
    # reaches the terminal as one.
    return for_terminal("\n".join(lines))


def _also_lines(failure: Failure) -> list[str]:
    """What the rest of the budget found after the failure: each other invariant broken,
    with its own schedule, violations and replay command (nothing when it did not look)."""
    if not failure.also_cases and not failure.also_stopped:
        return []
    searched = f"{failure.also_cases} more case(s)"
    if not failure.also:
        lines = ["", f"no other invariant broken in {searched} after it"]
    else:
        lines = ["", f"other invariants broken (looked for in {searched} after it):"]
    for also in failure.also:
        lines.append(f"also breaks {also_names(also.invariants, also.titles)}: {also.schedule}")
        lines += [f"    {line}" for v in also.violations for line in v.splitlines()]
        lines.append(f"    replay: {also.replay_command}")
    if failure.also_stopped:
        lines.append(f"the search for other invariants stopped early: {failure.also_stopped}")
    return lines


def also_names(invariants: Sequence[int | str], titles: Mapping[str, str]) -> str:
    """``invariant 5 (in-flight work ...)``, or ``invariants 4 (...), 5 (...)``."""
    names = ", ".join(
        f"{n} ({INVARIANTS[n] if isinstance(n, int) else titles.get(n, n)})" for n in invariants
    )
    return f"invariant{'s' if len(invariants) > 1 else ''} {names}"


def _heading(failure: Failure) -> str:
    """The first line of a failure report: the violations, or, when there are none, what
    the harness could not do (a timeout says so)."""
    if failure.violations or not failure.errors:
        names = (
            ", ".join(
                f"{n} ({INVARIANTS[n] if isinstance(n, int) else failure.titles.get(n, n)})"
                for n in failure.invariants
            )
            or "none"
        )
        return f"crashpoints: {len(failure.violations)} violation(s) of invariant(s) {names}"
    firsts = [error.splitlines()[0] if error else "" for error in failure.errors]
    if failure.world_limit:
        return f"crashpoints: {failure.world_limit}"
    if failure.inconclusive:
        return f"crashpoints: {failure.inconclusive}"
    # Headed by the first error: what went wrong first (later ones often follow from it).
    more = len(firsts) - 1
    return f"crashpoints: harness error: {firsts[0]}" + (f" (and {more} more)" if more else "")
