"""Explore crash schedules for one test: exhaustively, with Hypothesis, or one replayed.

1. The fault-free run: every message delivered once, nothing injected. It must pass; it
   tells which fail points each message reaches (and how often), and which effects no
   crash may lose.
2. Exhaustive mode: every schedule with up to ``max_faults`` faults, fewest first.
   Hypothesis mode: ``max_examples`` generated schedules, shrunk to a minimal failing one
   (and remembered in Hypothesis's example database).
3. A failing schedule is run once more and the two fingerprints compared: a mismatch is
   reported as nondeterminism (of the harness or of the code under test), never hidden.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from .._inject.failpoints import CRASH_POINTS
from ..errors import CrashpointsError
from .case import CaseResult, run_case
from .evidence import ExpectedEffect
from .invariants import invariant_key
from .report import ExplorationReport, Failure
from .scenario import Scenario
from .schedule import (
    COVERAGE_KINDS,
    Deliver,
    Schedule,
    Space,
    covering_schedules,
    enumerate_schedules,
)
from .steps import fork_server_for
from .token import decode_token, replay_token

__all__ = ["CrashSettings", "explore"]

Mode = Literal["hypothesis", "exhaustive", "both"]


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


def _replay_command(nodeid: str, token: str) -> str:
    return f"pytest {shlex.quote(nodeid)} --crashpoints-replay={token}"


def _space(scenario: Scenario, golden: CaseResult, points: Iterable[str]) -> Space:
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
    return Space(
        messages=len(scenario.messages),
        reachable=tuple(golden.delivery_hits.get(i, {}) for i in messages),
        points=frozenset(points),
        providers=tuple(spec.name for spec in specs if spec.has_lookup),
        effects=tuple(effects),
        searching=tuple(spec.name for spec in specs if spec.has_search),
        own_a=tuple(golden.delivery_own_a.get(i, 0) for i in messages),
        recovers=scenario.recover is not None,
    )


class _Explorer:
    def __init__(
        self,
        scenario: Scenario,
        settings: CrashSettings,
        *,
        base_dir: Path,
        nodeid: str,
        reference: Scenario | None = None,
    ) -> None:
        self.scenario = scenario
        self.reference = reference
        self.settings = settings
        self.base_dir = base_dir
        self.nodeid = nodeid
        self.report = ExplorationReport(
            nodeid, settings.seed, settings.mode, declared=settings.points
        )
        #: The fault-free run's effects, the baseline of every later case.
        self.expected: tuple[ExpectedEffect, ...] | None = None
        self._serial = itertools.count(1)

    def run(self, schedule: Schedule) -> CaseResult:
        result = run_case(
            self.scenario,
            schedule,
            base_dir=self.base_dir,
            name=f"case-{next(self._serial)}",
            expected=self.expected,
        )
        self.report.count(result)
        if self.reference is not None:
            self.compare(result)
        return result

    def compare(self, result: CaseResult) -> None:
        """Run the reference worker under the same schedule; record where the ends differ."""
        assert self.reference is not None
        theirs = run_case(
            self.reference, result.schedule, base_dir=self.base_dir, name="reference"
        ).outcomes
        if theirs != result.outcomes:
            ours = set(result.outcomes)
            self.report.differences.append(
                {
                    "schedule": str(result.schedule),
                    "worker_only": sorted(ours - set(theirs)),
                    "reference_only": sorted(set(theirs) - ours),
                }
            )

    def fail(self, result: CaseResult) -> None:
        again = run_case(
            self.scenario,
            result.schedule,
            base_dir=self.base_dir,
            name="rerun",
            expected=self.expected,
        )
        token = replay_token(result.schedule, seed=self.settings.seed, nodeid=self.nodeid)
        self.report.failure = Failure(
            schedule=result.schedule,
            token=token,
            replay_command=_replay_command(self.nodeid, token),
            violations=tuple(str(v) for v in result.violations),
            invariants=tuple(sorted({v.invariant for v in result.violations}, key=invariant_key)),
            titles={
                v.invariant: v.says for v in result.violations if isinstance(v.invariant, str)
            },
            errors=result.errors,
            timeline=result.timeline,
            run_dir=None if result.run_dir is None else str(result.run_dir),
            fingerprint=result.fingerprint,
            deterministic=again.fingerprint == result.fingerprint and again.passed == result.passed,
            rerun_fingerprint=again.fingerprint,
        )

    def golden(self) -> CaseResult | None:
        base = Schedule(tuple(Deliver(i) for i in range(len(self.scenario.messages))))
        result = self.run(base)
        if not result.passed:
            self.fail(result)
            return None
        self.expected = result.expected_effects
        self.report.unchecked = list(result.unchecked)
        return result

    def exhaustive(self, space: Space) -> None:
        for schedule in enumerate_schedules(space, max_faults=self.settings.max_faults):
            if not schedule.faults:
                continue  # the fault-free run already passed
            result = self.run(schedule)
            if not result.passed:
                self.fail(result)
                return

    def hypothesis(self, space: Space) -> None:
        from hypothesis import HealthCheck, given, seed
        from hypothesis import settings as hsettings

        from .schedule import schedules

        failing: list[CaseResult] = []
        options: dict[str, Any] = {
            "deadline": None,
            "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
        }
        if self.settings.max_examples is not None:
            options["max_examples"] = self.settings.max_examples

        def crash_schedule(schedule: Schedule) -> None:
            result = self.run(schedule)
            if not result.passed:
                failing.append(result)
                raise _CaseFailed(result)

        crash_schedule = hsettings(**options)(
            given(schedules(space, max_faults=self.settings.max_faults))(crash_schedule)
        )

        test: Callable[[], None] = crash_schedule
        if self.settings.seed is not None and not _hypothesis_seed_forced():
            test = seed(self.settings.seed)(crash_schedule)
        # One example-database entry per test, even with a seed (as hypothesis.find does):
        # the failing schedule is replayed first next time.
        key = hashlib.sha256(f"pytest-crashpoints:{self.nodeid}".encode()).digest()
        test._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
        try:
            test()
        except _CaseFailed as exc:
            # Hypothesis re-raises the minimal failing example last.
            self.fail(exc.result)
        except Exception as exc:  # e.g. Flaky: the failure did not reproduce
            if failing:
                self.fail(failing[-1])
            else:
                raise CrashpointsError(f"Hypothesis stopped the exploration: {exc}") from exc

    def top_up(self, space: Space) -> None:
        """Run one schedule for each kind of fault whose point no case reached yet."""
        for point, schedule in covering_schedules(space):
            kinds = COVERAGE_KINDS
            exercised = self.report.reached if point in kinds else self.report.killed
            if exercised.get(point):
                continue
            result = self.run(schedule)
            if not result.passed:
                self.fail(result)
                return


class _CaseFailed(AssertionError):
    def __init__(self, result: CaseResult) -> None:
        super().__init__(f"schedule failed: {result.schedule}")
        self.result = result


def _hypothesis_seed_forced() -> bool:
    from hypothesis import core

    return getattr(core, "global_force_seed", None) is not None


def explore(
    scenario: Scenario,
    settings: CrashSettings,
    *,
    base_dir: Path,
    nodeid: str,
    reference: Scenario | None = None,
) -> ExplorationReport:
    """Explore crash schedules of ``scenario`` as ``settings`` say; return the report.

    With ``reference`` (the same messages for the reference worker and recovery), every
    schedule also runs on the reference, and the report lists where the final outcomes
    differ: a difference is information, not a violation (parking an ambiguous send in
    MANUAL_REVIEW where the reference confirms it can both be correct). Every worker of
    the exploration is forked from one fork server.
    """
    with fork_server_for(scenario, reference):
        return _explore(scenario, settings, base_dir=base_dir, nodeid=nodeid, reference=reference)


def _explore(
    scenario: Scenario,
    settings: CrashSettings,
    *,
    base_dir: Path,
    nodeid: str,
    reference: Scenario | None,
) -> ExplorationReport:
    explorer = _Explorer(scenario, settings, base_dir=base_dir, nodeid=nodeid, reference=reference)
    golden = explorer.golden()
    if golden is None:
        return explorer.report
    if settings.replay is not None:
        schedule, _seed = decode_token(settings.replay)
        result = explorer.run(schedule)
        if not result.passed:
            explorer.fail(result)
        return explorer.report
    space = _space(scenario, golden, settings.points)
    if settings.mode in ("exhaustive", "both"):
        explorer.exhaustive(space)
    if explorer.report.failure is None and settings.mode in ("hypothesis", "both"):
        explorer.hypothesis(space)
        if explorer.report.failure is None:
            explorer.top_up(space)
    return explorer.report


