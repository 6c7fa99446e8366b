"""The lower-level harness, under the pytest plugin and the ``crashpoints`` command.

For tools built on pytest-crashpoints and for scripts that drive crash cases from Python:

- one case (:func:`run_case` of a :class:`Scenario` under a :class:`Schedule`, giving a
  :class:`CaseResult`, in a :class:`RunDir`) and the exploration of many (:func:`explore`,
  :class:`CrashSettings`, :class:`ExplorationReport`, its :class:`Failure` and
  :func:`render_failure`);
- schedules and their steps (:class:`Deliver`, :class:`KillAt`, :class:`Midway`,
  :class:`ChangeAuthority`, :class:`LookupTimeouts`, :class:`LoseResponse`, :class:`Refuse`,
  :class:`SearchLag`, :class:`DuplicateRequest`, :class:`FailCommit`, :class:`Recover`,
  :class:`Advance`), the points and kinds of fault they name (:data:`CRASH_POINTS`,
  :data:`FAULT_KINDS`) and replay tokens (:func:`replay_token`, :func:`read_token`,
  :class:`Token`);
- what a case leaves behind (:class:`Evidence`) and the invariants checked on it
  (:data:`INVARIANTS`, :class:`Violation`), invariants of your own (:data:`Invariant`) and
  what a ledger view that reads fewer columns leaves unchecked (:func:`unchecked`);
- workers and recoveries that are commands in any language (:class:`CommandWorker`,
  :class:`CommandRecovery`), with fail points over HTTP (:class:`FailpointServer`);
- the harness clock a case's processes share (:class:`HarnessClock`), for a fake provider
  built outside a crash test;
- fail points without user code, installed inside a worker process: A, B and C at the wire of
  any Python HTTP client talking to a loopback server that writes preambles
  (:func:`install_wire_hooks`, :func:`encode_preamble`, :func:`decode_preamble`) and
  ``db.commit``/``db.committed`` around every SQLite commit (:func:`install_commit_hooks`).

The process plumbing under these (worker processes, the fork server, fault plans, forced
interleavings) is private: see docs/architecture.md.
"""

from ._exports import show_public_home
from ._harness.case.bridge import CommandRecovery, CommandWorker
from ._harness.case.failpoint_server import FailpointServer
from ._harness.case.runner import CaseResult, run_case
from ._harness.case.scenario import Scenario
from ._harness.case.schedule import (
    FAULT_KINDS,
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
)
from ._harness.search.explore import CrashSettings, explore
from ._harness.search.findings import ExplorationReport, Failure, render_failure
from ._harness.search.token import Token, read_token, replay_token
from ._harness.storage.rundir import RunDir
from ._harness.verdict.evidence import Evidence
from ._harness.verdict.invariants import INVARIANTS, Invariant, Violation, unchecked
from ._inject.commits import install_commit_hooks
from ._inject.failpoints import CRASH_POINTS
from ._inject.wire import decode_preamble, encode_preamble, install_wire_hooks
from ._process.clock import HarnessClock

__all__ = [
    "CRASH_POINTS",
    "FAULT_KINDS",
    "INVARIANTS",
    "Advance",
    "CaseResult",
    "ChangeAuthority",
    "CommandRecovery",
    "CommandWorker",
    "CrashSettings",
    "Deliver",
    "DuplicateRequest",
    "Evidence",
    "ExplorationReport",
    "FailCommit",
    "FailpointServer",
    "Failure",
    "HarnessClock",
    "Invariant",
    "KillAt",
    "LookupTimeouts",
    "LoseResponse",
    "Midway",
    "Recover",
    "Refuse",
    "RunDir",
    "Scenario",
    "Schedule",
    "SearchLag",
    "Token",
    "Violation",
    "decode_preamble",
    "encode_preamble",
    "explore",
    "install_commit_hooks",
    "install_wire_hooks",
    "read_token",
    "render_failure",
    "replay_token",
    "run_case",
    "unchecked",
]

show_public_home(__name__, __all__)
