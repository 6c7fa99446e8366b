"""``crashpoints queue LEDGER``: the operator's view of a reference ledger (a SQLite file,
or a :class:`PostgresLedger`'s database named by its connection string).

Every in-flight, UNKNOWN and MANUAL_REVIEW attempt. Exit 0 when the queue is empty, 1 when
there is work left, 2 on an error (one line on stderr). The ledger is only read.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._plugin.columns import columns

if TYPE_CHECKING:
    from .._ledger.records import QueueEntry

__all__ = ["queue"]

#: Exit statuses of ``crashpoints queue``.
QUEUE_EMPTY, QUEUE_HAS_WORK, QUEUE_ERROR = 0, 1, 2

_SQLITE_MAGIC = b"SQLite format 3\x00"
_SQLITE_HEADER_SIZE = 100
_USER_VERSION_OFFSET = 60  # PRAGMA user_version, a big-endian 32-bit int in the file header


def queue(ledger_at: str | Path, *, as_json: bool) -> int:
    """Print the queue of the ledger at ``ledger_at`` (a SQLite file's path, or a PostgreSQL
    connection string or URL); return the exit status."""
    import sqlite3

    from .._ledger.postgres_ledger import PostgresLedger
    from .._ledger.sqlite import Ledger
    from ..errors import CrashpointsError

    opened: Ledger
    if _names_postgres(str(ledger_at)):
        try:
            opened = PostgresLedger(str(ledger_at), read_only=True)
        except CrashpointsError as exc:
            return _fail(str(exc))
        label = f"PostgreSQL database {opened.path.name!r}"
    else:
        path = Path(ledger_at)
        refusal = _refuse_to_open(path)
        if refusal is not None:
            return _fail(refusal)
        opened, label = Ledger(path, read_only=True), str(path)
    try:
        with opened as ledger:
            now = ledger.now()
            entries = ledger.queue(include_review=True)
    except CrashpointsError as exc:
        return _fail(str(exc))
    except sqlite3.Error as exc:
        return _fail(f"cannot read the ledger {label} ({exc}); check the path.")
    if as_json:
        print(_queue_json(entries))
    else:
        print(_queue_table(label, entries, now=now))
    return QUEUE_HAS_WORK if entries else QUEUE_EMPTY


def _names_postgres(ledger_at: str) -> bool:
    """Whether ``ledger_at`` is a PostgreSQL connection URL or a libpq ``key=value`` string
    (a path never holds ``dbname=`` or ``host=``)."""
    if ledger_at.startswith(("postgresql://", "postgres://")):
        return True
    return any(
        word.split("=", 1)[0] in ("dbname", "host", "service") and "=" in word
        for word in ledger_at.split()
    )


def _fail(message: str) -> int:
    print(f"crashpoints queue: error: {message}", file=sys.stderr)
    return QUEUE_ERROR


def _refuse_to_open(path: Path) -> str | None:
    """Why ``path`` must not be handed to :class:`Ledger`, or None.

    ``Ledger(path)`` creates a ledger where there is none: at a missing path, in an empty file,
    in a SQLite database without tables. An operator's read must never do that, so those cases
    are refused here, from the file header alone, without opening the file with SQLite.
    """
    try:
        if not path.exists():
            return f"no ledger at {path}: the path does not exist (nothing was created)."
        if path.is_dir():
            return f"{path} is a directory, not a ledger file."
        with path.open("rb") as file:
            header = file.read(_SQLITE_HEADER_SIZE)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}."
    if len(header) < _SQLITE_HEADER_SIZE or not header.startswith(_SQLITE_MAGIC):
        return f"{path} is not a SQLite ledger (no SQLite header); check the path."
    user_version = int.from_bytes(
        header[_USER_VERSION_OFFSET : _USER_VERSION_OFFSET + 4], "big", signed=True
    )
    if user_version == 0:
        return (
            f"{path} is a SQLite database but not a pytest-crashpoints ledger (it has no ledger "
            "schema version); check the path."
        )
    return None  # the rest is refused by the read-only Ledger itself, which changes nothing


_COLUMNS = (
    "ATTEMPT",
    "STATE",
    "TOOL",
    "TASK",
    "OWNER",
    "AGE",
    "NEXT ATTEMPT",
    "ARGS HASH",
    "PROVIDER REQUEST ID",
)
_SHORT_HASH = 12


def _cell(value: str | None) -> str:
    if value is None or value == "":
        return "-"
    # A newline or tab in a task id or owner would break the alignment: show it escaped.
    return value if value.isprintable() else repr(value)


def _next_attempt(entry: QueueEntry, now: float) -> str:
    if entry.next_attempt_at is None:
        return "-"
    wait = entry.next_attempt_at - now
    return "due" if wait <= 0 else f"in {wait:.0f}s"


def _queue_table(label: str, entries: Sequence[QueueEntry], *, now: float) -> str:
    if not entries:
        return f"{label}: the queue is empty (no in-flight or review work)."
    rows = [
        (
            _cell(e.attempt_id),
            e.state.value,
            _cell(e.tool_name),
            _cell(e.task_id),
            _cell(e.owner),
            f"{e.age:.0f}s",
            _next_attempt(e, now),
            _cell(e.args_hash[:_SHORT_HASH]),
            _cell(e.provider_request_id),
        )
        for e in entries
    ]
    lines = columns([_COLUMNS, *rows])
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.state.value] = counts.get(e.state.value, 0) + 1
    by_state = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    noun = "attempt needs" if len(entries) == 1 else "attempts need"
    lines += ["", f"{len(entries)} {noun} attention: {by_state}."]
    return "\n".join(lines)


def _queue_json(entries: Sequence[QueueEntry]) -> str:
    import json

    objects: list[dict[str, Any]] = [
        {
            "attempt_id": e.attempt_id,
            "state": e.state.value,
            "tool_name": e.tool_name,
            "task_id": e.task_id,
            "owner": e.owner,
            "lease_expires_at": e.lease_expires_at,
            "age_seconds": e.age,
            "next_attempt_at": e.next_attempt_at,
            "args_hash": e.args_hash,
            "provider_request_id": e.provider_request_id,
        }
        for e in entries
    ]
    return json.dumps(objects, indent=2)


