"""The steps of a case: each delivery, recovery run and fault of a schedule, as it happens.

:class:`CaseRun` is the parent's side of one case over its :class:`~.world.World`: it starts
every worker and recovery as a real subprocess (through ``_process``), killed at the
scheduled fail point, and records what happened: the history (the timeline), the incidents
a violation's story tells, the fail points reached and the kills, the messages whose worker
died before acknowledging them (the queue delivers those again), and an observation of the
ledger after each step (invariant 5).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._inject.commits import install_commit_hooks
from ..._inject.failpoints import Fault, Kill, Pause, Raise, crashpoint
from ..._inject.pg_hooks import install_postgres_hooks
from ..._inject.redis_commits import install_redis_hooks
from ..._inject.wire import install_wire_hooks
from ..._process import waits
from ..._process.calling import call_to_completion
from ..._process.clock import prime_wall_time_pins
from ..._process.delivery import deliver_concurrently
from ..._process.forkserver import serving
from ..._process.interleaving import run_interleaved
from ..._process.outcome import Completed, Killed, Outcome, Raised, TimedOut
from ..._process.warm_sdks import warm_sdk_caches
from ..._process.worker import start_worker
from ...errors import CrashpointsError, WorkerNotPaused
from ..storage.agent_redis import lossy_redis
from ..storage.agentfiles import (
    Backup,
    agent_files,
    install_sync_log,
    is_sqlite,
    lose_unsynced_file,
    synced_sizes,
)
from ..storage.powerloss import lose_unsynced, lossy_databases, refusal
from ..verdict.evidence import Incident, Observation
from ..verdict.history import History
from . import schedule
from .bridge import CommandWorker, command_output
from .context import CaseEnv, Context
from .program_hooks import hooks_of, unhooked_reason
from .scenario import Recovery, Scenario, WorkerFn
from .schedule import COMMIT_ERRORS, between_calls
from .waited import Waited, read_waits
from .world import World

if TYPE_CHECKING:
    from ..._process.handle import Worker
    from ..storage.agent_redis import RedisBackup

    StandIn = Callable[[Callable[..., object], Sequence[object], schedule.KillAt | None], Outcome]

__all__ = [
    "INCONCLUSIVE",
    "WORLD_LIMIT",
    "CaseRun",
    "deliver_entry",
    "fork_server_for",
    "recover_entry",
]

#: What a worker or recovery process raised when the harness was used in a way that keeps
#: the code under test from running: reported as a harness error, never redelivered.
USAGE_ERROR = "pytest_crashpoints.errors.HarnessUsageError"

#: How an error begins that makes a case inconclusive (a process timed out): its invariants
#: are not checked, and the verdict names the slow process instead.
INCONCLUSIVE = "inconclusive: "

#: How an error begins that says a case reached beyond the simulated world (a request a fake
#: provider does not serve): its invariants are not checked, and the verdict names the request
#: and the way out, never a violation of the agent's.
WORLD_LIMIT = "the world's limit: "

#: The ``Retry-After`` of a 429 refusal, in seconds. A client sleeps it out (the openai SDK
#: does, twice with its default retries); the sleep moves the case's clock, and costs no real
#: time where nothing else can act (``_process/waits.py``), else a second of it.
REFUSAL_RETRY_AFTER = 1.0


def _enter(env: CaseEnv, worker_id: str, task_id: str | None) -> Context:
    """Set up a worker or recovery process of a case: its context, its environment (the
    providers' URLs and this process's keys, for any SDK), and the automatic crash points
    (at its SQLite and PostgreSQL commits, and at the wire of its requests to the case's
    servers)."""

    ctx = Context(env, worker_id, task_id=task_id)
    waits.name(worker_id)
    if env.urls:
        os.environ.update(ctx.sdk_env())
        addresses: list[tuple[str, int]] = []
        models: list[tuple[str, int]] = []  # a model's POSTs only ask: no automatic A
        relays: list[tuple[str, int]] = []  # SMTP: a transaction's MAIL FROM is its write
        for name, url in env.urls:
            parts = urllib.parse.urlsplit(url)
            spec = env.spec(name)
            where = models if spec.is_model else relays if spec.speaks_smtp else addresses
            where.append((parts.hostname or "127.0.0.1", parts.port or 80))
        install_wire_hooks(addresses, reads=models, smtp=relays)
        waits.world([*addresses, *models, *relays])  # a connection to them is no real server
    install_commit_hooks(exclude=[env.run_dir.journals, env.authority_path])
    install_postgres_hooks()
    install_redis_hooks()
    install_sync_log(env.path)
    return ctx


def deliver_entry(worker: WorkerFn, env: CaseEnv, worker_id: str, message: Any) -> object:
    """What a worker process of the case runs: ``worker(message, ctx)`` to completion."""
    ctx = _enter(env, worker_id, str(message["task_id"]))
    try:
        return call_to_completion(worker, (message, ctx), {}, role="worker")
    finally:
        ctx.close()


def recover_entry(recovery: Recovery, env: CaseEnv, worker_id: str) -> object:
    """What a recovery process of the case runs: ``recovery(ctx)`` to completion."""
    ctx = _enter(env, worker_id, None)
    try:
        return call_to_completion(recovery, (ctx,), {}, role="recovery")
    finally:
        ctx.close()


#: The fail point a racing recovery passes before it starts: where the second one is held.
RACE_START = "recovery.starts"


def _race_entry(recovery: Recovery, env: CaseEnv, worker_id: str) -> object:
    crashpoint(RACE_START)
    return recover_entry(recovery, env, worker_id)


def _copied(value: Any) -> Any:
    # The record's items are immutable (frozen entries, observations, outcomes): copying the
    # containers is enough.
    if isinstance(value, History):
        return History(list(value.entries))
    if isinstance(value, Waited):
        return Waited(**vars(value))
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, set):
        return set(value)
    return value


class CaseRun:
    """The parent's side of one case: the processes it starts and what it saw of them."""

    def __init__(self, world: World, *, fresh: bool = True) -> None:
        self.world = world
        world.unreadable = None  # a case begins: its ledger has not failed to read
        self.scenario: Scenario = world.scenario
        self.env = world.env
        self.clock = world.clock
        self.history = History()
        self.observations: list[Observation] = []
        self.incidents: list[Incident] = []
        self.hits: dict[str, int] = {}
        self.kills: list[str] = []
        self.delivery_hits: dict[int, dict[str, int]] = {}
        #: Per message: how often its first delivery marked A itself (not automatically).
        self.delivery_own_a: dict[int, int] = {}
        #: Per message: where its first delivery waited between two tool calls.
        self.delivery_between: dict[int, tuple[schedule.KillAt, ...]] = {}
        self.delivery_lossy: dict[int, tuple[tuple[str, str], ...]] = {}
        #: During a concurrent delivery: (the held worker, the other, where it is held).
        self._held: tuple[str, str, str] | None = None
        #: Messages whose last delivery did not complete: the queue redelivers them.
        self.unacked: dict[int, None] = {}
        self.errors: list[str] = []
        #: The fail points the quiet phase's first recovery run reached.
        self.first_quiet_points: frozenset[str] = frozenset()
        #: Which message each worker process delivered (recovery processes deliver none).
        self.deliveries: dict[str, int] = {}
        self.step = 0
        #: A case with nothing injected: an exception in the worker or recovery is an error
        #: (it fails the test), not an outcome to recover from.
        self.fault_free = False
        #: Whether a process raised in the fault-free run (the first one is the error).
        self.raised = False
        #: How many processes the case has started: the next one's name is one more.
        self.processes = 0
        #: The states engine's hook: when set, every process a step would run goes through
        #: it instead, ``stand_in(fn, args, kill) -> Outcome``.
        self.stand_in: StandIn | None = None
        #: What the case's processes waited, and where the next read of their wait log starts.
        self.waited = Waited()
        self.waits_read = 0
        if fresh:
            self.history.add(0, self.clock.now(), "setup", world.describe())

    # -- the record, as an engine keeps and resumes it --------------------------------------

    #: The attributes that are the case's world, not its record.
    _WORLD = frozenset({"world", "scenario", "env", "clock", "stand_in"})
    #: The parts of the record that only grow: what a later phase adds is appended to them.
    GROWING = ("history", "observations", "incidents", "kills", "errors")

    def memento(self) -> dict[str, Any]:
        """The record so far, copied: with the durable files of the same moment, all an
        engine needs to resume the case from here (:meth:`resume`)."""
        return {name: _copied(v) for name, v in vars(self).items() if name not in self._WORLD}

    @classmethod
    def resume(cls, world: World, memento: Mapping[str, Any]) -> CaseRun:
        """A run of ``world`` whose record is ``memento`` (its files already put back)."""
        run = cls(world, fresh=False)
        for name, value in memento.items():
            setattr(run, name, _copied(value))
        return run

    def _growing(self, name: str) -> list[Any]:
        part = getattr(self, name)
        return part.entries if isinstance(part, History) else part

    def tally(self) -> tuple[int, ...]:
        """How long each growing part of the record is: where :meth:`grown_since` starts."""
        return tuple(len(self._growing(name)) for name in self.GROWING)

    def grown_since(self, tally: Sequence[int]) -> dict[str, tuple[Any, ...]]:
        """What each growing part of the record gained since ``tally``."""
        return {
            name: tuple(self._growing(name)[start:])
            for name, start in zip(self.GROWING, tally, strict=True)
        }

    def extend(self, grown: Mapping[str, Sequence[Any]], state: Mapping[str, Any]) -> None:
        """Add what a phase added to another run's record (``grown``), and take on the rest
        of its record (``state``): the run now ends as that one did."""
        for name, items in grown.items():
            self._growing(name).extend(items)
        for name, value in state.items():
            setattr(self, name, _copied(value))

    def state(self) -> dict[str, Any]:
        """The record's parts that a phase replaces rather than grows (the hits excepted:
        an engine merges those)."""
        skip = {*self._WORLD, *self.GROWING, "hits"}
        return {name: _copied(v) for name, v in vars(self).items() if name not in skip}

    # -- running processes ------------------------------------------------------------------

    def _worker_id(self, role: str) -> str:
        """The name of the next process of the case; from now until it is recorded as
        ended, the providers' servers admit its requests."""
        self.processes += 1
        name = f"{role}-{self.processes}"
        self.world.live.add(name)
        return name

    def _settle(self, who: str) -> None:
        """After process ``who`` ended: wait until the providers have answered every request
        that reached them (one it sent just before it died is applied, as a real provider
        applies it), then refuse its name; say what the servers refused meanwhile."""
        now = self.clock.now()
        for provider in self.world.settle():
            text = (
                f"the {provider} server was still answering a request "
                f"{self.scenario.timeout:g}s after {who} ended"
            )
            self.errors.append(text)
            self.history.add(self.step, now, "error", text, process=who)
        self.world.live.discard(who)
        for provider, method, path, reason in self.world.refusals():
            text = f"{provider} refused {method} {path} unjournaled: {reason}"
            if "process of this case" in reason:
                # A request of the case's own process after it ended: nothing may reach
                # the ground truth late.
                self.errors.append(text)
                self.history.add(self.step, now, "error", text)
            else:
                self.history.add(self.step, now, "note", text)

    def _faults(self, kill: schedule.KillAt | None) -> list[Any]:
        return [] if kill is None else [Fault(kill.point, Kill(), hit=kill.hit)]

    def _record(self, who: str, outcome: Outcome, kill: schedule.KillAt | None = None) -> None:
        self._settle(who)
        self.waits_read = read_waits(
            str(self.clock.path), self.waits_read, self.history, self.step, self.waited
        )
        now = self.clock.now()
        for hit in getattr(outcome, "hits", ()):
            self.hits[hit.point] = max(self.hits.get(hit.point, 0), hit.n)
        left = getattr(outcome, "left_running", ())
        if left:
            text = f"{who} ended with process(es) it started still running: {', '.join(left)}"
            self.errors.append(text + " (killed by the harness; wait for what you start)")
            self.history.add(self.step, now, "error", text, process=who)
        if isinstance(outcome, Completed):
            text = f"{who} completed"
            if kill is not None:
                # E.g. a C deferred to the next fail point, and none came: nothing was killed.
                text += f" (the {kill} scheduled for it never took effect)"
            self.history.add(self.step, now, "worker", text, process=who)
        elif isinstance(outcome, Killed):
            self._record_kill(who, now, outcome)
        elif isinstance(outcome, Raised) and outcome.exc_type == USAGE_ERROR:
            # The harness was used in a way that keeps the code from running (a coroutine
            # never awaited, tasks left pending): the test must fail, not redeliver.
            text = f"{who}: {outcome.message}"
            self.errors.append(text)
            self.history.add(self.step, now, "error", text, process=who)
        elif isinstance(outcome, Raised):
            self._record_raised(who, now, outcome)
        elif isinstance(outcome, TimedOut):
            self._record_timeout(who, now, outcome)
        else:
            text = f"{who} died without reporting: {outcome!r}"
            self.errors.append(text)
            self.history.add(self.step, now, "died", text, process=who)
        for line in command_output(self.env, who):  # a command's last words, if any
            self.history.add(self.step, now, "output", line, process=who)

    def _record_kill(self, who: str, now: float, outcome: Killed) -> None:
        """Process ``who`` was killed at its point: a kill, and an incident of the story."""
        where = (
            outcome.point
            if outcome.fired_at == outcome.point
            else (f"{outcome.point} (fired at {outcome.fired_at})")
        )
        text = f"{who} was killed at {where} (hit {outcome.hit})"
        self.kills.append(f"{outcome.point}#{outcome.hit}")
        self.incidents.append(Incident(now, text))
        self.history.add(
            self.step, now, "kill", text, process=who, point=outcome.point, hit=outcome.hit
        )

    def _record_raised(self, who: str, now: float, outcome: Raised) -> None:
        """Process ``who`` raised: an outcome to recover from, except in the fault-free run,
        where the first exception nothing injected is the test's error."""
        text = f"{who} raised {outcome.exc_type}: {outcome.message}"
        self.history.add(self.step, now, "raised", text, process=who)
        if self.fault_free and outcome.injected_at is None and not self.raised:
            self.raised = True  # the first is the story; later ones are in the timeline
            self.errors.append(
                f"{text} in the fault-free run, where nothing was injected; a crash test "
                f"needs a worker and recovery that succeed then.\n{outcome.traceback}"
            )

    def _record_timeout(self, who: str, now: float, outcome: TimedOut) -> None:
        """Process ``who`` timed out and was killed: the case is inconclusive, and the error
        says what to look at."""
        waited = ""
        if outcome.stalled >= 0.1:
            waited = f", {outcome.stalled:.1f}s of it waiting for a CPU"
        text = (
            f"{who} timed out after {outcome.after:.1f}s (timeout {outcome.timeout:g}s"
            f"{waited}) and was killed"
        )
        # Nothing the case left after it says anything about the agent: inconclusive,
        # never a violation.
        self.errors.append(
            f"{INCONCLUSIVE}{text}; the case's end proves nothing. If the agent is this "
            f"slow here, raise the timeout ({outcome.timeout:g}s now: timeout= on the "
            "marker wins over --crashpoints-timeout, PYTEST_CRASHPOINTS_TIMEOUT and the "
            f"ini's crashpoints_timeout); else look for a hang in it{self._held_hint()}"
        )
        self.history.add(self.step, now, "timeout", text, process=who)

    def _held_hint(self) -> str:
        """During a concurrent delivery, why the second worker may have waited out its
        timeout on what the held first one holds, and how to let it fail instead."""
        if self._held is None:
            return ""
        first, second, point = self._held
        return (
            f". {first} was held at {point} by the schedule while {second} ran (two "
            f"deliveries at once): if {second} waits for something {first} holds there "
            "(a SQLite write lock taken before the point, a file lock), it waits "
            "until it is timed out; give that wait a shorter timeout of its own "
            "(sqlite3.connect(..., timeout=5)) so the second delivery fails and its "
            "message comes back"
        )

    def run_process(
        self,
        fn: Callable[..., object],
        args: Sequence[object],
        kill: schedule.KillAt | None,
        more: Sequence[Any] = (),
    ) -> Outcome:
        if self.stand_in is not None and not more:
            return self.stand_in(fn, args, kill)
        return self.start(fn, args, [*self._faults(kill), *more]).wait()

    def start(
        self, fn: Callable[..., object], args: Sequence[object], faults: Sequence[Any]
    ) -> Worker:
        """Start one process of the case (a worker or a recovery run) armed with ``faults``."""

        return start_worker(
            fn,
            args=args,
            faults=faults,
            timeout=self.scenario.timeout,
            start_method=self.scenario.start_method,
            clock=self.clock,
        )

    def _acknowledge(self, index: int, outcomes: Sequence[Outcome]) -> None:
        if any(isinstance(outcome, Completed) for outcome in outcomes):
            self.unacked.pop(index, None)
        else:
            self.unacked[index] = None

    def deliver(
        self,
        index: int,
        kill: schedule.KillAt | None,
        *,
        again: bool = False,
        fail_commit: schedule.FailCommit | None = None,
        power_loss: bool = False,
        backup_restore: bool = False,
    ) -> None:
        # The agent's files before this delivery: what a power loss falls back to, and the
        # backup a restore puts back (taken only for those: copying them means settling and
        # holding the servers, and closing the harness's own connections on the files).
        before = self._agent_files() if power_loss or backup_restore else None
        redis_backup = None
        if power_loss and self.world.redis is not None:
            self.world.redis.sync_point(f"message {index} was about to be delivered")
        if backup_restore and self.world.redis is not None:
            redis_backup = self.world.redis.backup()
        who = self._worker_id("worker")
        message = self.scenario.messages[index]
        text = f"message {index} to {who}"
        if again:
            text = f"redeliver unacknowledged message {index} to {who}"
        self.history.add(self.step, self.clock.now(), "deliver", text, process=who, message=index)
        self.deliveries[who] = index
        more = []
        if fail_commit is not None:
            error = sqlite3.OperationalError(COMMIT_ERRORS[fail_commit.variant])
            more += [Fault("db.commit", Raise(error), hit=hit) for hit in fail_commit.hits]
        outcome = self.run_process(
            deliver_entry, (self.scenario.worker, self.env, who, message), kill, more
        )
        if fail_commit is not None:
            failed = any(
                hit.point == "db.commit" and hit.n == fail_commit.hit
                for hit in getattr(outcome, "hits", ())
            )
            said = (
                f"{who}: {fail_commit}"
                if failed
                else f"{who} ended before its {fail_commit.hit} commit(s): none failed"
            )
            self.history.add(self.step, self.clock.now(), "fault", said, process=who)
        self._acknowledge(index, [outcome])
        if index not in self.delivery_hits:
            reached: dict[str, int] = {}
            hits = getattr(outcome, "hits", ())
            for hit in hits:
                reached[hit.point] = max(reached.get(hit.point, 0), hit.n)
            self.delivery_hits[index] = reached
            self.delivery_own_a[index] = sum(
                1 for hit in hits if hit.point == "A" and hit.context.get("source") != "auto"
            )
            self.delivery_between[index] = between_calls(hits)
            self.delivery_lossy[index] = tuple(sorted(lossy_databases(hits).items()))
            self.delivery_lossy[index] += lossy_redis(self.world.redis, hits)
            if self.fault_free:
                self.delivery_lossy[index] += self._unsynced_files(who)
        self._record(who, outcome, kill)
        if power_loss and before is not None:
            self._lose_power(who, outcome, before)
        if backup_restore and before is not None:
            self._restore_backup(who, index, outcome, before, redis_backup)

    def _fresh_context(self) -> None:
        """Close every connection this process holds on the run directory's files (a fresh
        harness context opens them again when next needed): a copy or a rewrite of the
        agent's files then drops no lock of ours, and no cached page outlives a rewrite."""
        self.world.ctx.close()
        self.world.files.close()
        self.world.ctx = Context(self.world.env, "harness")

    def _agent_files(self) -> Backup:
        with self.world.still():
            self._fresh_context()
            return Backup.take(self.env.path)

    def _unsynced_files(self, who: str) -> tuple[tuple[str, str], ...]:
        """The agent's files (not SQLite's) that hold more than their last sync (by size; a
        file never synced counts): a power loss would take something from them."""
        if not self._syncs_seen(who):
            return ()
        synced = synced_sizes(self.env.path)
        out = []
        for path in agent_files(self.env.path):
            relative = path.relative_to(self.env.path).as_posix()
            if is_sqlite(path, self.world.files):
                continue
            size = path.stat().st_size
            if size and size > synced.get(relative, -1):
                out.append((relative, "file"))
        return tuple(out)

    def unhooked(self) -> str:
        """For a worker that is a command: why its deliveries ran no Python with the
        harness's hooks (``""``: one did, or the worker is a Python function)."""
        if not isinstance(self.scenario.worker, CommandWorker) or not self.deliveries:
            return ""
        logs = self.env.run_dir.logs
        reasons = [unhooked_reason(hooks_of(logs, who)) for who in self.deliveries]
        return "" if not all(reasons) else reasons[0]

    def _syncs_seen(self, who: str) -> bool:
        """Whether process ``who``'s syncs are seen: a Python worker, or a command whose
        Python ran with the harness's hooks (``program_hooks.py``)."""
        if not isinstance(self.scenario.worker, CommandWorker):
            return True
        return any(line.get("hooked") is True for line in hooks_of(self.env.run_dir.logs, who))

    def _restore_backup(
        self,
        who: str,
        index: int,
        outcome: object,
        before: Backup,
        redis_backup: RedisBackup | None = None,
    ) -> None:
        """After a kill: the agent's files (and its Redis) put back from the backup taken
        before this delivery (the providers keep everything); said in the timeline."""

        if not isinstance(outcome, Killed):
            said = f"no backup restored: {who} ended before its point"
        else:
            with self.world.still():
                self._fresh_context()
                changed = before.restore(self.env.path)
            names = ", ".join(changed) if changed else "nothing had changed"
            said = (
                f"backup restored: the agent's files as they were before message {index} was "
                f"delivered ({names}); the providers keep what was done since"
            )
            if self.world.redis is not None and redis_backup is not None:
                when = f"message {index} was about to be delivered"
                said += "; " + self.world.redis.restore(redis_backup, when)
            self.incidents.append(
                Incident(
                    self.clock.now(),
                    f"the agent's files were restored from a backup "
                    f"taken before message {index} ({names})",
                )
            )
        self.history.add(self.step, self.clock.now(), "power", said, process=who)

    def _lose_unsynced_files(self, who: str, before: Backup) -> list[str]:
        """A power loss of the agent's files that are not SQLite's: each keeps what was
        synced or there before the delivery, and the first half of the next record."""
        if not self._syncs_seen(who):
            return [
                "files other than SQLite's not modelled (the worker is a command that ran no "
                "Python with the harness's hooks: its syncs are not seen)"
            ]
        synced = synced_sizes(self.env.path)
        out = []
        with self.world.still():
            self._fresh_context()
            for path in agent_files(self.env.path):
                relative = path.relative_to(self.env.path).as_posix()
                if is_sqlite(path):
                    continue
                old = before.files.get(relative)
                if old is not None and path.read_bytes() == old:
                    continue
                loss = lose_unsynced_file(self.env.path, relative, old, synced.get(relative))
                if loss is not None:
                    out.append(str(loss))
        return out

    def _lose_power(self, who: str, outcome: object, before: Backup) -> None:
        """After a kill that is a power loss: each database the worker committed to without
        syncing loses what it did not sync (``powerloss.py``); said in the timeline."""

        if not isinstance(outcome, Killed):
            said = f"no power loss: {who} ended before its point"
            self.history.add(self.step, self.clock.now(), "power", said, process=who)
            return
        lossy = lossy_databases(getattr(outcome, "hits", ()))
        parts: list[str] = []
        with self.world.still():
            self._fresh_context()
            for name, sync in sorted(lossy.items()):
                reason = refusal(sync)
                if reason is not None:
                    parts.append(f"not modelled on {name} ({reason})")
                    continue
                for path in sorted(self.env.path.rglob(name)):
                    if path.is_file() and "journals" not in path.relative_to(self.env.path).parts:
                        parts.append(str(lose_unsynced(path)))
        parts += self._lose_unsynced_files(who, before)
        if self.world.redis is not None:
            parts.append(self.world.redis.lose_power())
        if not parts:
            parts.append(
                "every database it committed to syncs each commit: nothing more lost than by a kill"
            )
        said = "; ".join(parts)
        self.history.add(self.step, self.clock.now(), "power", f"power lost: {said}", process=who)
        self.incidents.append(Incident(self.clock.now(), f"the power was lost ({said})"))

    def deliver_midway(self, index: int, midway: schedule.Midway) -> None:
        """Deliver message ``index`` and, while its worker waits at the midway point,
        change its task's authority (E between two tool calls); then let it go on."""

        who = self._worker_id("worker")
        message = self.scenario.messages[index]
        self.history.add(
            self.step,
            self.clock.now(),
            "deliver",
            f"message {index} to {who}",
            process=who,
            message=index,
            paused=who,
            pause_at=midway.point,
        )
        self.deliveries[who] = index
        gate = f"midway at {midway.point} #{midway.hit}"
        worker = start_worker(
            deliver_entry,
            args=(self.scenario.worker, self.env, who, message),
            faults=[Fault(midway.point, Pause(gate), hit=midway.hit)],
            timeout=self.scenario.timeout,
            start_method=self.scenario.start_method,
            clock=self.clock,
        )
        with worker:
            try:
                worker.wait_paused(gate)
            except WorkerNotPaused as exc:
                if not isinstance(exc.outcome, Completed):
                    raise
                self.history.add(
                    self.step,
                    self.clock.now(),
                    "note",
                    f"{who} ended without reaching {midway.point} (hit {midway.hit})",
                    process=who,
                )
            else:
                # A harness second passes while it waits: what it did before the change and
                # what it does after are told apart by time (invariant 4 compares the two).
                self.clock.advance(1.0)
                self.change_authority(index, midway.change)
                worker.release(gate)
            outcome = worker.wait()
        self._acknowledge(index, [outcome])
        self._record(who, outcome)

    def deliver_concurrently(
        self, index: int, pause_at: str, kill: schedule.KillAt | None, pause_hit: int = 1
    ) -> None:
        first, second = self._worker_id("worker"), self._worker_id("worker")
        message = self.scenario.messages[index]
        self.history.add(
            self.step,
            self.clock.now(),
            "deliver",
            f"message {index} to {first} and {second} at once; {first} waits at {pause_at} "
            f"(hit {pause_hit}) while {second} runs",
            processes=[first, second],
            message=index,
            paused=first,
            pause_at=pause_at,
        )
        self.deliveries.update({first: index, second: index})
        handlers = tuple(
            functools.partial(deliver_entry, self.scenario.worker, self.env, who)
            for who in (first, second)
        )
        try:
            outcomes = deliver_concurrently(
                handlers,
                message,
                # Hold the second worker before its handler, let the first run to the gate,
                # run the second to its end, then let the first finish.
                interleaving=[(1, "D"), (0, pause_at, pause_hit), (1, None), (0, None)],
                faults=[self._faults(kill), []],
                timeout=self.scenario.timeout,
                start_method=self.scenario.start_method,
                clock=self.clock,
            )
        except WorkerNotPaused as exc:
            if not isinstance(exc.outcome, Completed | Killed | Raised):
                text = f"the interleaving could not be forced: {exc}"
                self.errors.append(text)
                self.history.add(
                    self.step, self.clock.now(), "error", text, processes=[first, second]
                )
                return
            # Another fault of the schedule took the first worker elsewhere (a lost answer,
            # a kill before the gate): it ended first, and the second delivery comes after.
            gate = f"{pause_at} (hit {pause_hit})"
            self._deliver_after(index, (first, second), exc.outcome, kill, gate)
            return
        self._acknowledge(index, outcomes)
        self._held = (first, second, pause_at)
        try:
            for who, outcome, planned in zip((first, second), outcomes, (kill, None), strict=True):
                self._record(who, outcome, planned)
        finally:
            self._held = None

    def _deliver_after(
        self,
        index: int,
        workers: tuple[str, str],
        ended: Completed | Killed | Raised,
        kill: schedule.KillAt | None,
        gate: str,
    ) -> None:
        """The first of two workers delivering message ``index`` at once ended (``ended``)
        before it reached its ``gate``: record it, then deliver to the second on its own."""
        first, second = workers
        self._acknowledge(index, [ended])
        self._record(first, ended, kill)
        self.history.add(
            self.step,
            self.clock.now(),
            "note",
            f"{first} ended without reaching {gate}: {second} runs after it",
            process=first,
        )
        args = (self.scenario.worker, self.env, second, self.scenario.messages[index])
        outcome = self.run_process(deliver_entry, args, None)
        self._acknowledge(index, [outcome])
        self._record(second, outcome)

    def recover(self, kill: schedule.KillAt | None = None) -> Outcome | None:
        """Run recovery in a process of its own (nothing, if the agent has no recovery)."""
        if self.scenario.recover is None:
            return None
        who = self._worker_id("recovery")
        self.history.add(
            self.step,
            self.clock.now(),
            "recovery",
            f"{who} starts" + (f" ({kill})" if kill else ""),
            process=who,
        )
        outcome = self.run_process(recover_entry, (self.scenario.recover, self.env, who), kill)
        self._record(who, outcome, kill)
        return outcome

    def recover_racing(self, pause_at: str | None) -> None:
        """Two recovery processes at once: racing freely, or the first waiting at
        ``pause_at`` while the second runs to its end (then the first goes on with what it
        read before). A first recovery that never reaches ``pause_at`` (its work took it
        elsewhere) only makes the two run one after the other: noted, no error."""

        if self.scenario.recover is None:
            return
        first, second = self._worker_id("recovery"), self._worker_id("recovery")
        how = f"{first} waits at {pause_at} while {second} runs" if pause_at else "racing"
        paused = {"paused": first, "pause_at": pause_at} if pause_at else {}
        self.history.add(
            self.step,
            self.clock.now(),
            "recovery",
            f"{first} and {second} start at once; {how}",
            processes=[first, second],
            **paused,
        )
        calls = [
            functools.partial(_race_entry, self.scenario.recover, self.env, who)
            for who in (first, second)
        ]
        order: list[Any] = []
        if pause_at is not None:
            order = [(1, RACE_START), (0, pause_at), (1, None), (0, None)]
        try:
            outcomes = run_interleaved(
                calls,
                order,
                timeout=self.scenario.timeout,
                start_method=self.scenario.start_method,
                clock=self.clock,
            )
        except WorkerNotPaused as exc:
            if not isinstance(exc.outcome, Completed):
                raise
            self._record(first, exc.outcome)
            self.history.add(
                self.step,
                self.clock.now(),
                "note",
                f"{first} ended without reaching {pause_at}: {second} runs after it",
                process=first,
            )
            self.recover()
            return
        for who, outcome in zip((first, second), outcomes, strict=True):
            self._record(who, outcome)

    def change_authority(self, index: int, change: str) -> None:
        task = str(self.scenario.messages[index]["task_id"])
        text = self.world.change_authority(task, change)
        self.history.add(self.step, self.clock.now(), "authority", text, message=index, task=task)

    def observe(self, label: str) -> None:
        view = self.world.view()
        self.observations.append(
            Observation(
                self.step, self.clock.now(), label, tuple(view.attempts()), tuple(view.queue())
            )
        )

    # -- schedule steps ---------------------------------------------------------------------

    def execute(self, step: schedule.Step) -> None:
        """Do what one schedule step says."""
        if isinstance(step, schedule.Deliver):
            self._execute_delivery(step)
        elif isinstance(step, schedule.ChangeAuthority):
            self.change_authority(step.message, step.change)
        elif isinstance(step, schedule.ProviderFault):
            self._provider_fault(step)
        elif isinstance(step, schedule.Recover):
            if step.racing:
                self.recover_racing(step.pause_at)
            else:
                self.recover(step.kill)
        elif isinstance(step, schedule.Advance):
            self.clock.advance(step.seconds)
            self.history.add(self.step, self.clock.now(), "clock", str(step), seconds=step.seconds)
        else:  # pragma: no cover - the Step union is closed
            raise CrashpointsError(f"unknown schedule step {step!r}")

    def _execute_delivery(self, step: schedule.Deliver) -> None:
        if not 0 <= step.message < len(self.scenario.messages):
            raise CrashpointsError(
                f"schedule step {step} names message {step.message}, but this test has "
                f"{len(self.scenario.messages)} message(s) (0 to "
                f"{len(self.scenario.messages) - 1}); the schedule is for another test."
            )
        if step.midway is not None:
            self.deliver_midway(step.message, step.midway)
        elif step.duplicate == "concurrent":
            self.deliver_concurrently(step.message, step.pause_at, step.kill, step.pause_hit)
        else:
            # A message delivered before and not acknowledged (the queue's own redelivery of
            # a dead worker's message) is said so.
            self.deliver(
                step.message,
                step.kill,
                again=step.message in self.unacked,
                fail_commit=step.fail_commit,
                power_loss=step.power_loss,
                backup_restore=step.backup_restore,
            )
            if step.duplicate == "after":
                self.observe(f"after the first delivery of message {step.message}")
                self.clock.advance(1.0)
                self.deliver(step.message, None)

    def _provider_fault(self, step: schedule.ProviderFault) -> None:
        """F and its kin: switch a provider's fault on (the quiet phase lifts it; a lag stays,
        as an index stays slow)."""
        provider = self.world.providers.get(step.provider)
        if provider is None:
            raise CrashpointsError(
                f"schedule step {step} names provider {step.provider!r}, which this case "
                f"does not have ({', '.join(self.world.providers)})."
            )
        faults = provider.faults
        if isinstance(step, schedule.LookupTimeouts):
            if step.variant == "timeout":
                faults.lookup_timeouts(step.calls)
            else:
                faults.server_errors(step.calls, on="lookups", status=500)
        elif isinstance(step, schedule.LoseResponse):
            faults.lose_responses(1, after=step.nth - 1, variant=step.variant)
        elif isinstance(step, schedule.DuplicateRequest):
            if not getattr(self.world.env.spec(step.provider), "duplicates_requests", False):
                raise CrashpointsError(
                    f"schedule step {step} duplicates a request to {step.provider!r}, which is "
                    "not an MCP server (only an MCP server's requests are sent twice)."
                )
            faults.duplicate_requests(1, after=step.nth - 1)
        elif isinstance(step, schedule.Refuse):
            if step.variant == "500":
                faults.server_errors(1, on="writes", status=500, after=step.nth - 1)
            elif step.variant == "429":
                faults.rate_limits(
                    1, on="writes", retry_after=REFUSAL_RETRY_AFTER, after=step.nth - 1
                )
            elif step.variant == "session":
                if not getattr(self.world.env.spec(step.provider), "has_sessions", False):
                    raise CrashpointsError(
                        f"schedule step {step} forgets a session of {step.provider!r}, which "
                        "keeps none (only an MCP server with sessions does, not a stateless "
                        "one)."
                    )
                faults.lose_sessions(1, after=step.nth - 1)
            else:
                faults.write_timeouts(1, after=step.nth - 1)
        else:
            provider.settings.update(search_lag=step.seconds)
        self.history.add(self.step, self.clock.now(), "fault", str(step), provider=step.provider)


def _prepare_parent() -> None:
    """Import, in the parent, what every worker and recovery process would import, and
    prime the wall-time pin, so that forked children start warm."""
    import encodings.idna  # noqa: F401  (socket and httpx encode host names with it)

    import fake_providers  # noqa: F401

    from ..._agent import adapters, recovery, toolcall  # noqa: F401
    from ..._inject import commits, transport, wire  # noqa: F401
    from ..._ledger import sqlite  # noqa: F401
    from . import reference  # noqa: F401

    # The resolver loads its name-service modules on first use: once here, not per child.
    with contextlib.suppress(OSError):
        socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)
    prime_wall_time_pins()
    warm_sdk_caches()


@contextlib.contextmanager
def fork_server_for(*scenarios: Scenario | None) -> Iterator[None]:
    """Start the workers of the cases of ``scenarios`` from one fork server until the block
    ends: each worker then moves an inherited wall-time pin (time-machine's) instead of
    starting one anew. The scenarios' callables and messages are passed to the server by
    reference, so closures work as under a plain fork."""

    _prepare_parent()
    forked = [s for s in scenarios if s is not None and s.start_method == "fork"]
    if not forked:  # spawn: every process is a fresh interpreter, never a fork of this one
        yield
        return
    keep: list[object] = []
    for scenario in forked:
        keep += [scenario.worker, scenario.recover, *scenario.messages]
        keep += [spec.api for spec in scenario.providers if spec.api is not None]
    with serving(keep):
        yield
