"""Two processes of a case at once: a delivery paused midway while the task's authority
changes, two deliveries of one message, two recoveries racing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..._inject.failpoints import Fault, Pause
from ..._process.delivery import deliver_concurrently
from ..._process.interleaving import run_interleaved
from ..._process.outcome import Completed, Killed, Raised
from ..._process.worker import start_worker
from ...errors import WorkerNotPaused
from . import schedule
from .entries import RACE_START, deliver_entry, race_entry
from .storage_steps import StorageSteps

__all__ = ["ConcurrentSteps"]


class ConcurrentSteps(StorageSteps):
    """The steps that run two processes, or one held while the world changes."""

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
                blocked=self._lock_waits(),
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

    def _lock_waits(self) -> Callable[[], bool] | None:
        """Whether a process of the case waits for a lock in one of its databases in a
        server (``CaseDatabase.lock_waits``): asked while one process is held at a gate and
        another runs, so a row lock the held one took is let go as the server would let it
        go (its holder goes on), not waited on until the timeout."""
        probes = [
            functools.partial(probe, self.env.path)
            for probe in (getattr(db, "lock_waits", None) for db in self.scenario.databases)
            if callable(probe)
        ]
        if not probes:
            return None
        return lambda: any(probe() for probe in probes)

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
            functools.partial(race_entry, self.scenario.recover, self.env, who)
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
                blocked=self._lock_waits(),
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
