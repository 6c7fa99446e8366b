"""A ledger kept as a JSON-lines file of state changes, read without a line of Python in the
worker: any language can append a line.

Each line is one JSON object, one change to one attempt: its id and the fields that changed
(the seed names of docs/howto-own-ledger.md, under your names)::

    {"attempt_id": "job-7", "task_id": "job-7", "state": "pending", "idempotency_key": "job-7"}
    {"attempt_id": "job-7", "state": "sent", "provider_request_id": "sg_req_01"}

An attempt is every line with its id, merged in order (a later line's field wins). Each line
that changes an attempt's state is also an event of the transition log, at the line's
``updated_at`` (else its ``at``), by its ``owner`` (else its ``actor``), with its ``reason``
(else the file and line number).

Append each line whole, with one ``write`` (``O_APPEND``): a process killed with SIGKILL never
leaves half a ``write`` to a regular file. A last line without its newline is read if it is
whole JSON and ignored if not (a writer that died between two writes of one line); any other
line that is not a JSON object is an error.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import LedgerError
from .authority import Authority
from .records import Event
from .states import State
from .views import _ROWID, SQLiteLedgerView

__all__ = ["JSONLinesLedgerView"]


class JSONLinesLedgerView(SQLiteLedgerView):
    """Read a JSON-lines ledger file (see the module docstring) as the harness needs it.

    ``fields`` maps seed names to your field names (unmapped names are used as they are;
    ``"rowid"``: the attempt's position by first appearance, from 1); ``states``,
    ``constants``, ``args_fields`` (the fields that together are the call's arguments) and
    ``authority_of`` are those of :class:`SQLiteLedgerView`. Only an id and a state are
    required. A file that does not exist yet reads as an empty ledger; a line that is not a
    JSON object, or has no id, raises :class:`LedgerError` naming the line.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fields: Mapping[str, str] | None = None,
        states: Mapping[Any, State] | None = None,
        constants: Mapping[str, object] | None = None,
        args_fields: Sequence[str] = (),
        authority_of: Callable[[str, float], Authority | None] | None = None,
    ) -> None:
        if (fields or {}).get("attempt_id") == _ROWID:
            raise LedgerError(
                "fields={'attempt_id': 'rowid'}: a JSON-lines ledger has no row ids; every "
                "line must name its attempt with a field of its own."
            )
        super().__init__(
            path,
            table=Path(path).name,
            columns=fields,
            states=states,
            constants=constants,
            args_columns=args_fields,
            authority_of=authority_of,
        )

    def _lines(self) -> list[tuple[int, dict[str, Any]]]:
        """Each line of the file that is a change, with its line number."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        raw = data.split(b"\n")
        torn = raw.pop()  # after the last newline: empty, or a line cut short
        lines: list[tuple[int, dict[str, Any]]] = []
        for number, line in enumerate(raw, start=1):
            if not line.strip():
                continue
            lines.append((number, self._parse(line, number)))
        if torn.strip():
            # Whole JSON, or the writer died between two writes of its last line.
            with contextlib.suppress(LedgerError):
                lines.append((len(raw) + 1, self._parse(torn, len(raw) + 1)))
        return lines

    def _parse(self, line: bytes, number: int) -> dict[str, Any]:
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise LedgerError(
                f"{self.path}:{number} is not JSON ({exc}): {line[:80]!r}; write each change "
                "as one JSON object and a newline, with one write."
            ) from None
        if not isinstance(value, dict):
            raise LedgerError(
                f"{self.path}:{number} is {type(value).__name__} JSON, not an object: "
                f"{line[:80]!r}; each line is one change to one attempt."
            )
        id_field = self.columns.get("attempt_id", "attempt_id")
        if id_field != _ROWID and value.get(id_field) is None:
            raise LedgerError(
                f"{self.path}:{number} has no {id_field!r}: {line[:80]!r}; every line names "
                "the attempt it changes (map your name with fields={'attempt_id': ...})."
            )
        return value

    def _merged(
        self,
    ) -> tuple[set[str], list[dict[str, Any]], list[tuple[int, dict[str, Any], Any]]]:
        """(fields present, one merged record per attempt, each line with its number and its
        attempt's id)."""
        id_field = self.columns.get("attempt_id", "attempt_id")
        records: dict[Any, dict[str, Any]] = {}
        present: set[str] = set()
        tagged = []
        for number, line in self._lines():
            key = line.get(id_field)
            record = records.setdefault(key, {_ROWID: len(records) + 1})
            record.update(line)
            present.update(line)
            tagged.append((number, line, key))
        return present, list(records.values()), tagged

    def _table_columns(self) -> frozenset[str] | None:
        present, records, _ = self._merged()
        return frozenset(present) if records else None

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        present, records, _ = self._merged()
        if not records:
            return set(), []
        missing = [mapping.get(name, name) for name in required]
        missing = [c for c in missing if c not in present and c != _ROWID]
        if missing:
            raise LedgerError(
                f"no line of {self.path} has the field(s) {', '.join(missing)}; map your "
                "names with fields={'seed_name': 'your_name'}."
            )
        for record in records:  # a field some lines of the file have, this attempt lacks
            for name in present:
                record.setdefault(name, None)
        return present | {_ROWID}, records

    def events(self) -> Sequence[Event]:
        names = {n: self.columns.get(n, n) for n in ("state", "updated_at", "owner")}
        _, _, tagged = self._merged()
        last: dict[Any, State] = {}
        events: list[Event] = []
        for number, line, key in tagged:
            if names["state"] not in line:
                continue
            to_state = self._state(line[names["state"]])
            before = last.get(key)
            last[key] = to_state
            if before is to_state:
                continue
            at = line.get(names["updated_at"], line.get("at"))
            actor = line.get(names["owner"], line.get("actor"))
            events.append(
                Event(
                    event_id=len(events) + 1,
                    attempt_id=str(key),
                    from_state=before,
                    to_state=to_state,
                    at=float(at) if isinstance(at, int | float) else 0.0,
                    actor="" if actor is None else str(actor),
                    reason=str(line.get("reason") or f"{self.path.name}:{number}"),
                )
            )
        return events
