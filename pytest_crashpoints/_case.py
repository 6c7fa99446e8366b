"""Run one case: a scenario under one crash schedule, then the quiet phase and the six checks.

This is the lower-level API the pytest plugin and the gate build on::

    result = run_case(scenario, schedule, base_dir=tmp_path)
    result.violations      # what broke, with evidence
    result.history         # what happened, in order
    result.fingerprint     # the final state, without volatile ids

Every worker and recovery run is a real subprocess (``_worker``), killed with a real SIGKILL
at the scheduled fail point. Between steps the harness advances the clock by one second and
takes an observation of the ledger (invariant 5). The quiet phase lifts every fault, then runs
recovery (advancing the clock past leases, backoff and search lag) until a run changes
nothing, runs it once more (invariant 6), and, when recovery had work, replays the quiet phase
on a copy of the run directory with recovery killed midway, and compares the ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._authority import Authority
from ._context import CaseEnv, Context, ProviderSpec, key_secret, make_provider
from ._errors import CrashpointsError
from ._evidence import (
    AuthorityChange,
    Evidence,
    ExpectedEffect,
    Incident,
    LedgerView,
    Observation,
    ProviderRequest,
    RecoveryRerun,
)
from ._history import History
from ._invariants import Violation, check_all
from ._schedule import (
    RECOVERY_POINTS,
    Advance,
    ChangeAuthority,
    Deliver,
    KillAt,
    LookupTimeouts,
    Recover,
    Schedule,
)
from ._states import State

if TYPE_CHECKING:
    from fake_providers import Provider

    from ._authority_store import AuthorityStore
    from ._clock import HarnessClock
    from ._worker import Outcome, StartMethod

__all__ = ["CaseResult", "Scenario", "run_case"]

Worker = Callable[[Any, Context], object]
Recovery = Callable[[Context], object]

#: Harness seconds the quiet phase moves the clock before each recovery run: past leases,
#: backoff and search lag of the reference policy.
QUIET_STEP = 400.0
#: Recovery runs the quiet phase allows before it stops waiting for the ledger to settle.
QUIET_ROUNDS = 6


@dataclasses.dataclass(frozen=True)
class Scenario:
    """What a crash test runs: a worker, its recovery, the messages, the providers.

    ``worker(message, ctx)`` handles one message in a worker process; ``recover(ctx)`` runs
    recovery. Each message is a mapping with a ``task_id``; ``authorities`` gives each task
    its initial authority. ``ledger_view(ctx)`` reads the ledger the invariants are checked
    on (default: the reference ledger). ``transport_points`` are the points the crash
    transport fires (B and C); leave them empty when the worker marks B and C itself (as the
    reference ``guarded_call`` does).
    """

    worker: Worker
    recover: Recovery
    messages: tuple[Mapping[str, Any], ...]
    providers: tuple[ProviderSpec, ...]
    authorities: Mapping[str, Authority]
    ledger_view: Callable[[Context], LedgerView] | None = None
    transport_points: tuple[str, ...] = ()
    timeout: float = 30.0
    start_method: StartMethod = "fork"

    def __post_init__(self) -> None:
        for index, message in enumerate(self.messages):
            task = message.get("task_id") if isinstance(message, Mapping) else None
            if not isinstance(task, str) or not task:
                raise CrashpointsError(
                    f"message {index} ({message!r}) has no task_id; every message is a mapping "
                    "with a 'task_id' string, e.g. {'task_id': 't-1', ...}."
                )
            if task not in self.authorities:
                raise CrashpointsError(
                    f"message {index} belongs to task {task!r}, which has no authority; pass "
                    f"authorities={{{task!r}: Authority.of(tenant_id=..., "
                    "credential_scope=..., policy_version=...)}."
                )


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
    expected_effects: tuple[ExpectedEffect, ...]
    run_dir: Path | None
    #: Per message: how often its first delivery reached each fail point.
    delivery_hits: Mapping[int, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    #: The final outcome in terms two workers can share: each task's tool calls by arguments
    #: hash with their end state, and the effects per provider (the differential check).
    outcomes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.violations and not self.errors


def _deliver_entry(worker: Worker, env: CaseEnv, worker_id: str, message: Any) -> object:
    ctx = Context(env, worker_id)
    try:
        return worker(message, ctx)
    finally:
        ctx.close()


def _deliver_as(
    worker: Worker, env: CaseEnv, worker_id: str, message: Any, delivery: int
) -> object:
    from ._failpoints import crashpoint

    crashpoint("D", delivery=delivery)
    return _deliver_entry(worker, env, worker_id, message)


def _recover_entry(recovery: Recovery, env: CaseEnv, worker_id: str) -> object:
    ctx = Context(env, worker_id)
    try:
        return recovery(ctx)
    finally:
        ctx.close()


class _Case:
    """The parent side of one case, over one run directory."""

    def __init__(self, scenario: Scenario, env: CaseEnv, *, fresh: bool = True) -> None:
        from ._authority_store import AuthorityStore
        from ._clock import HarnessClock

        self.scenario = scenario
        self.env = env
        env.run_dir.journals.mkdir(parents=True, exist_ok=True)
        self.clock: HarnessClock = HarnessClock(env.clock_path)
        self.providers: dict[str, Provider] = {
            spec.name: make_provider(env, spec, self.clock) for spec in env.providers
        }
        self.store: AuthorityStore = AuthorityStore(env.authority_path, clock=self.clock.now)
        self.ctx = Context(env, "harness")
        self.history = History()
        self.observations: list[Observation] = []
        self.incidents: list[Incident] = []
        self.hits: dict[str, int] = {}
        self.kills: list[str] = []
        self.delivery_hits: dict[int, dict[str, int]] = {}
        #: Messages whose last delivery did not complete: the queue redelivers them.
        self.unacked: dict[int, None] = {}
        self.errors: list[str] = []
        #: The fail points the quiet phase's first recovery run reached.
        self.first_quiet_points: frozenset[str] = frozenset()
        self.step = 0
        self._runs = 0
        if fresh:
            self._set_up()

    def close(self) -> None:
        self.ctx.close()
        for provider in self.providers.values():
            provider.close()

    # -- set-up -----------------------------------------------------------------------------

    def _set_up(self) -> None:
        from fake_providers import ProviderSettings

        for spec in self.env.providers:
            self.providers[spec.name].settings.replace(
                ProviderSettings(
                    idempotency=spec.idempotency,
                    search_lag=spec.search_lag,
                    retention=spec.retention,
                )
            )
        for task_id, authority in self.scenario.authorities.items():
            self.store.set(task_id, authority, reason="initial authority")
            self._issue_key(authority)
        self.history.add(0, self.clock.now(), "setup", self._describe_setup())

    def _describe_setup(self) -> str:
        providers = ", ".join(
            spec.name + ("" if spec.idempotent or spec.name != "payments" else " (no idempotency)")
            for spec in self.env.providers
        )
        return f"{len(self.scenario.messages)} message(s); providers: {providers}"

    def _issue_key(self, authority: Authority) -> None:
        from fake_providers import ApiKey

        key = ApiKey(key_secret(authority), authority.tenant_id, authority.credential_scope)
        for provider in self.providers.values():
            provider.keys.add(key)

    def _retire_key(self, authority: Authority) -> None:
        # One key per tenant and scope: it stays while any task's authority still uses it.
        secret = key_secret(authority)
        still_used = any(
            current is not None and key_secret(current) == secret
            for current in (self.store.current(task) for task in self.scenario.authorities)
        )
        if not still_used:
            for provider in self.providers.values():
                provider.keys.revoke(key_secret(authority))

    # -- running processes ------------------------------------------------------------------

    def _worker_id(self, role: str) -> str:
        self._runs += 1
        return f"{role}-{self._runs}"

    def _faults(self, kill: KillAt | None) -> list[Any]:
        from ._failpoints import Fault, Kill

        return [] if kill is None else [Fault(kill.point, Kill(), hit=kill.hit)]

    def _record(self, who: str, outcome: Outcome) -> None:
        from ._worker import Completed, Killed, Raised, TimedOut

        now = self.clock.now()
        for hit in getattr(outcome, "hits", ()):
            self.hits[hit.point] = max(self.hits.get(hit.point, 0), hit.n)
        if isinstance(outcome, Completed):
            self.history.add(self.step, now, "worker", f"{who} completed")
        elif isinstance(outcome, Killed):
            where = (
                outcome.point
                if outcome.fired_at == outcome.point
                else (f"{outcome.point} (fired at {outcome.fired_at})")
            )
            text = f"{who} was killed at {where} (hit {outcome.hit})"
            self.kills.append(f"{outcome.point}#{outcome.hit}")
            self.incidents.append(Incident(now, text))
            self.history.add(self.step, now, "kill", text, point=outcome.point, hit=outcome.hit)
        elif isinstance(outcome, Raised):
            self.history.add(
                self.step, now, "raised", f"{who} raised {outcome.exc_type}: {outcome.message}"
            )
        elif isinstance(outcome, TimedOut):
            text = f"{who} timed out after {outcome.after:.1f}s (timeout {outcome.timeout:g}s)"
            self.errors.append(text)
            self.history.add(self.step, now, "timeout", text)
        else:
            text = f"{who} died without reporting: {outcome!r}"
            self.errors.append(text)
            self.history.add(self.step, now, "died", text)

    def _run(
        self, fn: Callable[..., object], args: Sequence[object], kill: KillAt | None
    ) -> Outcome:
        from ._worker import run_worker

        return run_worker(
            fn,
            args=args,
            faults=self._faults(kill),
            timeout=self.scenario.timeout,
            start_method=self.scenario.start_method,
            clock=self.clock,
        )

    def _acknowledge(self, index: int, outcomes: Sequence[Outcome]) -> None:
        from ._worker import Completed

        if any(isinstance(outcome, Completed) for outcome in outcomes):
            self.unacked.pop(index, None)
        else:
            self.unacked[index] = None

    def deliver(self, index: int, kill: KillAt | None, *, again: bool = False) -> None:
        who = self._worker_id("worker")
        message = self.scenario.messages[index]
        text = f"message {index} to {who}"
        if again:
            text = f"redeliver unacknowledged message {index} to {who}"
        self.history.add(self.step, self.clock.now(), "deliver", text)
        outcome = self._run(_deliver_entry, (self.scenario.worker, self.env, who, message), kill)
        self._acknowledge(index, [outcome])
        if index not in self.delivery_hits:
            reached: dict[str, int] = {}
            for hit in getattr(outcome, "hits", ()):
                reached[hit.point] = max(reached.get(hit.point, 0), hit.n)
            self.delivery_hits[index] = reached
        self._record(who, outcome)

    def deliver_concurrently(self, index: int, pause_at: str, kill: KillAt | None) -> None:
        import functools

        from ._errors import WorkerNotPaused
        from ._interleaving import run_interleaved

        first, second = self._worker_id("worker"), self._worker_id("worker")
        message = self.scenario.messages[index]
        self.history.add(
            self.step,
            self.clock.now(),
            "deliver",
            f"message {index} to {first} and {second} at once; {first} waits at {pause_at} "
            f"while {second} runs",
        )
        calls = [
            functools.partial(_deliver_as, self.scenario.worker, self.env, who, message, n)
            for n, who in enumerate((first, second), start=1)
        ]
        try:
            outcomes = run_interleaved(
                calls,
                # Hold the second worker before its handler, let the first run to the gate,
                # run the second to its end, then let the first finish.
                [(1, "D"), (0, pause_at), (1, None), (0, None)],
                faults=[self._faults(kill), []],
                timeout=self.scenario.timeout,
                start_method=self.scenario.start_method,
                clock=self.clock,
            )
        except WorkerNotPaused as exc:
            text = f"the interleaving could not be forced: {exc}"
            self.errors.append(text)
            self.history.add(self.step, self.clock.now(), "error", text)
            return
        self._acknowledge(index, outcomes)
        for who, outcome in zip((first, second), outcomes, strict=True):
            self._record(who, outcome)

    def recover(self, kill: KillAt | None = None) -> Outcome:
        who = self._worker_id("recovery")
        self.history.add(
            self.step,
            self.clock.now(),
            "recovery",
            f"{who} starts" + (f" ({kill})" if kill else ""),
        )
        outcome = self._run(_recover_entry, (self.scenario.recover, self.env, who), kill)
        self._record(who, outcome)
        return outcome

    def change_authority(self, index: int, change: str) -> None:
        task = str(self.scenario.messages[index]["task_id"])
        before = self.store.current(task)
        if before is None:
            self.history.add(self.step, self.clock.now(), "authority", f"{task}: already revoked")
            return
        if change == "revoke":
            self.store.revoke(task, reason="E: revoked")
        elif change == "narrow":
            narrowed = {s for s in before.credential_scope if not s.endswith(":write")}
            self.store.narrow_scope(task, narrowed, reason="E: write scopes withdrawn")
        elif change == "bump_policy":
            self.store.bump_policy(
                task, f"{before.policy_version}-next", reason="E: policy version bumped"
            )
        else:
            self.store.move_tenant(task, f"{before.tenant_id}-moved", reason="E: moved tenant")
        after = self.store.current(task)
        if after is not None:
            self._issue_key(after)
        self._retire_key(before)
        self.history.add(
            self.step,
            self.clock.now(),
            "authority",
            f"E: {change.replace('_', ' ')} for {task}: {_authority_text(before)} -> "
            f"{_authority_text(after)}",
        )

    # -- reading ----------------------------------------------------------------------------

    def view(self) -> LedgerView:
        if self.scenario.ledger_view is None:
            return self.ctx.ledger
        return self.scenario.ledger_view(self.ctx)

    def observe(self, label: str) -> None:
        view = self.view()
        self.observations.append(
            Observation(
                self.step, self.clock.now(), label, tuple(view.attempts()), tuple(view.queue())
            )
        )

    def requests(self) -> list[ProviderRequest]:
        out = []
        for spec in self.env.providers:
            for record in self.providers[spec.name].journal.requests():
                out.append(
                    ProviderRequest(
                        provider=spec.name,
                        request_id=record.request_id,
                        at=record.time,
                        tenant_id=record.tenant_id,
                        scope=frozenset(record.scopes or ()),
                        kind=record.operation or record.kind or "",
                        operation_key=record.idempotency_key or record.correlation_id,
                        args_hash=record.args_hash,
                        payload_hash=record.payload_hash,
                        status=record.status or 0,
                        effect_applied=record.effect_applied,
                        idempotent=spec.idempotent,
                        object_id=record.object_id,
                        attempt_id=record.attempt_id,
                    )
                )
        return out

    def state_lines(self) -> list[str]:
        """The final state without volatile ids: what two runs of a schedule must share."""
        view = self.view()
        attempts = sorted(view.attempts(), key=lambda a: (a.created_at, a.idempotency_key))
        names: dict[str, str] = {}

        def name(key: str | None) -> str:
            if key is None:
                return "-"
            return names.setdefault(key, f"k{len(names) + 1}")

        by_id = {a.attempt_id: a for a in attempts}
        lines = []
        for a in attempts:
            parent = by_id.get(a.parent_attempt_id or "")
            lines.append(
                f"attempt {name(a.idempotency_key)} task={a.task_id} tool={a.tool_name} "
                f"state={a.state.value} args={a.args_hash[:12]} tenant={a.authority.tenant_id} "
                f"scope='{a.authority.scope_text}' policy={a.authority.policy_version} "
                f"parent={name(parent.idempotency_key) if parent else '-'}"
            )
        for spec in self.env.providers:
            for effect in self.providers[spec.name].journal.effects():
                key = name(effect.idempotency_key or effect.correlation_id)
                digest = (effect.args_hash or effect.payload_hash)[:12]
                lines.append(
                    f"effect {spec.name} key={key} args={digest} tenant={effect.tenant_id}"
                )
        return lines

    def authority_history(self) -> list[AuthorityChange]:
        return [
            AuthorityChange(change.at, change.task_id, change.authority)
            for change in self.store.changes()
        ]


def _authority_text(authority: Authority | None) -> str:
    if authority is None:
        return "revoked"
    return (
        f"tenant {authority.tenant_id}, scope '{authority.scope_text}', "
        f"policy {authority.policy_version}"
    )


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


def _digest(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _quiet(case: _Case) -> bool:
    """Lift every fault, then run recovery until the state stops changing.

    Returns whether it settled: its last recovery run changed nothing (the ledger and the
    providers' effects alike). That run is then the "second run" of invariant 6.
    """
    for provider in case.providers.values():
        provider.faults.lift()
    case.history.add(case.step, case.clock.now(), "quiet", "quiet phase: every fault lifted")
    for round_ in range(QUIET_ROUNDS):
        case.clock.advance(QUIET_STEP)
        before = case.state_lines()
        # A restarted worker runs recovery first; then, at least once, the queue delivers
        # again every message whose worker died (its visibility timeout has passed).
        outcome = case.recover()
        if round_ == 0:
            case.first_quiet_points = frozenset(hit.point for hit in getattr(outcome, "hits", ()))
        for index in list(case.unacked):
            case.clock.advance(1.0)  # one process per harness second keeps the timeline clear
            case.deliver(index, None, again=True)
        if case.state_lines() == before:
            # Settled. A message still unacknowledged now fails the same way every time
            # (e.g. its task was revoked): the queue would dead-letter it.
            return True
    return False


def _needs_recovery(case: _Case) -> bool:
    return any(a.in_flight for a in case.view().attempts())


def _snapshot(case: _Case, target: Path) -> CaseEnv:
    """A copy of the whole run directory (the reference ledger, a user's own ledger files,
    journals, authority store, clock) as a new env under ``target``.

    Every worker is dead and the parent writes nothing meanwhile, so each SQLite file is
    copied with its WAL and shared-memory files in a consistent state. The copy is made in a
    worker process, never here: POSIX drops all of a process's locks on a file when the
    process closes any descriptor of it, so reading the files of this process's open SQLite
    connections here would silently drop their locks (and a later process would take itself
    for the only user of the database, and reset its WAL under our connections).
    """
    from ._worker import Completed, run_worker

    outcome = run_worker(
        _copy_run_dir,
        args=(str(case.env.path), str(target)),
        timeout=case.scenario.timeout,
        start_method=case.scenario.start_method,
    )
    if not isinstance(outcome, Completed):
        raise CrashpointsError(
            f"could not copy the run directory {case.env.path} to {target}: {outcome}"
        )
    return dataclasses.replace(case.env, root=str(target))


def _copy_run_dir(source: str, target: str) -> None:
    top, name = Path(source), Path(target).name
    shutil.copytree(top, target, ignore=lambda folder, names: [name] if Path(folder) == top else [])


def _killed_recovery_diff(
    case: _Case, snapshot: CaseEnv, unacked: Sequence[int], final: list[str]
) -> tuple[tuple[str, ...], str | None]:
    """Run the quiet phase on the snapshot with recovery killed midway; compare the ends.

    Recovery is killed at the latest of its fail points that the quiet phase's first
    recovery run reached: that run started from the very state of the snapshot, at the same
    harness time, so this one reaches the point too. (Trying a point on the snapshot to see
    whether it is reached would let the try's recovery change the snapshot first.)
    """
    reached = [point for point in RECOVERY_POINTS if point in case.first_quiet_points]
    if not reached:
        return (), None  # recovery passed no fail point of its own: nothing to kill it at
    point = reached[-1]
    copy = _Case(case.scenario, snapshot, fresh=False)
    try:
        copy.step = case.step
        copy.unacked = dict.fromkeys(unacked)
        for provider in copy.providers.values():
            provider.faults.lift()
        copy.clock.advance(QUIET_STEP)
        copy.recover(KillAt(point, 1))
        if not copy.kills:
            case.errors.append(
                f"killed-recovery replay: recovery did not reach {point!r} on a copy of the "
                "case, though the same recovery reached it from the same state: the recovery "
                "is not deterministic"
            )
            return (), None
        _quiet(copy)
        ended = copy.state_lines()
    finally:
        case.errors += [f"killed-recovery replay: {error}" for error in copy.errors]
        copy.close()
    diff = tuple(
        difflib.unified_diff(final, ended, "uninterrupted", "killed+rerun", n=0, lineterm="")
    )
    return diff, point


def _prepare_parent() -> None:
    """Import, in the parent, what every worker and recovery process would import, and
    prime the wall-time pin, so that forked children start warm."""
    import fake_providers  # noqa: F401

    from . import _adapters, _recovery, _reference, _toolcall, _transport  # noqa: F401
    from ._clock import prime_wall_time_pins

    prime_wall_time_pins()


@contextlib.contextmanager
def fork_server_for(*scenarios: Scenario | None) -> Iterator[None]:
    """Start the workers of the cases of ``scenarios`` from one fork server (``_forkserver``)
    until the block ends: each worker then moves an inherited wall-time pin instead of
    starting freezegun anew. The scenarios' callables and messages are passed to the server
    by reference, so closures work as under a plain fork."""
    from ._forkserver import serving

    _prepare_parent()
    forked = [s for s in scenarios if s is not None and s.start_method == "fork"]
    if not forked:  # spawn: every process is a fresh interpreter, never a fork of this one
        yield
        return
    keep: list[object] = []
    for scenario in forked:
        keep += [scenario.worker, scenario.recover, *scenario.messages]
    with serving(keep):
        yield


def run_case(
    scenario: Scenario,
    schedule: Schedule,
    *,
    base_dir: Path,
    name: str = "case",
    expected: Sequence[ExpectedEffect] = (),
    keep: bool = False,
) -> CaseResult:
    """Run ``scenario`` under ``schedule`` in a new run directory under ``base_dir``.

    ``expected`` are the effects the fault-free run produced (no delivered message may lose
    them). The run directory is removed when the case passes (unless ``keep``) and kept, its
    path in the result, when it fails.
    """
    from ._rundir import RunDir

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
    scenario: Scenario, schedule: Schedule, env: CaseEnv, expected: Sequence[ExpectedEffect]
) -> CaseResult:
    case = _Case(scenario, env)
    try:
        case.observe("set-up")
        for case.step, step in enumerate(schedule.steps, start=1):
            case.clock.advance(1.0)
            _execute(case, step)
            case.observe(str(step))
        case.step += 1
        snapshot_env = None
        unacked = list(case.unacked)
        if _needs_recovery(case) or unacked:
            snapshot_env = _snapshot(case, env.path / "killed-recovery")
        settled = _quiet(case)
        case.observe("after the quiet phase")
        final = case.state_lines()
        again = final
        new_requests: tuple[ProviderRequest, ...] = ()
        ledger_changes: tuple[str, ...] = ()
        if not settled:
            # Recovery never stopped changing things: run it once more and show what it does.
            requests_before = len(case.requests())
            case.step += 1
            case.clock.advance(QUIET_STEP)
            case.recover()
            again = case.state_lines()
            new_requests = tuple(case.requests()[requests_before:])
            ledger_changes = tuple(
                difflib.unified_diff(
                    final, again, "settled", "after a second recovery", n=0, lineterm=""
                )
            )
            if not ledger_changes:
                ledger_changes = (
                    f"recovery changed the state in each of {QUIET_ROUNDS} quiet-phase runs",
                )
        killed_diff: tuple[str, ...] = ()
        killed_at = None
        if snapshot_env is not None:
            killed_diff, killed_at = _killed_recovery_diff(case, snapshot_env, unacked, again)
        view = case.view()
        requests = case.requests()
        evidence = Evidence(
            attempts=tuple(view.attempts()),
            events=tuple(view.events()),
            requests=tuple(requests),
            observations=tuple(case.observations),
            authority_history=tuple(case.authority_history()),
            expected_effects=tuple(expected),
            incidents=tuple(case.incidents),
            rerun=RecoveryRerun(ledger_changes, new_requests, killed_diff, killed_at),
        )
        violations = tuple(check_all(evidence))
        return CaseResult(
            schedule=schedule,
            violations=violations,
            errors=tuple(case.errors),
            history=case.history,
            timeline=case.history.timeline(
                events=evidence.events,
                requests=requests,
                keys={a.idempotency_key: a.attempt_id for a in evidence.attempts},
            ),
            fingerprint=_digest(again),
            state=tuple(again),
            hits=dict(case.hits),
            kills=tuple(case.kills),
            expected_effects=tuple(
                ExpectedEffect(a.task_id, a.tool_name, a.args_hash)
                for a in evidence.attempts
                if a.state is State.OUTCOME_CONFIRMED
            ),
            run_dir=None,
            delivery_hits=case.delivery_hits,
            outcomes=_outcomes(evidence),
        )
    finally:
        case.close()


def _execute(case: _Case, step: object) -> None:
    if isinstance(step, Deliver):
        if step.duplicate == "concurrent":
            case.deliver_concurrently(step.message, step.pause_at, step.kill)
        else:
            case.deliver(step.message, step.kill)
            if step.duplicate == "after":
                case.observe(f"after the first delivery of message {step.message}")
                case.clock.advance(1.0)
                case.deliver(step.message, None)
    elif isinstance(step, ChangeAuthority):
        case.change_authority(step.message, step.change)
    elif isinstance(step, LookupTimeouts):
        provider = case.providers.get(step.provider)
        if provider is None:
            raise CrashpointsError(
                f"schedule step {step} names provider {step.provider!r}, which this case does "
                f"not have ({', '.join(case.providers)})."
            )
        provider.faults.lookup_timeouts(step.calls)
        case.history.add(case.step, case.clock.now(), "fault", str(step))
    elif isinstance(step, Recover):
        case.recover(step.kill)
    elif isinstance(step, Advance):
        case.clock.advance(step.seconds)
        case.history.add(case.step, case.clock.now(), "clock", str(step))
    else:  # pragma: no cover - the Step union is closed
        raise CrashpointsError(f"unknown schedule step {step!r}")
