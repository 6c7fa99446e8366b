"""The states engine: crash states constructed once, each checked from its snapshot.

The processes engine (``case.run_case``) runs every schedule from scratch: a new world, each
delivery in a new process killed with a real ``SIGKILL`` at its point, the quiet phase, the
checks. Most of that work is shared between schedules. This engine keeps one world for the
whole test (its run directory, loopback servers, ports and signing secret) and a tree of
states in it:

* **Nodes.** After every step it runs, the durable state of the run directory is copied
  (``crashstates``) together with the harness's own record of the case so far (the
  ``CaseRun``: history, observations, unacknowledged messages, ...). A schedule starts from
  the longest prefix of its steps already run: the files are put back, the record copied,
  and only the rest runs.
* **Recordings.** A plain delivery (no duplicate, no change midway) is run once with every
  fail point armed to *stop*: at each call the whole worker is stopped (``SIGSTOP``, every
  thread), the run directory copied, and the worker let go on. A ``SIGKILL`` loses only the
  process's memory, so the copy at "point P, hit n" is exactly what a kill there leaves;
  a kill deferred to the next fail point (C at the transport and the wire) takes the copy
  of the call where it would fire. A schedule with a kill on that delivery then starts from
  that copy, and the harness's record gets the outcome the kill would have had (the hits
  so far, where it fired). One recorded run yields every single-kill crash state of it.
* **Deduplication.** Schedules that reach the same durable state (byte for byte) with the
  same record of the case share the quiet phase and the killed-recovery replay: they run
  once; each schedule still gets its own result (its history, observations and checks).
* **The killed-recovery replay** starts from the crash state the quiet phase's first
  recovery run was stopped in at recovery's own fail point, instead of a copy of the run
  directory and one more recovery process killed there.

Everything a crash state holds is restored under the servers, ports and secret it was
recorded under (stored values may embed them: a provider's URLs carry its port), so a
crash state is exact. Every failure it reports is confirmed by a real kill (``explore``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._inject.failpoints import EVERY_POINT, Fault, Stop
from ..case.context import CaseEnv, Context
from ..case.quiet import needs_recovery, quiet, replay_error
from ..case.runner import CaseResult, Ending, conclude, verdict
from ..case.scenario import Scenario
from ..case.schedule import RECOVERY_POINTS, Deliver, KillAt, Schedule, Step
from ..case.steps import CaseRun, deliver_entry, fork_server_for, recover_entry
from ..case.world import World
from ..storage.crashstates import Blobs, DurableState, RunDirReader, restore
from ..storage.rundir import RunDir
from ..verdict.evidence import ExpectedEffect

if TYPE_CHECKING:
    from ..._process.outcome import Outcome

__all__ = ["StatesEngine", "states_supported"]


def states_supported() -> bool:
    """Whether this platform can stop a worker and see it stopped (Linux: ``/proc``)."""
    import sys

    return sys.platform.startswith("linux")


#: Past this many bytes of kept file contents, a test's engine keeps only the states most
#: schedules start from (after a delivery; the fault-free run's recordings), and only names
#: the others: a large agent's files must not fill the harness's memory.
KEEP_BUDGET = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class _Node:
    """A state the case passed through: the files, and the harness's record at that moment."""

    state: DurableState
    memento: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Stop:
    """One fail point call of a recorded process, and the state it was stopped in."""

    point: str
    n: int
    trace_length: int
    deferred: bool
    state: DurableState


@dataclasses.dataclass
class _Recording:
    """A process run once with every fail point (or some) stopping it."""

    stops: list[_Stop]
    outcome: Outcome | None = None
    #: Whether every fail point call was to stop (then every one must have been seen).
    every_call: bool = False

    def crash(self, kill: KillAt) -> tuple[_Stop, Outcome] | None:
        """The crash state a kill at ``kill`` leaves, and the outcome the kill has; ``None``
        when the kill never takes effect (its hit is not reached, or a deferred kill finds
        no next fail point) or the recording cannot tell."""
        from ..._process.outcome import Completed, Killed, Raised

        if not isinstance(self.outcome, Completed | Raised):
            return None
        trace = self.outcome.hits
        if self.every_call and [stop.trace_length for stop in self.stops] != list(
            range(1, len(trace) + 1)
        ):
            return None  # a call was not stopped at: this recording cannot stand for a kill
        for index, stop in enumerate(self.stops):
            if stop.point != kill.point or stop.n != kill.hit:
                continue
            fires = stop
            if stop.deferred:
                if index + 1 >= len(self.stops):
                    return None
                fires = self.stops[index + 1]
            length = fires.trace_length - (1 if stop.deferred else 0)
            hit = trace[stop.trace_length - 1]
            outcome = Killed(
                point=kill.point,
                hit=kill.hit,
                context=hit.context,
                fired_at=fires.point,
                hits=tuple(trace[:length]),
                matched=(kill.hit,),
                duration=0.0,
            )
            return fires, outcome
        return None


def _plain(step: Step) -> bool:
    return (
        isinstance(step, Deliver)
        and step.duplicate is None
        and step.midway is None
        and step.fail_commit is None
        and not step.power_loss
        and not step.backup_restore
    )


@dataclasses.dataclass(frozen=True)
class _Continuation:
    """What the quiet phase and the replay added to a case's record, to hand to another
    schedule that reached the same state."""

    ending: Ending
    #: What each growing part of the record gained (``CaseRun.grown_since``).
    grown: dict[str, tuple[Any, ...]]
    hits: dict[str, int]
    #: The rest of the record as the phase left it (``CaseRun.state``).
    state: dict[str, Any]


class StatesEngine:
    """One test's world and its tree of states. Use as a context manager; ``run`` a
    schedule as ``run_case`` would."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        base_dir: Path,
        name: str = "states",
        keep_budget: int = KEEP_BUDGET,
    ) -> None:
        self.scenario = scenario
        #: Bytes of file contents kept before only the most used states are (``KEEP_BUDGET``).
        self.keep_budget = keep_budget
        # Workers are forked from a fork server started now, before this world's server
        # threads: a worker forked from a process with other threads busy (a provider's
        # server, a thread of the caller's) can inherit a lock one of them held at that
        # instant, and hang at its start until it is timed out. (Inside explore() or
        # run_case() the server they started is used.)
        self._forks = contextlib.ExitStack()
        self._forks.enter_context(fork_server_for(scenario))
        try:
            self.run_dir = RunDir.create(base_dir, name)
            env = CaseEnv(str(self.run_dir.path), scenario.providers, scenario.transport_points)
            self.blobs = Blobs()
            self.reader = RunDirReader(self.run_dir.path)
            self.world = World(scenario, env)
            self.nodes: dict[tuple[Step, ...], _Node] = {}
            self.recordings: dict[tuple[tuple[Step, ...], int], _Recording] = {}
            self.continuations: dict[tuple[Any, ...], _Continuation] = {}
            self.results: dict[tuple[Schedule, bool], CaseResult] = {}
            #: How many schedules each checked state stood for (statistics for the report).
            self.checked = 0
            self.shared = 0
            run = CaseRun(self.world)
            run.observe("set-up")
            self._keep((), run)
        except BaseException:
            self._forks.close()
            raise

    def statistics(self) -> dict[str, int]:
        """What the engine did: crash states checked (each a quiet phase and replay), cases
        that shared a checked state, deliveries recorded, states kept."""
        return {
            "checked": self.checked,
            "shared": self.shared,
            "recorded": len(self.recordings),
            "states": len(self.nodes),
        }

    def close(self) -> None:
        try:
            self.world.close()
            self.reader.close()
            self.blobs.clear()
            shutil.rmtree(self.run_dir.path, ignore_errors=True)
        finally:
            self._forks.close()

    def __enter__(self) -> StatesEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- files -------------------------------------------------------------------------------

    def _keep(self, key: tuple[Step, ...], run: CaseRun) -> _Node:
        node = self.nodes.get(key)
        if node is None:
            node = _Node(self._capture(run), run.memento())
            self.nodes[key] = node
        return node

    def _capture(self, run: CaseRun, *, keep: bool = True, at: str = "") -> DurableState:
        """The run directory's durable state now, copied while nothing writes it: every
        process of the case is stopped or gone, and the providers' servers have answered
        what reached them and hold the rest (``World.still``)."""
        with self.world.still() as unsettled:
            for provider in unsettled:
                run.errors.append(
                    f"the {provider} server was still answering a request when the state"
                    f"{at} was copied"
                )
            return self.reader.capture(self.blobs, keep=keep)

    def _put_back(self, state: DurableState) -> None:
        """Make the run directory ``state``. Every connection this process holds on its
        files is closed first (the next read opens the databases as after a crash), and the
        reader's descriptors with them: nothing holds a lock that closing could drop."""
        world = self.world
        world.live.clear()  # every process of the case has ended: none is admitted now
        # Nothing of this process writes the journals while their files are replaced: the
        # servers answered what reached them and hold what comes.
        with world.still():
            world.ctx.close()
            world.ctx = Context(world.env, "harness")
            for provider in world.providers.values():
                provider.close()
            self.reader.close()
            restore(state, self.run_dir.path, self.blobs)

    def _resume(self, node: _Node, schedule: Schedule) -> CaseRun:
        self._put_back(node.state)
        run = CaseRun.resume(self.world, node.memento)
        run.fault_free = not schedule.faults
        return run

    # -- processes ---------------------------------------------------------------------------

    def _recorder(
        self,
        run: CaseRun,
        recording: _Recording,
        faults: Sequence[Fault],
        only: Callable[..., object],
    ) -> None:
        """Run the next process of ``run`` for real, stopping it at ``faults`` to copy the
        state each time, if it is one of ``only`` (an entry point) without a kill."""

        def stand_in(
            fn: Callable[..., object], args: Sequence[object], kill: KillAt | None
        ) -> Outcome:
            run.stand_in = None
            if fn is not only or kill is not None:
                return run.run_process(fn, args, kill)

            def on_stop(point: str, n: int, trace_length: int, deferred: bool) -> None:
                # What the stopped process sent is answered first, as after a kill there.
                state = self._capture(run, at=f" at {point} (hit {n})")
                recording.stops.append(_Stop(point, n, trace_length, deferred, state))

            worker = run.start(fn, args, faults)
            worker.on_stop = on_stop
            recording.outcome = worker.wait()
            return recording.outcome

        run.stand_in = stand_in

    @staticmethod
    def _standing(run: CaseRun, outcome: Outcome) -> None:
        """The next process the case runs ends with ``outcome``, without running."""

        def stand_in(
            fn: Callable[..., object], args: Sequence[object], kill: KillAt | None
        ) -> Outcome:
            run.stand_in = None
            return outcome

        run.stand_in = stand_in

    # -- one case ----------------------------------------------------------------------------

    def run(self, schedule: Schedule, expected: Sequence[ExpectedEffect] | None) -> CaseResult:
        """The result ``run_case(scenario, schedule, expected=expected)`` would give."""
        memo = (schedule, expected is None)
        known = self.results.get(memo)
        if known is not None:
            return known
        steps = schedule.steps
        start = max(k for k in range(len(steps) + 1) if steps[:k] in self.nodes)
        run = self._resume(self.nodes[steps[:start]], schedule)
        for index in range(start, len(steps)):
            run = self._step(run, schedule, index)
        result = self._conclude(run, schedule, expected)
        self.results[memo] = result
        return result

    def _step(self, run: CaseRun, schedule: Schedule, index: int) -> CaseRun:
        steps = schedule.steps
        step, prefix = steps[index], steps[:index]
        records = (
            _plain(step)
            and isinstance(step, Deliver)
            and (prefix, step.message) not in self.recordings
            and (step.kill is not None or not schedule.faults)
        )
        if records:
            # A recording resumes from the node of its prefix, which a step past the budget
            # (a clock move, say) did not keep: keep it now, while the run is there.
            self._keep(prefix, run)
        run.step = index + 1
        if _plain(step):
            assert isinstance(step, Deliver)
            recording = self.recordings.get((prefix, step.message))
            if records:
                recording = self._record(run, prefix, step.message)
                if step.kill is None:
                    return run
                run = self._resume(self.nodes[prefix], schedule)
                run.step = index + 1
            if recording is not None and step.kill is not None:
                crash = recording.crash(step.kill)
                if crash is not None:
                    stop, outcome = crash
                    self._put_back(stop.state)
                    self._standing(run, outcome)
                    run.execute(step)
                    run.observe(str(step))
                    self._keep(steps[: index + 1], run)
                    return run
        run.clock.advance(1.0)
        run.execute(step)
        run.observe(str(step))
        if isinstance(step, Deliver) or self.blobs.size < self.keep_budget:
            self._keep(steps[: index + 1], run)
        return run

    def _record(self, run: CaseRun, prefix: tuple[Step, ...], message: int) -> _Recording:
        """Deliver ``message`` from the node ``prefix`` (the run is there), stopping its worker
        at every fail point call; keep the node it ends in."""
        recording = _Recording([], every_call=True)
        step = Deliver(message)
        self._recorder(run, recording, [Fault(EVERY_POINT, Stop(), hit=None)], deliver_entry)
        run.clock.advance(1.0)
        try:
            run.execute(step)
        finally:
            run.stand_in = None
        run.observe(str(step))
        self._keep((*prefix, step), run)
        self.recordings[(prefix, message)] = recording
        return recording

    # -- the quiet phase, shared by the schedules that reach one state -----------------------

    def _conclude(
        self, run: CaseRun, schedule: Schedule, expected: Sequence[ExpectedEffect] | None
    ) -> CaseResult:
        node = self.nodes.get(schedule.steps)
        state = node.state if node is not None else self._capture(run, keep=False)
        key = (
            state.digest,
            run.step,
            run.processes,
            tuple(run.unacked),
            tuple(sorted(run.deliveries.items())),
            tuple(run.errors),
            run.raised,
            run.fault_free,
        )
        continuation = self.continuations.get(key)
        if continuation is None:
            continuation = self._continue(run)
            self.continuations[key] = continuation
            self.checked += 1
        else:
            self.shared += 1
            _extend(run, continuation)
        return verdict(run, schedule, expected, continuation.ending)

    def _continue(self, run: CaseRun) -> _Continuation:
        tally = run.tally()
        hits, run.hits = run.hits, {}
        try:
            ending = conclude(run, _StoppedReplay(self))
        finally:
            cont_hits, run.hits = run.hits, hits
            _merge_hits(run.hits, cont_hits)
        return _Continuation(
            ending=ending, grown=run.grown_since(tally), hits=cont_hits, state=run.state()
        )


def _merge_hits(into: dict[str, int], hits: dict[str, int]) -> None:
    for point, n in hits.items():
        into[point] = max(into.get(point, 0), n)


def _extend(run: CaseRun, continuation: _Continuation) -> None:
    """Give ``run`` what the quiet phase added to the record of the schedule that ran it."""
    run.extend(continuation.grown, continuation.state)
    _merge_hits(run.hits, continuation.hits)


class _StoppedReplay:
    """Invariant 6's killed-recovery replay from the crash state the quiet phase's first
    recovery run was stopped in, at recovery's own fail point, in the same run directory
    (after the case's evidence was read)."""

    def __init__(self, engine: StatesEngine) -> None:
        self.engine = engine
        self.recording = _Recording([])
        self.needed = False
        self.runs = 0

    def prepare(self, run: CaseRun, unacked: Sequence[int]) -> None:
        self.runs = run.processes
        self.needed = bool(needs_recovery(run) or unacked)
        if self.needed and run.scenario.recover is not None:
            faults = [Fault(point, Stop(), hit=1) for point in RECOVERY_POINTS]
            self.engine._recorder(run, self.recording, faults, recover_entry)

    def diff(
        self, run: CaseRun, unacked: Sequence[int], final: list[str]
    ) -> tuple[tuple[str, ...], str | None]:
        run.stand_in = None
        if not self.needed:
            return (), None
        reached = [point for point in RECOVERY_POINTS if point in run.first_quiet_points]
        if not reached:
            return (), None
        point = reached[-1]
        crash = self.recording.crash(KillAt(point, 1))
        if crash is None:
            run.errors.append(
                f"killed-recovery replay: recovery did not reach {point!r} on a copy of the "
                "case, though the same recovery reached it from the same state: the recovery "
                "is not deterministic"
            )
            return (), None
        stop, outcome = crash
        engine = self.engine
        engine._put_back(stop.state)
        copy = CaseRun(engine.world, fresh=False)
        copy.step = run.step
        copy.processes = self.runs
        copy.unacked = dict.fromkeys(unacked)
        StatesEngine._standing(copy, outcome)
        try:
            copy.recover(KillAt(point, 1))
            quiet(copy)
            ended = engine.world.state_lines()
        finally:
            run.errors += [replay_error(error) for error in copy.errors]
        diff = tuple(
            difflib.unified_diff(final, ended, "uninterrupted", "killed+rerun", n=0, lineterm="")
        )
        return diff, point
