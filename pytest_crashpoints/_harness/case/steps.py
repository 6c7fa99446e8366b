"""The steps of a case: each delivery, recovery run and fault of a schedule, as it happens.

:class:`CaseRun` is the parent's side of one case over its :class:`~.world.World`: it starts
every worker and recovery as a real subprocess (through ``_process``), killed at the
scheduled fail point, and records what happened: the history (the timeline), the incidents
a violation's story tells, the fail points reached and the kills, the messages whose worker
died before acknowledging them (the queue delivers those again), and an observation of the
ledger after each step (invariant 5).

It is built in layers, one concept each: ``case_record.py`` (the record, and how a process is
started and what it did written down), ``storage_steps.py`` (a power loss or a backup
restore after a kill), ``concurrent_steps.py`` (two processes at once), and here the
schedule's steps themselves; ``entries.py`` is what each process runs first.
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
from collections.abc import Iterator

from ..._inject.failpoints import Fault, Raise
from ..._process.clock import prime_wall_time_pins
from ..._process.forkserver import serving
from ..._process.warm_sdks import warm_sdk_caches
from ...errors import CrashpointsError
from ..storage.agent_redis import lossy_redis
from ..storage.powerloss import lossy_databases
from . import schedule
from .case_record import INCONCLUSIVE, WORLD_LIMIT
from .concurrent_steps import ConcurrentSteps
from .entries import deliver_entry, recover_entry
from .scenario import Scenario
from .schedule import COMMIT_ERRORS, between_calls

__all__ = [
    "INCONCLUSIVE",
    "WORLD_LIMIT",
    "CaseRun",
    "deliver_entry",
    "fork_server_for",
    "recover_entry",
]

#: The ``Retry-After`` of a 429 refusal, in seconds. A client sleeps it out (the openai SDK
#: does, twice with its default retries); the sleep moves the case's clock, and costs no real
#: time where nothing else can act (``_process/waits.py``), else a second of it.
REFUSAL_RETRY_AFTER = 1.0


class CaseRun(ConcurrentSteps):
    """The parent's side of one case: every step of a schedule, done as it says, on the
    record of :class:`~.case_record.CaseRecord`."""

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
