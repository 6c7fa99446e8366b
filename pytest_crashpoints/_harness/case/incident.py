"""An incident from production as the starting world of a crash test.

A case normally starts from nothing: an empty ledger, providers that hold nothing. An
:class:`Incident` starts it where production stopped: the ledger as it was (a copy of the
agent's SQLite file, a ``sqlite3 .dump`` of it, or its JSON lines), placed where the test's
ledger view reads it, and each provider holding the objects its export lists (ids, keys and
metadata as exported), as effects the agent made before the crash. Every case of the test
then redelivers the messages and runs recovery from there, under the test's schedules, and
the six invariants are checked as for any case.

What the incident's objects are measured against: the fault-free run of the same messages
from an empty world (run first, once). Work the incident already did counts as done once: a
recovery that charges again is a duplicate (invariant 1), a row left unresolved is one of
invariant 2. Whose each object is, the harness reads from evidence only (``provenance``):
an object of other work is history, never the case's effect.

The case's clock starts at the incident: its epoch (the wall time harness time 0 stands
for) is the earliest time the incident holds, so the exported objects keep their own times,
in order, and the workers' wall clocks, the providers' new objects and the timeline are in
the incident's own time. An incident with no messages is reproduced by its recovery alone.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import CrashpointsError
from ..verdict.evidence import PRODUCTION, row_digest
from .incident_ledger import ledger_times, place_ledger, reference_to_harness_time

if TYPE_CHECKING:
    from fake_providers import ApiKey, Exported, Provider

    from ..._ledger.authority import Authority
    from ..._ledger.records import Attempt
    from ..._ledger.views import LedgerView
    from ..._process.clock import HarnessClock
    from ..verdict.evidence import ExpectedEffect, ProviderRequest
    from .context import CaseEnv, Context

__all__ = [
    "PRODUCTION",
    "Incident",
    "history",
    "no_worker",
    "read_incident",
    "recovery_authorities",
]

#: Where the harness keeps what it read of the incident, in the run directory (with the
#: providers' journals: copied with them, never taken for the agent's own files).
INCIDENT_FILE = "incident.json"

#: Where the workers' clocks start without ``at``: this long after the newest exported object
#: (a queue redelivers a dead worker's message after a while, and a search then sees what
#: was made before the crash).
DEFAULT_AFTER = 60.0


class World(Protocol):
    """What seeding reads and changes of a case's world (``world.World``)."""

    providers: dict[str, Provider]
    clock: HarnessClock
    env: CaseEnv
    ctx: Context
    #: The case's :class:`~.scenario.Scenario` (its messages, authorities and ledger view).
    scenario: Any

    def view(self) -> LedgerView: ...


@dataclasses.dataclass(frozen=True)
class Incident:
    """Where each case starts: the state production was left in.

    ``ledger``: a copy of the agent's ledger: an SQLite file (copy it with ``sqlite3 prod.db
    ".backup incident.db"``), an SQL dump (``sqlite3 prod.db .dump > incident.sql``) or a JSON
    lines file; it is placed where the test's ledger view reads (its ``path``; the reference
    ledger's file without a view). ``exports`` maps a provider of the test to the JSON its
    real counterpart exported (Stripe's list of charges, payment intents and refunds;
    GitHub's issues; SendGrid's email activity; or the fakes' own format, see
    ``fake_providers.Provider.export``). ``at``: when production stopped (an aware datetime):
    the workers' wall clocks start there (default: a minute after the newest exported
    object or the newest time in the ledger: Unix seconds or ISO 8601 text in its rows).

    Raises :class:`CrashpointsError` for a file that does not exist, an export for no
    provider, or an ``at`` that is not an aware datetime.
    """

    ledger: str | os.PathLike[str] | None = None
    exports: Mapping[str, str | os.PathLike[str]] = dataclasses.field(default_factory=dict)
    at: _dt.datetime | None = None

    def __post_init__(self) -> None:
        paths = [("ledger", self.ledger)] if self.ledger is not None else []
        if not isinstance(self.exports, Mapping):
            raise CrashpointsError(
                f"Incident(exports={self.exports!r}): give a mapping of provider name to "
                "export file, e.g. exports={'payments': 'incident/charges.json'}."
            )
        paths += [(f"exports[{name!r}]", path) for name, path in self.exports.items()]
        if self.ledger is None and not self.exports:
            raise CrashpointsError(
                "Incident() names no file: give the incident's ledger= (a copy of the "
                "agent's database or JSON lines) and/or exports={provider: file}."
            )
        for what, path in paths:
            if not isinstance(path, (str, os.PathLike)) or not Path(path).is_file():
                raise CrashpointsError(
                    f"Incident {what}={path!r}: no such file; give the path of the copy "
                    "you took from production (relative paths are from the directory pytest "
                    "runs in; a test can use Path(__file__).parent / ...)."
                )
        if self.at is not None and (
            not isinstance(self.at, _dt.datetime) or self.at.utcoffset() is None
        ):
            raise CrashpointsError(
                f"Incident(at={self.at!r}): give an aware datetime, e.g. "
                "datetime(2026, 11, 30, 14, 5, tzinfo=timezone.utc)."
            )

    def check_providers(self, providers: Iterable[str]) -> None:
        """Raises :class:`CrashpointsError` for an export of a provider the test does not run."""
        names = sorted(providers)
        for name in self.exports:
            if name not in names:
                raise CrashpointsError(
                    f"the incident has an export for provider {name!r}, which the test does "
                    f"not run (its providers: {', '.join(names) or 'none'}); add it to the "
                    "marker's providers=."
                )

    def describe(self) -> str:
        """One line for the timeline."""
        parts = [f"ledger {Path(self.ledger).name}"] if self.ledger is not None else []
        parts += [f"{name} from {Path(path).name}" for name, path in self.exports.items()]
        return "from the incident: " + ", ".join(parts)

    # -- in a fresh world, before the first step ------------------------------------------------

    def seed(self, world: World) -> None:
        """Put the incident's ledger and objects in ``world``, its clock at the incident, and
        what the harness read of them where the case's checks find it (:func:`read_incident`)."""
        target = None
        if self.ledger is not None:
            target = ledger_target(world)
            place_ledger(Path(self.ledger), target)
        exported = self._exported(world)
        created = [obj.created for _, objects in exported for obj in objects if obj.created]
        self._start_clock(world, created, [] if target is None else ledger_times(target))
        if target is not None and world.scenario.ledger_view is None:
            reference_to_harness_time(target, world.clock.epoch())
        rows = list(world.view().attempts()) if target is not None else []
        record = {
            "readings": _seed_objects(world, exported, rows),
            "rows": {row.attempt_id: row_digest(row) for row in rows},
        }
        path = world.env.run_dir.journals / INCIDENT_FILE
        path.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")

    def _exported(self, world: World) -> list[tuple[str, list[Exported]]]:
        """Each provider's exported objects, as the provider reads its export."""
        from fake_providers import ExportError, read_export

        exported: list[tuple[str, list[Exported]]] = []
        try:
            for name, path in self.exports.items():
                provider = world.providers[name]
                exported.append(
                    (name, provider.exported_objects(read_export(path), where=str(path)))
                )
        except ExportError as exc:
            raise CrashpointsError(f"the incident's export cannot be read: {exc}") from None
        return exported

    def _start_clock(
        self, world: World, created: Sequence[float], ledger: Sequence[float]
    ) -> None:
        """The case's epoch at the earliest time the incident holds (its objects' creation,
        the ledger's times, ``at``), and its clock at ``at`` (default: a minute after the
        newest of them). An incident that holds no time keeps the harness's epoch."""
        times = [*created, *ledger]
        if self.at is not None:
            when = self.at.timestamp()
        elif times:
            when = max(times) + DEFAULT_AFTER
        else:
            return
        epoch = float(math.floor(min([*times, when])))
        world.clock.set_epoch(epoch)
        world.clock.set(max(world.clock.now(), when - epoch))


def _seed_objects(
    world: World, exported: Sequence[tuple[str, Sequence[Exported]]], rows: Sequence[Attempt]
) -> dict[str, dict[str, Any]]:
    """Journal each exported object at its own time (in harness time; none after the clock's
    start), as made by the production process of its task: how each was read, by
    ``"<provider> <request id>"``."""
    from fake_providers import ExportError

    from .provenance import read_objects

    tasks = [str(m["task_id"]) for m in world.scenario.messages]
    start, epoch = world.clock.now(), world.clock.epoch()
    readings: dict[str, dict[str, Any]] = {}
    for name, objects in exported:
        for obj, reading in zip(objects, read_objects(objects, rows, tasks), strict=True):
            process, authority = _maker(reading.task, world)
            at = start if obj.created is None else max(0.0, min(start, obj.created - epoch))
            try:
                [request_id] = world.providers[name].seed(
                    [obj], key=_key(process, authority), at=at
                )
            except ExportError as exc:
                raise CrashpointsError(f"the incident's exports: {exc}") from None
            readings[f"{name} {request_id}"] = {
                "task": reading.task if reading.work else None,
                "history": not reading.work,
                "text": reading.text,
            }
    return readings


def no_worker(message: Any, ctx: Context) -> None:
    """The worker of an incident reproduced by its recovery alone: no message is delivered
    to it. Raises :class:`CrashpointsError` if one is."""
    raise CrashpointsError(
        f"message {message!r} was delivered to a test with no worker (an incident reproduced "
        "by its recovery alone); pass worker= to deliver messages."
    )


def history(effects: Iterable[ProviderRequest]) -> list[ExpectedEffect]:
    """The incident's objects that belong to no message of the test: each case holds them
    from the start, as the baseline must (an object of a message counts as that message's
    effect, which the baseline has already)."""
    from ..verdict.evidence import ExpectedEffect

    return [
        ExpectedEffect(e.provider, e.kind, e.payload_hash, None, e.task_id, e.request_id)
        for e in effects
        if e.process == PRODUCTION and e.effect_applied
    ]


def read_incident(journals: Path) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """What the harness read of the incident of a run (whose ``journals`` folder it is): each
    seeded object's reading by ``(provider, request id)`` (``task``, ``history``, ``text``),
    and each row of its ledger as production left it (attempt id -> ``row_digest``). Empty
    for a run without an incident."""
    path = journals / INCIDENT_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, {}
    readings: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in record["readings"].items():
        provider, _, request_id = key.partition(" ")
        readings[(provider, request_id)] = value
    return readings, dict(record["rows"])


def ledger_target(world: World) -> Path:
    """Where the test's ledger view reads (the reference ledger's file without a view)."""
    if world.scenario.ledger_view is None:
        return world.env.ledger_path
    view = world.scenario.ledger_view(world.ctx)
    path = getattr(view, "path", None)
    if not isinstance(path, (str, os.PathLike)):
        raise CrashpointsError(
            f"the ledger view {view!r} has no path attribute, so the harness cannot tell "
            "where to put the incident's ledger; give the view a `path` (SQLiteLedgerView "
            "and JSONLinesLedgerView have one)."
        )
    return Path(path)


def recovery_authorities(
    incident: Incident,
    ledger_view: Any,
    providers: Sequence[Any],
    base_dir: Path,
) -> dict[str, Authority]:
    """The authorities of a recovery-only incident's tasks (it has no messages to give
    them): each task of its ledger's rows (a row whose view reads no task is a task of its
    own, named by its attempt id) acts for the tenant, scope and policy the row records when
    the view reads them, else for ``tenant-1`` with every scope of every
    provider of the test, under policy ``p1``. ``ledger_view`` is the test's (``None``: the
    reference ledger); ``base_dir`` a folder to read the copy in. Raises
    :class:`CrashpointsError` for an incident without a ledger."""
    import tempfile

    from ..._ledger.authority import Authority
    from ..storage.rundir import RunDir
    from .context import CaseEnv, Context

    if incident.ledger is None:
        raise CrashpointsError(
            "an incident with no messages is reproduced by its recovery alone, from the "
            "work its ledger holds: give its ledger= (or the messages to redeliver)."
        )
    scope = sorted({scope for spec in providers for scope in spec.scopes})
    with tempfile.TemporaryDirectory(prefix="incident-", dir=base_dir) as scratch:
        run = RunDir.create(scratch, "rows")
        try:
            env = CaseEnv(str(run.path), tuple(providers), ())
            from ..storage.authority_store import AuthorityStore

            AuthorityStore(env.authority_path, clock=lambda: 0.0)
            ctx = Context(env, "harness")
            try:
                if ledger_view is None:
                    target = env.ledger_path
                    place_ledger(Path(incident.ledger), target)
                    from ..._ledger.sqlite import Ledger

                    ledger = Ledger(target)
                    try:
                        rows = ledger.attempts()
                    finally:
                        ledger.close()
                else:
                    view = ledger_view(ctx)
                    place_ledger(Path(incident.ledger), Path(view.path))
                    rows = list(view.attempts())
            finally:
                ctx.close()
        finally:
            run.close(passed=True)
    from .provenance import task_of

    authorities: dict[str, Authority] = {}
    for row in rows:
        if task_of(row) not in authorities:
            recorded = row.authority
            authorities[task_of(row)] = Authority.of(
                tenant_id=recorded.tenant_id or "tenant-1",
                credential_scope=sorted(recorded.credential_scope) or scope,
                policy_version=recorded.policy_version or "p1",
            )
    return authorities


def _maker(task: str | None, world: World) -> tuple[str, Authority]:
    """The production process that made an object of ``task``, and its authority."""
    scenario = world.scenario
    if task is not None and task in scenario.authorities:
        index = next(
            (i for i, m in enumerate(scenario.messages) if str(m["task_id"]) == task), None
        )
        process = PRODUCTION if index is None else f"{PRODUCTION}-{index}"
        return process, scenario.authorities[task]
    tenants = {a.tenant_id for a in scenario.authorities.values()}
    if len(tenants) != 1:
        whose = "no task" if task is None else f"task {task!r}, which has no authority"
        raise CrashpointsError(
            f"an object of the incident belongs to {whose}, and the test's tasks act for "
            f"{len(tenants)} tenants ({', '.join(sorted(tenants)) or 'none'}): the harness "
            "cannot tell whose tenant holds it. Give its task an authority (authorities=), "
            "or leave the object out of the export."
        )
    first = sorted(scenario.authorities)[0]
    return PRODUCTION, scenario.authorities[first]


def _key(process: str, authority: Authority) -> ApiKey:
    from fake_providers import ApiKey

    from .context import authority_fingerprint, key_secret

    return ApiKey(
        key_secret(authority),
        authority.tenant_id,
        authority.credential_scope,
        label=f"{process}.{authority_fingerprint(authority)}",
    )
