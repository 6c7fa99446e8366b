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
invariant 2.

Which message an exported object belongs to, in order: a row of the incident's ledger that
names it (its id, or the idempotency key the export gives) and whose task is a message's; a
metadata value equal to a message's ``task_id``; the only task, if there is one. An object
that belongs to no message is the production worker's, for no message.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shutil
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import CrashpointsError

if TYPE_CHECKING:
    from fake_providers import ApiKey, Exported, Provider

    from ..._ledger.authority import Authority
    from ..._ledger.records import Attempt
    from ..._ledger.views import LedgerView
    from ..._process.clock import HarnessClock
    from ..verdict.evidence import ExpectedEffect, ProviderRequest
    from .context import CaseEnv, Context

__all__ = ["PRODUCTION", "Incident", "history"]

#: The name of the processes that made an incident's objects (``production-<message>``).
PRODUCTION = "production"

_SQLITE_HEADER = b"SQLite format 3\x00"
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
        """Put the incident's ledger and objects in ``world``, and its clock at the incident."""
        from fake_providers import ExportError, read_export

        from ..._process.clock import HARNESS_EPOCH

        times: list[float] = []
        if self.ledger is not None:
            target = ledger_target(world)
            place_ledger(Path(self.ledger), target)
            times = ledger_times(target)
        exported: list[tuple[str, list[Exported]]] = []
        try:
            for name, path in self.exports.items():
                provider = world.providers[name]
                exported.append(
                    (name, provider.exported_objects(read_export(path), where=str(path)))
                )
        except ExportError as exc:
            raise CrashpointsError(f"the incident's export cannot be read: {exc}") from None
        created = [obj.created for _, objects in exported for obj in objects if obj.created]
        self._set_clock(world, [*created, *times])
        rows = list(world.view().attempts()) if self.ledger is not None else []
        start = world.clock.now()
        epoch = HARNESS_EPOCH.timestamp()
        for name, objects in exported:
            for obj in objects:
                task = _task_of(obj, rows, world.scenario.messages)
                process, authority = _maker(task, world)
                key = _key(process, authority)
                at = start if obj.created is None else max(0.0, min(start, obj.created - epoch))
                try:
                    world.providers[name].seed([obj], key=key, at=at)
                except ExportError as exc:
                    raise CrashpointsError(f"the incident's exports: {exc}") from None

    def _set_clock(self, world: World, times: Sequence[float]) -> None:
        """The clock at ``at``, else a minute after the newest of ``times`` (the exported
        objects' and the ledger's)."""
        from ..._process.clock import HARNESS_EPOCH

        if self.at is not None:
            when = self.at.timestamp()
        elif times:
            when = max(times) + DEFAULT_AFTER
        else:
            return
        start = when - HARNESS_EPOCH.timestamp()
        if start < world.clock.now():
            raise CrashpointsError(
                f"the incident is dated {_dt.datetime.fromtimestamp(when, _dt.timezone.utc)}, "
                f"before the harness's clock starts ({HARNESS_EPOCH.isoformat()}): the "
                "workers' wall clocks cannot go back there. Give a later Incident(at=...) "
                "(crashpoints reproduce: --at)."
            )
        world.clock.set(start)


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


def place_ledger(source: Path, target: Path) -> None:
    """Copy the incident's ledger to ``target``: an SQLite file through SQLite's backup (a
    consistent copy, its WAL included), an SQL dump executed into a new database, anything
    else (JSON lines) byte for byte. The copy is synced: it is there before the first step."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as f:
        head = f.read(len(_SQLITE_HEADER))
    if head == _SQLITE_HEADER:
        _sqlite_copy(source, target)
    elif source.suffix.lower() == ".sql":
        _from_dump(source, target)
    else:
        shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


#: What counts as a time in a ledger: Unix seconds from 2000 to 2100.
_PLAUSIBLE = (946684800.0, 4102444800.0)
#: How many values of a ledger are looked at for times, at most.
_SCAN_LIMIT = 200_000


def ledger_times(path: Path) -> list[float]:
    """The times a ledger holds (Unix seconds, ISO 8601 text), for the clock's default start:
    its rows' updates, leases and retries are from before production stopped, or just after."""
    with open(path, "rb") as f:
        head = f.read(len(_SQLITE_HEADER))
    values: list[Any] = []
    if head == _SQLITE_HEADER:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%'"
                )
            ]
            for table in tables:
                quoted = '"' + table.replace('"', '""') + '"'
                for row in conn.execute(f"SELECT * FROM {quoted} LIMIT {_SCAN_LIMIT}"):
                    values += row
                    if len(values) > _SCAN_LIMIT:
                        break
        except sqlite3.Error:
            return []
        finally:
            conn.close()
    else:
        import json

        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:_SCAN_LIMIT]:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, Mapping):
                values += list(record.values())
    return [t for t in map(_as_time, values[:_SCAN_LIMIT]) if t is not None]


def _as_time(value: Any) -> float | None:
    low, high = _PLAUSIBLE
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if low <= value <= high else None
    if isinstance(value, str) and 10 <= len(value) <= 40 and value[:4].isdigit():
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=_dt.timezone.utc)
        return parsed.timestamp() if low <= parsed.timestamp() <= high else None
    return None


def _sqlite_copy(source: Path, target: Path) -> None:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    except sqlite3.DatabaseError as exc:
        raise CrashpointsError(f"the incident's ledger {source} cannot be read: {exc}.") from None
    finally:
        src.close()


def _from_dump(source: Path, target: Path) -> None:
    script = source.read_text(encoding="utf-8")
    conn = sqlite3.connect(target)
    try:
        conn.executescript(script)
    except sqlite3.Error as exc:
        raise CrashpointsError(
            f"the incident's ledger {source} is not an SQL dump SQLite runs ({exc}); make "
            "it with `sqlite3 prod.db .dump > incident.sql`."
        ) from None
    finally:
        conn.close()


def _task_of(
    obj: Exported, rows: Sequence[Attempt], messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The task ``obj`` belongs to (``None``: none the harness can tell)."""
    if obj.task_id is not None:
        return obj.task_id
    for row in rows:
        stored = {row.idempotency_key, row.provider_request_id, row.result_ref}
        if obj.names & {str(v) for v in stored if v}:
            return row.task_id  # the row's, a message's or not (the incident's history)
    tasks = list(dict.fromkeys(str(m["task_id"]) for m in messages))
    values = _tags(obj.body)
    for task in tasks:
        if task in values:
            return task
    return tasks[0] if len(tasks) == 1 else None


def _tags(body: Mapping[str, Any]) -> set[str]:
    """What an object carries to name its work: Stripe's ``metadata`` values, SendGrid's
    ``unique_args`` (custom args) values, a GitHub issue's labels."""
    found: set[str] = set()
    for field in ("metadata", "unique_args"):
        values = body.get(field)
        if isinstance(values, Mapping):
            found |= {str(v) for v in values.values() if isinstance(v, (str, int))}
    labels = body.get("labels")
    if isinstance(labels, list):
        found |= {str(v) for v in labels if isinstance(v, str)}
    return found


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
        raise CrashpointsError(
            f"an object of the incident belongs to task {task!r}, which is none of the "
            "messages' tasks, and they act for several tenants "
            f"({', '.join(sorted(tenants))}); say whose it is: give its task an authority "
            "(authorities=), or put a message's task id in its metadata."
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
