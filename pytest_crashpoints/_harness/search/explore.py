"""Explore crash schedules for one test: exhaustively, with Hypothesis, or one replayed.

1. The fault-free run: every message delivered once, nothing injected. It must pass; it
   tells which fail points each message reaches (and how often), and which effects no
   crash may lose.
2. Exhaustive mode: every schedule with up to ``max_faults`` faults, fewest first.
   Hypothesis mode: ``max_examples`` generated schedules, shrunk to a minimal failing one
   (and remembered in Hypothesis's example database).
3. A failing schedule is run once more and the two fingerprints compared: a mismatch is
   reported as nondeterminism (of the harness or of the code under test), never hidden.

Two engines run the cases (``CrashSettings.engine``). ``"processes"`` runs every schedule
from scratch (``case.run_case``): a new world, every process real, every kill a real
``SIGKILL``. ``"states"`` (the default, on Linux) constructs the crash states instead
(``engine.StatesEngine``) and checks each distinct one once; a failure it finds is confirmed
by running its schedule the processes way, and a disagreement between the two is reported
as a harness bug, never hidden. ``"compare"`` runs every schedule both ways and fails the
test on the first schedule where their verdicts or end states differ.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from ..._inject.failpoints import CRASH_POINTS
from ..._process.memory import release_freed_memory
from ...errors import CrashpointsError
from ..case.runner import CaseResult, run_case
from ..case.scenario import Scenario
from ..case.schedule import COVERAGE_KINDS, KIND_LABELS, Deliver, Schedule
from ..case.steps import INCONCLUSIVE, WORLD_LIMIT, fork_server_for
from ..verdict.evidence import ExpectedEffect
from ..verdict.invariants import invariant_key, invariant_name
from .also import OtherInvariants, also_budget, drawn_rounds
from .engine import KEEP_BUDGET, StatesEngine, states_supported
from .findings import ExplorationReport, Failure
from .jobs import run_in_order
from .space import (
    Space,
    covering_schedules,
    enumerate_schedules,
    probe_kills,
    races_placed,
    unplaced_faults,
)
from .token import decode_token, replay_command, replay_token

__all__ = ["CaseRaised", "CrashSettings", "explore"]

Mode = Literal["hypothesis", "exhaustive", "both"]
#: A case's result, and where the reference ended differently (with a reference).
Ran = tuple[CaseResult, "dict[str, Any] | None"]
Engine = Literal["states", "processes", "compare"]


@dataclasses.dataclass(frozen=True)
class CrashSettings:
    """The resolved settings of one crash test (marker > CLI > env > ini > default)."""

    points: tuple[str, ...] = CRASH_POINTS
    mode: Mode = "hypothesis"
    max_examples: int | None = None
    max_faults: int = 2
    seed: int | None = None
    strict_coverage: bool = False
    replay: str | None = None
    engine: Engine = "states"
    #: Cases of the exhaustive phase run at once, each job in a world of its own (``jobs``).
    jobs: int = 1
    #: ``jobs`` is the most the machine allows (``--crashpoints-jobs=auto``), not a number the
    #: user gave: a test with few schedules runs on fewer jobs (:data:`SCHEDULES_PER_JOB`).
    jobs_auto: bool = False
    #: The kinds of fault to inject (``schedule.FAULT_KINDS``); ``None``: every kind the
    #: points allow.
    faults: tuple[str, ...] | None = None
    #: The kinds of fault left out of those ``faults`` allows (the marker's ``"-kind"``).
    faults_left_out: tuple[str, ...] = ()
    #: ``(K, N)``: run shard K of N of the schedules (``None``: all of them). Exhaustive
    #: mode runs the faulted schedules whose enumeration index ``i`` has ``i % N == K - 1``;
    #: Hypothesis runs ``max_examples / N`` (rounded up) with a seed of the shard's own.
    #: Every shard runs the fault-free case.
    shard: tuple[int, int] | None = None


#: How many times a case whose process timed out is run again, each time with twice the
#: deadline of the last (so a process that hangs costs seven times its timeout before the
#: case counts as inconclusive). A busy machine makes processes slow, and a slow machine is
#: never a verdict.
TIMEOUT_RERUNS = 2


def timed_out(result: CaseResult) -> bool:
    """Whether a process of ``result``'s case timed out (the case is inconclusive)."""
    return any(error.startswith(INCONCLUSIVE) for error in result.errors)


#: With ``--crashpoints-jobs=auto``, one job more for every this many faulted schedules: a job
#: starts a world of its own (run directory, servers, a recording of the deliveries), which
#: two or three schedules do not win back (measured in docs/performance.md#jobs).
SCHEDULES_PER_JOB = 4


def _space(
    scenario: Scenario,
    golden: CaseResult,
    points: Iterable[str],
    faults: Iterable[str] | None = None,
    left_out: Iterable[str] = (),
) -> Space:
    messages = range(len(scenario.messages))
    effects: list[dict[str, int]] = [{} for _ in messages]
    for effect in golden.expected_effects:
        if effect.message is not None:
            made = effects[effect.message]
            made[effect.provider] = made.get(effect.provider, 0) + 1
    for message, asked in golden.generations.items():
        # A model's answers are what its faults target (refused before it answers, or
        # answered and the answer lost), as a provider's writes are.
        for provider, count in asked.items():
            effects[message][provider] = count
    specs = scenario.providers
    alone = not scenario.messages and scenario.incident is not None
    return Space(
        messages=len(scenario.messages),
        reachable=tuple(golden.delivery_hits.get(i, {}) for i in messages),
        points=frozenset(points),
        providers=tuple(spec.name for spec in specs if spec.has_lookup),
        effects=tuple(effects),
        searching=tuple(spec.name for spec in specs if spec.has_search),
        sessions=tuple(spec.name for spec in specs if spec.has_sessions),
        duplicating=tuple(spec.name for spec in specs if spec.duplicates_requests),
        left_out=frozenset(left_out),
        own_a=tuple(golden.delivery_own_a.get(i, 0) for i in messages),
        recovers=scenario.recover is not None,
        kinds=None if faults is None else frozenset(faults),
        between=tuple(golden.delivery_between.get(i, ()) for i in messages),
        lossy=tuple(golden.delivery_lossy.get(i, ()) for i in messages),
        recovery_alone=alone and scenario.recover is not None,
        # A recovery alone finds its work at the start: the fault-free case's recovery run
        # reached what any of its faults can reach.
        recovery_reach=golden.recovery_points if alone else None,
    )


def _declared(settings: CrashSettings) -> tuple[str, ...]:
    """What the test must reach (and kill at) for its coverage: its points, or, when it
    chooses its kinds of fault, the kill points for ``kill`` and the coverage labels of the
    others (a lost answer is injected, never killed at)."""
    if settings.faults is None:
        left = set(settings.faults_left_out)
        return tuple(p for p in settings.points if not _reached_only_by(p, left))
    declared: list[str] = []
    for kind in settings.faults:
        if kind in ("kill", "recovery_kill"):
            declared += [p for p in settings.points if p not in ("D", "E", "F")]
        else:
            declared.append(KIND_LABELS[kind])
    return tuple(dict.fromkeys(declared))


def _reached_only_by(point: str, left_out: set[str]) -> bool:
    """Whether every kind of fault that covers ``point`` is left out (D's two deliveries,
    E's authority change, F's lookup failures, a kill at any other point)."""
    only = {
        "D": {"duplicate_delivery", "concurrent_delivery"},
        "E": {"authority_change"},
        "F": {"lookup_failure"},
    }.get(point, {"kill"})
    return only <= left_out


@dataclasses.dataclass(eq=False)
class _Explorer:
    scenario: Scenario
    settings: CrashSettings
    base_dir: Path
    nodeid: str
    reference: Scenario | None = None
    on_case: Callable[[ExplorationReport], None] | None = None
    #: The fault-free run's effects, the baseline of every later case.
    expected: tuple[ExpectedEffect, ...] | None = dataclasses.field(default=None, init=False)
    #: The states engine, when the cases run on it.
    engine: StatesEngine | None = dataclasses.field(default=None, init=False)
    #: The first disagreement between the states engine and a real kill, if any.
    disagreement: str | None = dataclasses.field(default=None, init=False)
    #: What the engines of jobs 2, 3, ... did (``StatesEngine.statistics``).
    jobs_statistics: list[dict[str, int]] = dataclasses.field(default_factory=list, init=False)
    #: How many jobs ran the exhaustive phase (1: it ran one case at a time, or not at all).
    jobs_used: int = dataclasses.field(default=1, init=False)

    def __post_init__(self) -> None:
        self.report = ExplorationReport(
            self.nodeid, self.settings.seed, self.settings.mode, declared=_declared(self.settings)
        )
        self._serial = itertools.count(1)

    def run(self, schedule: Schedule, phase: str, *, index: int | None = None) -> CaseResult:
        started = time.monotonic()
        result, difference = self._case(schedule, self.engine)
        self._count(result, phase, time.monotonic() - started, difference, index=index)
        return result

    def _case(self, schedule: Schedule, engine: StatesEngine | None) -> Ran:
        """Run one case on ``engine`` (``None``: the processes way); with a reference, also
        where the reference ends differently. Touches nothing shared: a job may call it."""
        if engine is None:
            result = self._real_kill(schedule)
        else:
            result = engine.run(schedule, self.expected)
            if timed_out(result):
                # Too slow here: the schedule again, the processes way, with more time.
                result = self._patient(
                    self.scenario, schedule, name=f"case-{next(self._serial)}",
                    expected=self.expected, first=result,
                )
            if self.settings.engine == "compare":
                # The real kill's result stands; a disagreement fails the case.
                real = self._real_kill(schedule)
                disagreement = _disagreement(result, real)
                result = real
                if disagreement is not None:
                    result = dataclasses.replace(real, errors=(*real.errors, disagreement))
        difference = self.compare(result) if self.reference is not None else None
        return result, difference

    def _real_kill(self, schedule: Schedule) -> CaseResult:
        """``schedule`` run the processes way: real kills, every process started for real."""
        return self._patient(
            self.scenario, schedule, name=f"case-{next(self._serial)}", expected=self.expected
        )

    def _patient(
        self,
        scenario: Scenario,
        schedule: Schedule,
        *,
        name: str,
        expected: tuple[ExpectedEffect, ...] | None,
        first: CaseResult | None = None,
    ) -> CaseResult:
        """``schedule`` the processes way (or ``first``, its result so far), run again while
        a process of it timed out, with a deadline twice the last, at most
        :data:`TIMEOUT_RERUNS` times: a slow machine is never a verdict. The result says how
        many reruns it took (``timeout_reruns``)."""
        result = first if first is not None else run_case(
            scenario, schedule, base_dir=self.base_dir, name=name, expected=expected
        )
        timeout, reruns = scenario.timeout, 0
        while timed_out(result) and reruns < TIMEOUT_RERUNS:
            reruns += 1
            timeout *= 2
            result = run_case(
                dataclasses.replace(scenario, timeout=timeout),
                schedule,
                base_dir=self.base_dir,
                name=f"{name}-slow{reruns}",
                expected=expected,
            )
        if not reruns:
            return result
        return dataclasses.replace(result, timeout_reruns=result.timeout_reruns + reruns)

    def _count(
        self,
        result: CaseResult,
        phase: str,
        seconds: float,
        difference: dict[str, Any] | None = None,
        *,
        index: int | None = None,
    ) -> None:
        """Put a case's result in the report (in schedule order: the caller's job)."""
        self.report.count(result, phase=phase, seconds=seconds, index=index)
        if difference is not None:
            self.report.differences.append(difference)
        if self.disagreement is None and self.settings.engine == "compare":
            self.disagreement = next((e for e in result.errors if e.startswith(_BUG)), None)
        if self.on_case is not None:
            self.on_case(self.report)

    def _place_power_loss(self, space: Space) -> None:
        """A power loss is tried where the fault-free run committed or wrote without syncing,
        and between each write to a file of its own and that write's sync; where there is
        none of these, or where the settings could corrupt the file, the report says why."""
        from ..storage.powerloss import refusal

        refused = {
            f"power loss on {name} ({reason})"
            for found in space.lossy
            for name, sync in found
            if (reason := refusal(sync)) is not None
        }
        self.report.not_applicable += sorted(refused)
        label = KIND_LABELS["power_loss"]
        if label in self.report.declared and not any(
            space.lossy_of(i) or space.torn_write_sites(i) for i in range(space.messages)
        ):
            self.report.declared = tuple(p for p in self.report.declared if p != label)
            redis = (
                "; its Redis syncs each write before it answers (appendfsync always), or it "
                "wrote none"
                if self.scenario.redis is not None
                else ""
            )
            self.report.not_applicable.append(
                "power loss: nothing the worker wrote can be lost to it (each SQLite commit is "
                "synced before it returns: synchronous=FULL or EXTRA, or a rollback journal; "
                "a PostgreSQL commit is the server's, whose power is not the worker's; "
                "and no file of its own was written past what it synced, nor synced with "
                "os.fsync or os.fdatasync, where the power could catch a write before its "
                f"sync{redis}), so a power loss keeps what a kill keeps"
            )

    def _place_forgotten_sessions(self, space: Space) -> None:
        """A stateless MCP server keeps no session to forget: the fault is left out for it
        (the space has no sessions of it), and the report says why."""
        stateless = [spec.name for spec in self.scenario.providers if spec.stateless]
        if not stateless or "F" not in space.points or not space.chooses("forget_session"):
            return
        label = KIND_LABELS["forget_session"]
        if not space.sessions:
            self.report.declared = tuple(p for p in self.report.declared if p != label)
        self.report.not_applicable.append(
            f"a session the server forgot ({label}): {', '.join(stateless)} "
            f"{'is' if len(stateless) == 1 else 'are'} stateless (no Mcp-Session-Id: every "
            "request stands alone), so there is no session to forget"
        )

    def placed(self, space: Space) -> Space:
        """``space`` with the points its recovery reaches (:attr:`Space.recovery_reach`):
        each kill that leaves work in flight for a fault of recovery is run once (not counted
        as a case; the states engine shares its crash state with the case itself), and a
        fault at a point none of those recoveries reached is not applicable: left out of the
        schedules, listed in the report, never counted as covered."""
        if "F" in self.report.declared and "F" in space.points and not space.providers:
            # F's own label counts lookups made to fail: with no provider that answers a
            # lookup there is none to fail (its refusals and lost sessions have labels of
            # their own).
            self.report.declared = tuple(p for p in self.report.declared if p != "F")
            self.report.not_applicable.append(
                "lookup failures (F): no provider of this test answers lookups"
            )
        self._place_power_loss(space)
        self._place_forgotten_sessions(space)
        if space.recovery_alone:
            return self._placed_alone(space)
        probes = probe_kills(space)
        if not probes or self.scenario.recover is None:
            return space
        reach: set[str] = set()
        for schedule in probes:
            try:
                reach |= self._case(schedule, self.engine)[0].recovery_points
            except CrashpointsError:
                raise
            except Exception as exc:  # the user's code raised (a ledger view, say)
                token = replay_token(schedule, seed=self.settings.seed, nodeid=self.nodeid)
                raise CaseRaised(
                    f"a case raised {type(exc).__name__}: {exc} (schedule: {schedule}; "
                    f"replay: {replay_command(self.nodeid, token)})"
                ) from exc
        placed = dataclasses.replace(space, recovery_reach=frozenset(reach))
        self.report.not_applicable += unplaced_faults(placed)
        if races_placed(space) and not races_placed(placed):
            self.report.declared = tuple(p for p in self.report.declared if p != "racing recovery")
        return placed

    def _placed_alone(self, space: Space) -> Space:
        """A recovery alone (an incident with no messages): its faults where the fault-free
        case's recovery reached; what needs a worker or a message is not applicable."""
        self.report.not_applicable += unplaced_faults(space)
        unplaced = dataclasses.replace(space, recovery_reach=None)
        if races_placed(unplaced) and not races_placed(space):
            self.report.declared = tuple(p for p in self.report.declared if p != "racing recovery")
        alone = {
            "E": "authority changes (E): an incident reproduced by its recovery alone has no "
            "message whose task's authority to change",
            "D": "a message delivered twice (D): an incident reproduced by its recovery alone "
            "delivers none (two recoveries at once are tried)",
        }
        for point, why in alone.items():
            if point in self.report.declared:
                self.report.declared = tuple(p for p in self.report.declared if p != point)
                self.report.not_applicable.append(why)
        return space

    def plan(self, more: int) -> None:
        """Expect ``more`` cases after those run so far (and say so to ``on_case``)."""
        self.report.planned = self.report.cases + more
        if self.on_case is not None:
            self.on_case(self.report)

    def compare(self, result: CaseResult) -> dict[str, Any] | None:
        """Run the reference worker under the same schedule; where the ends differ, if they
        do."""
        assert self.reference is not None
        theirs = self._patient(
            self.reference, result.schedule, name="reference", expected=None
        ).outcomes
        if theirs == result.outcomes:
            return None
        ours = set(result.outcomes)
        return {
            "schedule": str(result.schedule),
            "worker_only": sorted(ours - set(theirs)),
            "reference_only": sorted(set(theirs) - ours),
        }

    def fail(self, result: CaseResult) -> None:
        if timed_out(result) or any(e.startswith(WORLD_LIMIT) for e in result.errors):
            # A process timed out, with every longer deadline too, or the agent reached past
            # the simulated world: running the schedule again (to confirm it, to check it is
            # deterministic) would prove nothing more of the agent.
            self._report_failure(result, again=result, disagreement=None)
            return
        disagreement = None
        if self.engine is not None and self.settings.engine != "compare":
            # Confirmed by a real kill: the schedule the processes way, in fresh processes.
            found, result = (
                result,
                self._patient(
                    self.scenario, result.schedule, name="confirm", expected=self.expected
                ),
            )
            if not timed_out(result):
                disagreement = _disagreement(found, result)
        disagreement = disagreement or self.disagreement
        again = self._patient(
            self.scenario, result.schedule, name="rerun", expected=self.expected
        )
        if timed_out(again):
            # The check for determinism timed out: it says nothing either way.
            again = result
        self._report_failure(result, again=again, disagreement=disagreement)

    def _report_failure(
        self, result: CaseResult, *, again: CaseResult, disagreement: str | None
    ) -> None:
        deterministic = again.fingerprint == result.fingerprint and again.passed == result.passed
        if disagreement and not deterministic:
            # Two real runs of the schedule differ: the agent (or the harness) depends on
            # something the schedule does not fix, and the engines cannot be told apart by it.
            # Reported as nondeterminism, the engines' difference kept in the errors.
            if disagreement not in result.errors:
                result = dataclasses.replace(result, errors=(*result.errors, disagreement))
            disagreement = None
        token = replay_token(result.schedule, seed=self.settings.seed, nodeid=self.nodeid)
        self.report.failure = Failure(
            schedule=result.schedule,
            token=token,
            replay_command=replay_command(self.nodeid, token),
            violations=tuple(str(v) for v in result.violations),
            invariants=tuple(sorted({v.invariant for v in result.violations}, key=invariant_key)),
            titles={v.invariant: v.says for v in result.violations if isinstance(v.invariant, str)},
            errors=result.errors
            + ((disagreement,) if disagreement and disagreement not in result.errors else ()),
            timeline=result.timeline,
            run_dir=None if result.run_dir is None else str(result.run_dir),
            fingerprint=result.fingerprint,
            deterministic=deterministic,
            rerun_fingerprint=again.fingerprint,
            disagreement=disagreement,
            case=result.record,
        )

    def golden(self) -> CaseResult | None:
        base = Schedule(tuple(Deliver(i) for i in range(len(self.scenario.messages))))
        if self.scenario.incident is not None and not self._incident_baseline(base):
            return None
        result = self.run(base, "fault-free")
        if not result.passed:
            self.fail(result)
            return None
        if self.scenario.incident is None:  # an incident's baseline is the empty world's
            self.expected = result.expected_effects
        self.report.unchecked = list(dict.fromkeys([*result.unchecked, *self.report.unchecked]))
        self.report.unhooked = result.unhooked
        return result

    def _incident_baseline(self, base: Schedule) -> bool:
        """What an incident's cases are measured against: the fault-free run of the same
        messages from an empty world (``incident.py``). It must pass too. An incident with
        no messages has nothing to measure against: what its recovery does is all the case's
        own, and production's objects count as done once."""
        if not self.scenario.messages:
            self.expected = ()
            return True
        clean = dataclasses.replace(self.scenario, incident=None)
        result = self._patient(clean, base, name="baseline", expected=None)
        if not result.passed:
            said = (
                "the fault-free run of the messages from an empty world, the baseline an "
                "incident is measured against, failed: fix that first (a crash test of the "
                "same messages without the incident shows it)"
            )
            result = dataclasses.replace(result, errors=(*result.errors, said))
            again = run_case(clean, base, base_dir=self.base_dir, name="baseline-rerun")
            self._report_failure(result, again=again, disagreement=None)
            return False
        self.expected = result.expected_effects
        return True

    def exhaustive(self, space: Space) -> None:
        # The fault-free run already passed. Each faulted schedule keeps its index in the
        # enumeration (which is deterministic), whatever shard runs it: the reports of the
        # shards merge back into the order one machine runs them in.
        faulted = (
            schedule
            for schedule in enumerate_schedules(space, max_faults=self.settings.max_faults)
            if schedule.faults
        )
        index, total = self.settings.shard or (1, 1)
        mine = [(i, s) for i, s in enumerate(faulted) if i % total == index - 1]
        todo = [schedule for _, schedule in mine]
        self.plan(len(todo))
        jobs = min(self.settings.jobs, len(todo))
        if self.settings.jobs_auto:
            jobs = min(jobs, max(1, len(todo) // SCHEDULES_PER_JOB))
        if jobs > 1:
            self.jobs_used = jobs
            self._exhaustive_jobs(todo, jobs, indices=[i for i, _ in mine])
            return
        for position, (i, schedule) in enumerate(mine):
            result = self.run(schedule, "exhaustive", index=i)
            if not result.passed:
                self.fail(result)
                self._look_further(mine[position + 1 :], "exhaustive")
                return

    def _exhaustive_jobs(self, todo: list[Schedule], jobs: int, *, indices: list[int]) -> None:
        """``todo`` on ``jobs`` jobs (``jobs.py``), each with an engine of its own; the report
        is the one a single job gives. ``indices``: each schedule's enumeration index."""
        handed_back = iter(indices)  # the results come back in schedule order
        with contextlib.ExitStack() as stack:
            engines: list[StatesEngine | None] = [self.engine]
            for n in range(1, jobs):
                engine = None
                if self.engine is not None:
                    engine = stack.enter_context(
                        StatesEngine(
                            self.scenario,
                            base_dir=self.base_dir,
                            name=f"states-{self.nodeid}-job{n}",
                            keep_budget=self.engine.keep_budget,
                        )
                    )
                engines.append(engine)

            def job(engine: StatesEngine | None) -> Callable[[Schedule], Ran]:
                return lambda schedule: self._case(schedule, engine)

            handed: list[int] = []

            def counted(ran: Ran, seconds: float) -> None:
                handed.append(next(handed_back))
                self._count(ran[0], "exhaustive", seconds, ran[1], index=handed[-1])

            running = [job(engine) for engine in engines]
            failed = run_in_order(
                todo, running, failed=lambda ran: not ran[0].passed, on_result=counted
            )
            if failed is not None:
                self.fail(failed[0])
                self._look_further_on_jobs(todo[len(handed) :], running, counted, handed)
            self.jobs_statistics = [e.statistics() for e in engines[1:] if e is not None]

    def _look_further_on_jobs(
        self,
        rest: list[Schedule],
        running: list[Callable[[Schedule], Ran]],
        counted: Callable[[Ran, float], None],
        handed: list[int],
    ) -> None:
        """:meth:`_look_further` on the jobs: the schedules after the failure, every one of
        them run (none ends the run), each result considered in schedule order."""
        search = self._other_invariants()
        if search is None:
            return
        started = (self.report.cases, self.disagreement)

        def considered(ran: Ran, seconds: float) -> None:
            counted(ran, seconds)
            self._consider(search, ran[0], index=handed[-1])

        try:
            run_in_order(rest, running, failed=lambda ran: False, on_result=considered)
        except Exception as exc:  # the first failure stands: its search stops, and says why
            self._stop_looking(exc, None)
        self._looked(search, started)

    def hypothesis(self, space: Space) -> None:
        from hypothesis import settings as hsettings

        failing: list[CaseResult] = []
        #: The first schedule whose case raised inside the harness, and what it raised.
        raised: list[tuple[Schedule, BaseException]] = []
        examples = self.settings.max_examples or hsettings().max_examples
        if self.settings.shard is not None:
            # Each shard draws its share of the examples, from a seed of its own.
            examples = max(1, -(-examples // self.settings.shard[1]))
        self.plan(examples)

        def crash_schedule(schedule: Schedule) -> None:
            try:
                result = self.run(schedule, "hypothesis")
            except Exception as exc:
                raised.append((schedule, exc))
                raise
            if not result.passed:
                failing.append(result)
                raise _CaseFailed(result)

        test = self._drawn(
            crash_schedule,
            space,
            max_examples=examples,
            # Over --hypothesis-seed too: the seed in the report and the replay token is the
            # one used (the plugin takes --hypothesis-seed as the seed when none is given).
            # A shard's is derived from it, and the report keeps the run's.
            seed=None if self.settings.seed is None else shard_seed(
                self.settings.seed, self.settings.shard
            ),
            key=hashlib.sha256(f"pytest-crashpoints:{self.nodeid}".encode()).digest(),
        )
        try:
            with _shrinking_without_a_time_limit():
                test()
        except _CaseFailed as exc:
            # Hypothesis re-raises the minimal failing example last.
            self.fail(exc.result)
            self._look_further_drawn(space, also_budget(examples))
        except Exception as exc:  # e.g. Flaky: the failure did not reproduce
            if raised:
                # A case raised inside the harness (and, if Hypothesis calls it flaky, did not
                # raise again): the first one, with its schedule, is the story.
                schedule, first = raised[0]
                token = replay_token(schedule, seed=self.settings.seed, nodeid=self.nodeid)
                raise CaseRaised(
                    f"a case raised {type(first).__name__}: {first} (schedule: {schedule}; "
                    f"replay: {replay_command(self.nodeid, token)}); Hypothesis then stopped "
                    f"the exploration: {_first_line(exc)}"
                ) from first
            if failing:
                self.fail(failing[0] if _is_flaky(exc) else failing[-1])
            else:
                raise CrashpointsError(f"Hypothesis stopped the exploration: {exc}") from exc

    def _drawn(
        self,
        prop: Callable[[Schedule], None],
        space: Space,
        *,
        max_examples: int,
        seed: int | None,
        key: bytes | None,
    ) -> Callable[[], None]:
        """``prop`` run by Hypothesis on up to ``max_examples`` schedules drawn from ``space``
        (from ``seed``, if not ``None``), a failing one shrunk and re-raised; the example
        database keeps it under ``key`` (``None``: no database, nothing replayed first)."""
        from hypothesis import HealthCheck, given
        from hypothesis import seed as seeded
        from hypothesis import settings as hsettings

        from .space import schedules

        test: Callable[[], None] = given(schedules(space, max_faults=self.settings.max_faults))(
            prop
        )
        if seed is not None:
            test = seeded(seed)(test)
        # Applied after seed(), which turns the example database off: with a key, the
        # profile's database stays on, so a failing schedule is replayed first next time.
        database: dict[str, Any] = {} if key is not None else {"database": None}
        test = hsettings(
            **database,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            # Looking for more failures after the first one goes on for ten seconds of wall
            # time: on a busy machine fewer cases fit in them, and another failure could be
            # the one reported. One failure, shrunk, is the same on every machine (the other
            # invariants are looked for after it, on a budget of cases: also.py).
            report_multiple_bugs=False,
            max_examples=max_examples,
        )(test)
        if key is not None:
            test._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
        return test

    def top_up(self, space: Space) -> None:
        """Run one schedule for each kind of fault whose point no case reached yet."""
        covering = list(covering_schedules(space))
        self.plan(len(covering))

        def exercised(point: str) -> bool:
            counted = self.report.reached if point in COVERAGE_KINDS else self.report.killed
            return bool(counted.get(point))

        for position, (point, schedule) in enumerate(covering):
            if exercised(point):
                self.plan(self.report.planned - self.report.cases - 1)
                continue
            result = self.run(schedule, "coverage")
            if not result.passed:
                self.fail(result)
                rest = covering[position + 1 :]
                self._look_further(((None, s) for p, s in rest if not exercised(p)), "coverage")
                return

    # -- after the failure: the other invariants it breaks (also.py) ----------------------

    def _other_invariants(self) -> OtherInvariants | None:
        """The search for the invariants the failure did not break, or ``None`` when there
        is none to run: the failure broke no invariant, or is no verdict on the agent (a
        timeout, the world's limit, the engines disagreeing)."""
        failure = self.report.failure
        if (
            failure is None
            or not failure.invariants
            or failure.origin is not None
            or failure.disagreement is not None
        ):
            return None
        return OtherInvariants(
            failure.invariants,
            (invariant_name(check) for check in self.scenario.invariants),
            nodeid=self.nodeid,
            seed=self.settings.seed,
        )

    def _look_further(self, rest: Iterable[tuple[int | None, Schedule]], phase: str) -> None:
        """Run the schedules of ``phase`` left after the failure (each with its index in
        the enumeration, if it has one), in order, keeping the first that breaks each
        invariant not yet seen."""
        search = self._other_invariants()
        if search is None:
            return
        started = (self.report.cases, self.disagreement)
        for index, schedule in rest:
            try:
                result = self.run(schedule, phase, index=index)
            except Exception as exc:  # the first failure stands: its search stops, and says why
                self._stop_looking(exc, schedule)
                break
            self._consider(search, result, index=index)
        self._looked(search, started)

    def _look_further_drawn(self, space: Space, budget: int) -> None:
        """The Hypothesis rounds after the failure (``also.drawn_rounds``), on a
        ``budget`` of examples of their own."""
        search = self._other_invariants()
        if search is None or budget <= 0:
            return
        started = (self.report.cases, self.disagreement)
        self.plan(budget)
        seed = None if self.settings.seed is None else shard_seed(
            self.settings.seed, self.settings.shard
        )
        raised: list[Schedule] = []

        def run(schedule: Schedule) -> CaseResult:
            try:
                return self.run(schedule, "hypothesis")
            except Exception:
                raised.append(schedule)
                raise

        rounds = drawn_rounds(
            search,
            budget=budget,
            seed=seed,
            draw=lambda prop, **how: self._drawn(prop, space, **how),
            run=run,
        )
        try:
            with _shrinking_without_a_time_limit():
                for found in rounds:
                    self._consider(search, found, index=None)
        except Exception as exc:  # the first failure stands: its search stops, and says why
            # Hypothesis runs the shrunk case that raised last, and raises what it raised.
            self._stop_looking(exc, raised[-1] if raised else None)
        self._looked(search, started)

    def _consider(self, search: OtherInvariants, result: CaseResult, *, index: int | None) -> None:
        """Keep ``result`` if it breaks an invariant not yet seen: as a real kill shows it
        when the states engine found it (the replay command runs it so), a disagreement
        between the two noted on the failure (a harness bug, never hidden)."""
        if not search.new_in(result):
            return
        if self.engine is not None and self.settings.engine != "compare":
            real = self._patient(
                self.scenario, result.schedule, name="also-confirm", expected=self.expected
            )
            if not timed_out(real):
                self._note_disagreement(_disagreement(result, real))
            result = real
        search.keep(result, index=index)

    def _stop_looking(self, exc: Exception, schedule: Schedule | None) -> None:
        """The search after the failure stopped: ``exc`` was raised (by the case of
        ``schedule``, if known). Said on the failure; what it found so far is kept."""
        where = f" (schedule: {schedule})" if schedule is not None else ""
        failure = self.report.failure
        assert failure is not None
        self.report.failure = dataclasses.replace(
            failure, also_stopped=f"a case raised {type(exc).__name__}: {_first_line(exc)}{where}"
        )

    def _looked(self, search: OtherInvariants, started: tuple[int, str | None]) -> None:
        """Put what the search found on the failure. ``started``: the cases run and the
        engines' disagreement (``compare``) when it started."""
        failure = self.report.failure
        assert failure is not None
        cases, disagreement = started
        self.report.failure = dataclasses.replace(
            failure, also=tuple(search.found), also_cases=self.report.cases - cases
        )
        if disagreement is None:  # one the failure's own report has taken care of
            self._note_disagreement(self.disagreement)

    def _note_disagreement(self, disagreement: str | None) -> None:
        """The engines disagreed on a schedule after the failure: a harness bug, put on the
        failure (which then fails its test whatever it expected), unless one is already."""
        failure = self.report.failure
        if disagreement is None or failure is None or failure.disagreement is not None:
            return
        self.report.failure = dataclasses.replace(
            failure, disagreement=disagreement, errors=(*failure.errors, disagreement)
        )


@contextlib.contextmanager
def _shrinking_without_a_time_limit() -> Iterator[None]:
    """Hypothesis stops shrinking after five minutes of wall time; a case here runs real
    processes, so on a busy machine that limit would pick a less minimal schedule than on a
    quiet one. The number of shrinks Hypothesis allows still bounds the work. (Hypothesis
    reads this limit from its engine module each time it starts shrinking; where that is not
    so, nothing changes.)"""
    from hypothesis.internal.conjecture import engine

    limit = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if not isinstance(limit, int):
        yield
        return
    engine.MAX_SHRINKING_SECONDS = 24 * 3600
    try:
        yield
    finally:
        engine.MAX_SHRINKING_SECONDS = limit


def shard_seed(seed: int, shard: tuple[int, int] | None) -> int:
    """The seed Hypothesis draws shard ``(K, N)``'s schedules from: ``seed`` itself for the
    whole run, otherwise one derived from it and the shard (the same on every machine)."""
    if shard is None:
        return seed
    digest = hashlib.sha256(f"pytest-crashpoints shard {shard[0]}/{shard[1]} of {seed}".encode())
    return int.from_bytes(digest.digest()[:8], "big")


def _is_flaky(exc: BaseException) -> bool:
    """Whether Hypothesis stopped because a failure did not happen again (its ``Flaky``
    errors): the first failure seen is then the one to show."""
    from hypothesis.errors import Flaky

    return isinstance(exc, Flaky)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _verdict(result: CaseResult) -> tuple[bool, tuple[int | str, ...], str]:
    invariants = tuple(sorted({v.invariant for v in result.violations}, key=invariant_key))
    return result.passed, invariants, result.fingerprint


def _disagreement(found: CaseResult, confirmed: CaseResult) -> str | None:
    """What differs between the states engine's verdict and the real kill's, if anything."""
    if _verdict(found) == _verdict(confirmed):
        return None

    def text(result: CaseResult) -> str:
        passed, invariants, fingerprint = _verdict(result)
        what = "passed" if passed else f"failed (invariants {list(invariants) or 'none'})"
        errors = "".join(f"; error: {error.splitlines()[0]}" for error in result.errors[:3])
        return f"{what}, end state {fingerprint[:12]}{errors}"

    return (
        f"{_BUG} the states engine and a real kill disagree on this "
        f"schedule: constructed crash state {text(found)}; real SIGKILL {text(confirmed)}. "
        "The report above is the real kill's. Please report this; --crashpoints-engine="
        "processes runs every schedule the real way meanwhile."
    )


#: How a disagreement between the engines begins.
_BUG = "crashpoints harness bug:"


class CaseRaised(CrashpointsError):
    """A case raised instead of giving a verdict (in the harness, or in the user's code it
    calls, such as a ledger view), and Hypothesis stopped: ``__cause__`` is what it raised."""


class _CaseFailed(AssertionError):
    def __init__(self, result: CaseResult) -> None:
        super().__init__(f"schedule failed: {result.schedule}")
        self.result = result


def explore(
    scenario: Scenario,
    settings: CrashSettings,
    *,
    base_dir: Path,
    nodeid: str,
    reference: Scenario | None = None,
    on_case: Callable[[ExplorationReport], None] | None = None,
) -> ExplorationReport:
    """Explore crash schedules of ``scenario`` as ``settings`` say; return the report.

    With ``reference`` (the same messages for the reference worker and recovery), every
    schedule also runs on the reference, and the report lists where the final outcomes
    differ: a difference is information, not a violation (parking an ambiguous send in
    MANUAL_REVIEW where the reference confirms it can both be correct). Every worker of
    the exploration is forked from one fork server. ``on_case(report)`` is called after each
    case with the report so far (``cases``, ``planned``, ``reached``, ``schedules``): live
    progress.
    """
    started = time.monotonic()
    explorer = _Explorer(scenario, settings, base_dir, nodeid, reference, on_case)
    try:
        with fork_server_for(scenario, reference):
            return _explore(explorer, scenario, settings, base_dir=base_dir, nodeid=nodeid)
    finally:
        explorer.report.seconds = time.monotonic() - started
        # What the test's servers and engines freed goes back to the system, or a long
        # session's memory grows without a leak (see _process/memory.py).
        release_freed_memory()


def _explore(
    explorer: _Explorer,
    scenario: Scenario,
    settings: CrashSettings,
    *,
    base_dir: Path,
    nodeid: str,
) -> ExplorationReport:
    with contextlib.ExitStack() as stack:
        for database in scenario.databases:  # nothing of theirs left running after the test
            stack.callback(database.settle)
        # The agent's Redis and its databases in a server keep their state outside the run
        # directory: no crash state holds them.
        if (
            settings.engine != "processes"
            and settings.replay is None
            and scenario.redis is None
            and not scenario.databases
            and states_supported()
        ):
            explorer.engine = stack.enter_context(
                StatesEngine(
                    scenario,
                    base_dir=base_dir,
                    name=f"states-{nodeid}",
                    keep_budget=KEEP_BUDGET // max(1, settings.jobs),  # the jobs share memory
                )
            )
        report = _run_explorer(explorer, scenario, settings)
        report.engine = {"name": "processes"}
        if explorer.engine is not None:
            statistics = explorer.engine.statistics()
            for more in explorer.jobs_statistics:
                statistics = {k: v + more.get(k, 0) for k, v in statistics.items()}
            report.engine = {"name": settings.engine, **statistics}
        if explorer.jobs_used > 1:
            report.engine["jobs"] = explorer.jobs_used
        return report


def _run_explorer(
    explorer: _Explorer, scenario: Scenario, settings: CrashSettings
) -> ExplorationReport:
    explorer.plan(1)
    golden = explorer.golden()
    if golden is None:
        return explorer.report
    if settings.replay is not None:
        schedule, _seed = decode_token(settings.replay)
        explorer.plan(1)
        result = explorer.run(schedule, "replay")
        if not result.passed:
            explorer.fail(result)
        return explorer.report
    space = explorer.placed(
        _space(scenario, golden, settings.points, settings.faults, settings.faults_left_out)
    )
    if settings.mode in ("exhaustive", "both"):
        explorer.exhaustive(space)
    if explorer.report.failure is None and settings.mode in ("hypothesis", "both"):
        explorer.hypothesis(space)
        if explorer.report.failure is None:
            explorer.top_up(space)
    return explorer.report
