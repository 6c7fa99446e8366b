"""The lower-level harness, under the pytest plugin and the ``crashpoints`` command.

For tools built on pytest-crashpoints and for tests that steer processes themselves:

- one case (:func:`run_case` of a :class:`Scenario` under a :class:`Schedule`, giving a
  :class:`CaseResult`) and the exploration of many (:func:`explore`, :class:`CrashSettings`,
  :class:`ExplorationReport`);
- schedules and their steps (:class:`Deliver`, :class:`KillAt`, :class:`Midway`,
  :class:`ChangeAuthority`, :class:`LookupTimeouts`, :class:`LoseResponse`, :class:`Refuse`,
  :class:`SearchLag`, :class:`Recover`, :class:`Advance`) and replay tokens
  (:func:`replay_token`, :func:`read_token`);
- workers in real subprocesses (:func:`run_worker`, :func:`start_worker`, :class:`Worker`, the
  outcomes :class:`Completed`, :class:`Killed`, :class:`Raised`, :class:`TimedOut`,
  :class:`Died`), armed with faults (:class:`Fault` and its actions :class:`Kill`,
  :class:`Raise`, :class:`Pause`, :class:`Count`, :class:`Stop`), forked from one
  :func:`fork_server` (a :class:`ForkServer`);
- workers and recoveries that are commands in any language (:class:`CommandWorker`,
  :class:`CommandRecovery`), with fail points over HTTP (:class:`FailpointServer`);
- the states engine (:class:`StatesEngine`): one world per test, crash states recorded from
  stopped workers, a schedule run from the longest prefix already run;
- forced interleavings and duplicate delivery (:func:`run_interleaved`,
  :func:`deliver_concurrently`, :func:`redeliver_after_success`, :func:`redeliver_after_crash`);
- the world of a case: the harness clock (:class:`HarnessClock`), the run directory
  (:class:`RunDir`), the authority store (:class:`AuthorityStore`), the providers and keys of a
  case (:class:`World`), the worker's :class:`Context` and its providers (:class:`ProviderSpec`);
- schedule spaces: every schedule up to a bound (:class:`Space`, :func:`enumerate_schedules`),
  one of each kind (:func:`covering_schedules`)
  or a Hypothesis strategy of them (:func:`schedules`);
- what a case leaves behind (:class:`Evidence`, :class:`ProviderRequest`, :class:`History` and
  its merged rows, :class:`TimelineRow`) and the invariants checked on it (:data:`INVARIANTS`,
  :func:`check_all`, :class:`Violation`), and invariants of your own (:data:`Invariant`,
  :func:`check_own`); each case an exploration ran (:class:`ScheduleRun`);
- fail points without user code, installed inside a worker process: A, B and C at the wire of
  any Python HTTP client talking to a loopback server that writes preambles, and
  ``model.tool_call`` (:data:`MODEL_POINT`) when a model's answer that calls a tool arrives
  (:func:`install_wire_hooks`, :func:`encode_preamble`, :func:`decode_preamble`) and
  ``db.commit``/``db.committed`` around every SQLite commit (:func:`install_commit_hooks`,
  :data:`COMMIT_POINTS`).
"""

from ._harness.authority_store import AuthorityChange, AuthorityStore
from ._harness.bridge import CommandRecovery, CommandWorker
from ._harness.case import CaseResult, run_case
from ._harness.context import CaseEnv, Context, ProviderSpec
from ._harness.engine import StatesEngine
from ._harness.evidence import (
    Evidence,
    ExpectedEffect,
    Incident,
    Observation,
    ProviderRequest,
    RecoveryRerun,
)
from ._harness.explore import CrashSettings, explore
from ._harness.failpoint_server import FailpointServer
from ._harness.findings import ExplorationReport, Failure, ScheduleRun, render_failure
from ._harness.history import History, TimelineRow
from ._harness.invariants import INVARIANTS, Invariant, Violation, check_all, check_own, unchecked
from ._harness.rundir import RunDir
from ._harness.scenario import Scenario
from ._harness.schedule import (
    FAULT_KINDS,
    KIND_LABELS,
    Advance,
    ChangeAuthority,
    Deliver,
    DuplicateRequest,
    FailCommit,
    KillAt,
    LookupTimeouts,
    LoseResponse,
    Midway,
    Recover,
    Refuse,
    Schedule,
    SearchLag,
    Space,
    Step,
    between_calls,
    covering_schedules,
    enumerate_schedules,
    probe_kills,
    schedules,
    unplaced_faults,
)
from ._harness.token import Token, read_token, replay_token
from ._harness.world import World
from ._inject.commits import install_commit_hooks
from ._inject.failpoints import (
    COMMIT_POINTS,
    CRASH_POINTS,
    MODEL_POINT,
    Count,
    Fault,
    Hit,
    Kill,
    Pause,
    Raise,
    Stop,
)
from ._inject.wire import decode_preamble, encode_preamble, install_wire_hooks
from ._process.clock import HARNESS_EPOCH, HarnessClock
from ._process.delivery import (
    Redelivery,
    deliver_concurrently,
    redeliver_after_crash,
    redeliver_after_success,
)
from ._process.forkserver import ForkServer
from ._process.forkserver import serving as fork_server
from ._process.handle import StartMethod, Worker, kill_live_workers, live_worker_pids
from ._process.interleaving import run_interleaved
from ._process.outcome import Completed, Died, Killed, Outcome, Raised, TimedOut
from ._process.worker import run_worker, start_worker

__all__ = [
    "COMMIT_POINTS",
    "FAULT_KINDS",
    "KIND_LABELS",
    "CRASH_POINTS",
    "MODEL_POINT",
    "HARNESS_EPOCH",
    "INVARIANTS",
    "Advance",
    "AuthorityChange",
    "AuthorityStore",
    "CaseEnv",
    "CaseResult",
    "ChangeAuthority",
    "CommandRecovery",
    "CommandWorker",
    "Completed",
    "Context",
    "Count",
    "CrashSettings",
    "Deliver",
    "Died",
    "Evidence",
    "ExpectedEffect",
    "ExplorationReport",
    "FailpointServer",
    "Failure",
    "DuplicateRequest",
    "FailCommit",
    "Fault",
    "ForkServer",
    "HarnessClock",
    "History",
    "Hit",
    "Incident",
    "Invariant",
    "Kill",
    "KillAt",
    "Killed",
    "LookupTimeouts",
    "LoseResponse",
    "Midway",
    "Observation",
    "Outcome",
    "Pause",
    "ProviderRequest",
    "ProviderSpec",
    "Raise",
    "Raised",
    "Recover",
    "RecoveryRerun",
    "Redelivery",
    "Refuse",
    "RunDir",
    "Scenario",
    "Schedule",
    "ScheduleRun",
    "SearchLag",
    "Space",
    "StartMethod",
    "StatesEngine",
    "Step",
    "Stop",
    "TimedOut",
    "TimelineRow",
    "Token",
    "Violation",
    "Worker",
    "World",
    "between_calls",
    "check_all",
    "check_own",
    "covering_schedules",
    "decode_preamble",
    "deliver_concurrently",
    "encode_preamble",
    "enumerate_schedules",
    "explore",
    "fork_server",
    "install_commit_hooks",
    "install_wire_hooks",
    "kill_live_workers",
    "probe_kills",
    "live_worker_pids",
    "read_token",
    "redeliver_after_crash",
    "redeliver_after_success",
    "render_failure",
    "replay_token",
    "run_case",
    "run_interleaved",
    "run_worker",
    "schedules",
    "start_worker",
    "unchecked",
    "unplaced_faults",
]
