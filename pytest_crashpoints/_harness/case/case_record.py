"""The record of a case, and its processes: how each worker and recovery is started, and how
what it did is written down (the timeline, the incidents, the points it reached, its kill,
its error).

:class:`CaseRecord` is what an engine keeps and resumes (:meth:`CaseRecord.memento`); the
steps that build on it are ``storage_steps.py`` (what a power loss or a backup restore does
to the agent's files), ``concurrent_steps.py`` (two processes at once) and ``steps.py``
(:class:`~.steps.CaseRun`: every step of a schedule).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..._inject.failpoints import Fault, Kill
from ..._process.outcome import Completed, Killed, Outcome, Raised, TimedOut
from ..._process.worker import start_worker
from ..verdict.evidence import Incident, Observation
from ..verdict.history import History
from . import schedule
from .bridge import command_output
from .entries import recover_entry
from .scenario import Scenario
from .waited import Waited, read_waits
from .world import World

if TYPE_CHECKING:
    from ..._process.handle import Worker

    StandIn = Callable[[Callable[..., object], Sequence[object], schedule.KillAt | None], Outcome]

__all__ = ["INCONCLUSIVE", "USAGE_ERROR", "WORLD_LIMIT", "CaseRecord"]


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


_Run = TypeVar("_Run", bound="CaseRecord")


class CaseRecord:
    """The parent's side of one case over its world: the record of what happened (the
    history, incidents, points reached, kills, unacknowledged messages, errors), and the
    processes it starts and records."""

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
    def resume(cls: type[_Run], world: World, memento: Mapping[str, Any]) -> _Run:
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

    def _worker_id(self, role: str) -> str:
        """The name of the next process of the case; from now until it is recorded as
        ended, the providers' servers admit its requests."""
        self.processes += 1
        name = f"{role}-{self.processes}"
        self.world.live.add(name)
        self.world.started = True
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
            "message comes back (a PostgreSQL lock in a database of the test's "
            "databases= is seen, and the first worker let go: one in a server of your "
            "own is not)"
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
