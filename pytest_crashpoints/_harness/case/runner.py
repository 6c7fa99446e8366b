"""Run one case: a scenario under one crash schedule, then the quiet phase and the six checks.

This is the lower-level API the pytest plugin and the gate build on::

    result = run_case(scenario, schedule, base_dir=tmp_path)
    result.violations      # what broke, with evidence
    result.history         # what happened, in order
    result.fingerprint     # the final state, without volatile ids

One case, top down: the world is set up in a fresh run directory (``world``); each step of
the schedule runs (``steps``: every worker and recovery a real subprocess, killed with a real
SIGKILL at the scheduled fail point; between steps the clock advances one second and the
ledger is observed); the quiet phase lifts every fault and runs recovery until nothing
changes, and the killed-recovery replay runs on a copy (``quiet``); the evidence is gathered
from the providers' journals and the ledger view (``evidence``); the six invariants are
checked on it (``invariants``); the result carries the verdict, the timeline and the
fingerprint of the final state.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..._ledger.records import Attempt, Event
from ..storage.authority_store import AuthorityChange
from ..verdict.evidence import Evidence, ExpectedEffect, ProviderRequest, RecoveryRerun
from ..verdict.history import History, render_timeline
from ..verdict.invariants import Violation, check_all, check_own, unaccounted, unchecked
from ..verdict.linking import stored_links
from ..verdict.record import case_record
from .context import CaseEnv
from .quiet import QUIET_ROUNDS, QUIET_STEP, killed_recovery_diff, needs_recovery, quiet, snapshot
from .scenario import Scenario
from .schedule import KillAt, Schedule
from .steps import INCONCLUSIVE, WORLD_LIMIT, CaseRun, fork_server_for
from .waited import Waited
from .world import World

if TYPE_CHECKING:
    from fake_providers import ModelCall

__all__ = ["CaseResult", "CopiedReplay", "Ending", "conclude", "run_case", "verdict"]


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """The verdict and the record of one case."""

    schedule: Schedule
    violations: tuple[Violation, ...]
    errors: tuple[str, ...]
    history: History
    timeline: str
    fingerprint: str
    state: tuple[str, ...]
    hits: Mapping[str, int]
    kills: tuple[str, ...]
    #: The effects the providers applied (the baseline of later cases, when this is the
    #: fault-free run).
    expected_effects: tuple[ExpectedEffect, ...]
    run_dir: Path | None
    #: Per message: how often its first delivery reached each fail point.
    delivery_hits: Mapping[int, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    #: Per message: how often its first delivery marked A itself (between tool calls).
    delivery_own_a: Mapping[int, int] = dataclasses.field(default_factory=dict)
    #: Per message: where its first delivery waited between two tool calls (``between_calls``).
    delivery_between: Mapping[int, tuple[KillAt, ...]] = dataclasses.field(default_factory=dict)
    #: Per message, the databases its first delivery committed to without syncing each
    #: commit, with their settings (``(name, "wal/1")``).
    delivery_lossy: Mapping[int, tuple[tuple[str, str], ...]] = dataclasses.field(
        default_factory=dict
    )
    #: The fail points the quiet phase's first recovery run reached.
    recovery_points: frozenset[str] = frozenset()
    #: The final outcome in terms two workers can share: each task's tool calls by arguments
    #: hash with their end state, and the effects per provider (the differential check).
    outcomes: tuple[str, ...] = ()
    #: The checks the ledger view could not support (see ``invariants.unchecked``).
    unchecked: tuple[str, ...] = ()
    #: What this case's rows left unchecked, row by row (see ``invariants.unaccounted``).
    unaccounted: tuple[str, ...] = ()
    #: A failing case as data (``record.case_record``): its merged timeline, ledger rows and
    #: violations with what they name; ``None`` when the case passed.
    record: Mapping[str, Any] | None = None
    #: Per message: how many times its delivery asked each model (the fault-free run's
    #: counts are what a model's faults target, as a provider's writes are).
    generations: Mapping[int, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    #: How many answers the models made, and how many of them answered a question asked
    #: before (an agent that asks again after a crash or a lost answer).
    model_calls: int = 0
    model_reasks: int = 0
    #: How many times the case was run again because a process of it timed out (each time
    #: with a longer deadline): this result is the last run's.
    timeout_reruns: int = 0
    #: For a worker that is a command: why its deliveries got no hooks at their commits
    #: (``""``: they did, or the worker is a Python function).
    unhooked: str = ""
    #: What the case's processes waited: skipped, for real, on the case's own providers.
    waited: Waited = dataclasses.field(default_factory=Waited)

    @property
    def passed(self) -> bool:
        return not self.violations and not self.errors


def _outcomes(evidence: Evidence) -> tuple[str, ...]:
    lines = [
        f"{a.task_id} {a.tool_name} args={a.args_hash[:12]}: {a.state.value}"
        + (" (linked)" if a.parent_attempt_id else "")
        for a in evidence.attempts
    ]
    effects: dict[tuple[str, str], int] = {}
    for effect in evidence.effects:
        key = (effect.provider, (effect.logical_hash or "")[:12])
        effects[key] = effects.get(key, 0) + 1
    lines += [f"{p} effects args={h}: {n}" for (p, h), n in effects.items()]
    return tuple(sorted(lines))


def _generations(requests: Sequence[ProviderRequest]) -> dict[int, dict[str, int]]:
    from fake_providers import PROVIDERS

    counts: dict[int, dict[str, int]] = {}
    for request in requests:
        model = PROVIDERS.get(request.provider)
        if request.message is not None and model is not None and model.is_model:
            made = counts.setdefault(request.message, {})
            made[request.provider] = made.get(request.provider, 0) + 1
    return counts


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def run_case(
    scenario: Scenario,
    schedule: Schedule,
    *,
    base_dir: Path,
    name: str = "case",
    expected: Sequence[ExpectedEffect] | None = None,
    keep: bool = False,
) -> CaseResult:
    """Run ``scenario`` under ``schedule`` in a new run directory under ``base_dir``.

    ``expected`` are the effects the fault-free run of the same messages produced (its
    ``CaseResult.expected_effects``): none may be lost, and an effect beyond them is a
    duplicate. Without it, the case is checked as a fault-free run. The run directory is
    removed when the case passes (unless ``keep``) and kept, its path in the result, when it
    fails.
    """
    from ..storage.rundir import RunDir

    run = RunDir.create(base_dir, name)
    env = CaseEnv(str(run.path), scenario.providers, scenario.transport_points)
    passed = False
    try:
        with fork_server_for(scenario):
            result = _run(scenario, schedule, env, expected)
        passed = result.passed and not keep
        kept = run.close(passed=passed)
        return dataclasses.replace(result, run_dir=kept)
    finally:
        if not passed and run.path.exists():
            run.close(passed=False)


def _run(
    scenario: Scenario,
    schedule: Schedule,
    env: CaseEnv,
    expected: Sequence[ExpectedEffect] | None,
) -> CaseResult:
    world = World(scenario, env)
    run = CaseRun(world)
    run.fault_free = not schedule.faults
    try:
        run.observe("set-up")
        for run.step, step in enumerate(schedule.steps, start=1):
            run.clock.advance(1.0)
            run.execute(step)
            run.observe(str(step))
        return verdict(run, schedule, expected, conclude(run, CopiedReplay()))
    finally:
        world.close()


class KilledRecoveryReplay(Protocol):
    """How invariant 6's killed-recovery replay gets the state it starts from: a copy of the
    run directory before the quiet phase, replayed with recovery killed (``CopiedReplay``),
    or the crash state the quiet phase's first recovery run was stopped in (the states
    engine's, ``engine.py``)."""

    def prepare(self, run: CaseRun, unacked: Sequence[int]) -> None:
        """Called before the quiet phase, with the messages still unacknowledged."""

    def diff(
        self, run: CaseRun, unacked: Sequence[int], final: list[str]
    ) -> tuple[tuple[str, ...], str | None]:
        """After the quiet phase (its evidence read): the differences between the end of a
        recovery killed midway and run again and ``final``, and where it was killed."""
        ...


class CopiedReplay:
    """The replay on a copy of the run directory taken before the quiet phase."""

    def __init__(self) -> None:
        self._copy: CaseEnv | None = None
        self._runs = 0

    def prepare(self, run: CaseRun, unacked: Sequence[int]) -> None:
        self._runs = run.processes
        if needs_recovery(run) or unacked:
            self._copy = snapshot(run, run.env.path / "killed-recovery")

    def diff(
        self, run: CaseRun, unacked: Sequence[int], final: list[str]
    ) -> tuple[tuple[str, ...], str | None]:
        if self._copy is None:
            return (), None
        return killed_recovery_diff(run, self._copy, unacked, final, runs=self._runs)


@dataclasses.dataclass(frozen=True)
class Ending:
    """What a case's quiet phase left: its final state and the evidence read from it, and
    what running recovery again changed."""

    state: tuple[str, ...]
    attempts: tuple[Attempt, ...]
    events: tuple[Event, ...]
    requests: tuple[ProviderRequest, ...]
    authority_history: tuple[AuthorityChange, ...]
    ledger_columns: frozenset[str] | None
    rerun: RecoveryRerun
    #: Every answer the case's models made (or could not make), in order.
    model_calls: tuple[ModelCall, ...] = ()
    #: Why the ledger could not be read after the case (a record torn by a power loss and
    #: written over, a file that is not a database any more); ``None``: it was read.
    unreadable: str | None = None


def conclude(run: CaseRun, replay: KilledRecoveryReplay) -> Ending:
    """The quiet phase after a schedule's steps, the second recovery when it did not settle,
    the killed-recovery replay; the evidence is read before the replay runs."""
    world = run.world
    run.step += 1
    unacked = list(run.unacked)
    replay.prepare(run, unacked)
    settled = quiet(run)
    run.observe("after the quiet phase")
    final = world.state_lines()
    again = final
    new_requests: tuple[ProviderRequest, ...] = ()
    ledger_changes: tuple[str, ...] = ()
    if not settled:
        # Recovery never stopped changing things: run it once more and show what it does.
        requests_before = len(world.requests(run.deliveries))
        run.step += 1
        run.clock.advance(QUIET_STEP)
        run.recover()
        again = world.state_lines()
        new_requests = tuple(world.requests(run.deliveries)[requests_before:])
        ledger_changes = tuple(
            difflib.unified_diff(
                final, again, "settled", "after a second recovery", n=0, lineterm=""
            )
        )
        if not ledger_changes:
            ledger_changes = (f"recovery had not settled after {QUIET_ROUNDS} quiet-phase runs",)
    view = world.view()
    attempts, events = tuple(view.attempts()), tuple(view.events())
    unreadable = None
    if world.unreadable is not None:
        if run.fault_free:
            raise world.unreadable  # the fault-free run's ledger must read: set up wrong
        unreadable = f"{type(world.unreadable).__name__}: {world.unreadable}"
    requests = tuple(world.requests(run.deliveries))
    authority_history = tuple(world.authority_history())
    columns = getattr(view, "provides", None)
    calls = tuple(world.model_calls())
    killed_diff, killed_at = replay.diff(run, unacked, again)
    return Ending(
        state=tuple(again),
        attempts=attempts,
        events=events,
        requests=requests,
        authority_history=authority_history,
        ledger_columns=columns,
        rerun=RecoveryRerun(ledger_changes, new_requests, killed_diff, killed_at),
        model_calls=calls,
        unreadable=unreadable,
    )


def _unreadable(why: str) -> Violation:
    return Violation(
        2,
        message=(
            f"the ledger cannot be read after this schedule ({why}), so no attempt can be "
            "shown to agree with the provider. The fault-free run's ledger read: the faults "
            "left it so. A crash or a power loss may cut the last record a writer had not "
            "synced; skip a torn last record when reading, and cut it off before appending "
            "the next."
        ),
    )


def _evidence(
    run: CaseRun, expected: Sequence[ExpectedEffect] | None, ending: Ending
) -> Evidence:
    """What the checks read of the case: its ending, its observations and incidents, and the
    effects expected (an incident's own requests among them); from an incident, its epoch
    (times are shown in the incident's own) and its ledger's rows as production left them."""
    epoch: float | None = None
    left: dict[str, str] = {}
    if run.scenario.incident is not None:
        from .incident import history, read_incident

        if expected is not None:
            expected = (*expected, *history(ending.requests))
        epoch = run.clock.epoch()
        left = read_incident(run.env.run_dir.journals)[1]
    return Evidence(
        attempts=ending.attempts,
        events=ending.events,
        requests=ending.requests,
        observations=tuple(run.observations),
        authority_history=ending.authority_history,
        expected_effects=None if expected is None else tuple(expected),
        incidents=tuple(run.incidents),
        rerun=ending.rerun,
        ledger_columns=ending.ledger_columns,
        epoch=epoch,
        incident_rows=left,
    )


def _refuse_a_broken_script(calls: Sequence[ModelCall]) -> None:
    """Raise :class:`ScriptError` for the first model answer the script could not make: the
    test is set up wrong, whatever the agent did."""
    broken = next((c for c in calls if c.error), None)
    if broken is not None:
        from ...errors import ScriptError

        raise ScriptError(
            f"the model's script has no answer for what "
            f"{(broken.label or '').rpartition('.')[0] or 'a process'} "
            f"asked ({broken.api}, turn {broken.turn}): {broken.error}"
        )


def _violations(
    run: CaseRun, evidence: Evidence, unreadable: str | None
) -> tuple[Violation, ...]:
    """The six invariants and the scenario's own checked on ``evidence`` (an unreadable
    ledger first); none when a process was cut short. The checks that could not run are
    added to the run's errors."""
    own, failed_checks = check_own(evidence, run.scenario.invariants)
    violations = (*check_all(evidence), *own)
    if unreadable is not None:
        violations = (_unreadable(unreadable), *violations)
    run.errors += failed_checks
    limit = _world_limit(evidence.requests)
    if limit is not None:
        # Before every other error: what follows from it (an agent that raised on the answer
        # it got) is the simulator's doing too.
        run.errors.insert(0, limit)
    if any(error.startswith((INCONCLUSIVE, WORLD_LIMIT)) for error in run.errors):
        # A process was cut short, or the agent reached past the simulated world: what the
        # case left proves nothing either way.
        violations = ()
    return violations


def _world_limit(requests: Sequence[ProviderRequest]) -> str | None:
    """The error of a case whose agent made a request a fake provider does not serve (the
    first such request, with the way out), if it made one."""
    from fake_providers import PROVIDERS

    beyond = [r for r in requests if r.world_limit is not None]
    if not beyond:
        return None
    first = beyond[0]
    more = f" (and {len(beyond) - 1} more such request(s))" if len(beyond) > 1 else ""
    who = f"{first.process} sent" if first.process else "a request was sent"
    bundled = first.provider in PROVIDERS
    way_out = (
        "If the real service serves it, ask for it (the bundled fakes serve their services' "
        "published API descriptions), or give the test a provider that describes it: "
        "HttpApi(...) or openapi(...), docs/howto-own-provider.md"
        if bundled
        else "Describe it in the provider's HttpApi(...) routes or its OpenAPI document "
        "(openapi(...)), docs/howto-own-provider.md"
    )
    return (
        f"{WORLD_LIMIT}the fake {first.provider} provider does not serve what {who}: "
        f"{first.world_limit}{more}. This case judges nothing of the agent: the simulated "
        f"world ends here, and its verdict is an error of origin 'world'. {way_out}."
    )


def verdict(
    run: CaseRun,
    schedule: Schedule,
    expected: Sequence[ExpectedEffect] | None,
    ending: Ending,
) -> CaseResult:
    """The six checks on what the case left, and the case's result."""
    evidence = _evidence(run, expected, ending)
    # An agent's own ledger stamped with ``time.time()`` in a worker holds the pinned wall
    # time (the run's epoch plus harness seconds): its events are placed on harness time.
    epoch = run.clock.epoch()
    rows = run.history.merge(
        events=[
            dataclasses.replace(event, at=event.at - epoch) if event.at >= epoch else event
            for event in evidence.events
        ],
        requests=evidence.requests,
        keys={name: a.attempt_id for a in evidence.attempts for name in stored_links(a, evidence)},
    )
    evidence = dataclasses.replace(evidence, timeline=render_timeline(rows, epoch=evidence.epoch))
    _refuse_a_broken_script(ending.model_calls)
    violations = _violations(run, evidence, ending.unreadable)
    if expected is None and not schedule.faults and not evidence.requests:
        run.errors.append(
            "the fault-free run made no request to any provider: no worker reached a tool "
            "call, so no schedule can test one. Check that the worker calls the providers "
            "of the marker (an async def worker's calls awaited, its tasks awaited) and "
            "that each message reaches its work."
        )
    record = None
    if violations or run.errors:
        record = case_record(rows, evidence.attempts, violations, epoch=evidence.epoch)
    return CaseResult(
        schedule=schedule,
        violations=violations,
        errors=tuple(run.errors),
        history=run.history,
        timeline=evidence.timeline,
        fingerprint=_digest(ending.state),
        state=ending.state,
        hits=dict(run.hits),
        kills=tuple(run.kills),
        expected_effects=tuple(
            ExpectedEffect(e.provider, e.kind, e.payload_hash, e.message, e.task_id, e.request_id)
            for e in evidence.effects
        ),
        run_dir=None,
        delivery_hits=run.delivery_hits,
        delivery_own_a=run.delivery_own_a,
        delivery_between=run.delivery_between,
        delivery_lossy=run.delivery_lossy,
        recovery_points=run.first_quiet_points,
        outcomes=_outcomes(evidence),
        unchecked=tuple(unchecked(evidence.ledger_columns)),
        unaccounted=tuple(unaccounted(evidence)),
        record=record,
        generations=_generations(evidence.requests),
        model_calls=len(ending.model_calls),
        model_reasks=sum(1 for c in ending.model_calls if c.asked),
        unhooked=run.unhooked(),
        waited=run.waited,
    )
