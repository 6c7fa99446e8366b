"""A ledger kept in Redis, read as the harness needs it: hashes of fields, or one hash of
states.

Two layouts, the ones Redis-backed job stores use:

- **a hash per attempt** (``keys="job:*"``): each key the pattern matches is a hash, its
  fields the attempt's columns (``HSET job:7 status pending to ada@example.com``); the key
  itself is the ``key`` column, the attempt's id unless ``columns=`` maps ``attempt_id``
  elsewhere;
- **one hash of attempts** (``hash="jobs"``): each field is an attempt's id (the ``field``
  column) and its value the attempt's state (the ``value`` column), or a JSON object of its
  columns (``HSET jobs job-7 '{"status": "pending"}'``).

Columns, states and constants are mapped as :class:`SQLiteLedgerView` maps them (this view is
one, reading Redis instead of SQLite). The view reads with redis-py, only when asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import LedgerError
from .authority import Authority
from .states import State
from .views import _ROWID, SQLiteLedgerView

__all__ = ["RedisLedgerView"]

#: The columns of the two layouts that are not a hash field: the key, and a hash's field
#: and value.
KEY, FIELD, VALUE = "key", "field", "value"


class RedisLedgerView(SQLiteLedgerView):
    """Read a ledger kept in Redis at ``url`` (``redis://host:6379/0``, ``unix:///path``;
    in a crash test ``ctx.redis_url``), as the module docstring describes: ``keys`` (a
    ``SCAN MATCH`` pattern: a hash per attempt) or ``hash`` (one hash, a field per attempt).

    ``columns`` maps seed names to field names (unmapped names are used as they are),
    ``states`` maps the stored state values to :class:`State`; ``constants``,
    ``args_fields`` and ``authority_of`` are those of :class:`SQLiteLedgerView`. Only an id
    and a state are required. No key yet reads as an empty ledger. A value the view cannot
    read (a key that is not a hash, bytes that are not UTF-8, a state not mapped, a time
    that is not a number) raises :class:`LedgerError` naming the key, the field and the
    value; so does a server that does not answer, and a missing redis-py.
    """

    def __init__(
        self,
        url: str,
        *,
        keys: str | None = None,
        hash: str | None = None,
        columns: Mapping[str, str] | None = None,
        states: Mapping[Any, State] | None = None,
        constants: Mapping[str, object] | None = None,
        args_fields: Sequence[str] = (),
        authority_of: Callable[[str, float], Authority | None] | None = None,
    ) -> None:
        if (keys is None) == (hash is None):
            raise LedgerError(
                "RedisLedgerView needs one of keys= (a pattern of keys, a hash per attempt: "
                "keys='job:*') or hash= (one hash, a field per attempt: hash='jobs')."
            )
        if not isinstance(url, str) or not url:
            raise LedgerError(
                f"RedisLedgerView({url!r}): pass the server's URL (redis://host:6379/0, "
                "unix:///path/redis.sock; in a crash test ctx.redis_url)."
            )
        defaults = {"attempt_id": KEY} if keys is not None else {"attempt_id": FIELD,
                                                                  "state": VALUE}
        super().__init__(
            url,
            table=keys if keys is not None else hash,
            columns={**defaults, **(columns or {})},
            states=states,
            constants=constants,
            args_columns=args_fields,
            authority_of=authority_of,
        )
        self.url = url
        self.keys = keys
        self.hash = hash
        #: The key (and field) of the record being read, for the errors.
        self._at = ""

    @property
    def _source(self) -> str:
        where = self._at or (f"keys {self.keys!r}" if self.keys is not None
                             else f"hash {self.hash!r}")
        return f"redis {self.url} {where}"

    # -- reading Redis -------------------------------------------------------------------------

    def _client(self) -> Any:
        try:
            import redis
        except ImportError:
            raise LedgerError(
                "RedisLedgerView reads Redis with redis-py, which is not installed; "
                "pip install 'pytest-crashpoints[redis]' (or redis)."
            ) from None
        return redis.Redis.from_url(self.url, socket_timeout=30)

    def _records(self) -> list[dict[str, Any]]:
        """Each attempt's fields, in the order of its key (or field)."""
        client = self._client()
        import redis  # importable: _client imported it

        try:
            if self.keys is not None:
                return [self._of_key(client, key)
                        for key in sorted(client.scan_iter(match=self.keys, count=1000))]
            return [self._of_field(field, value)
                    for field, value in sorted(client.hgetall(self.hash).items())]
        except redis.ResponseError as exc:
            raise LedgerError(
                f"{self._source}: {exc}; hash= names a hash (HSET {self.hash} <id> <state>)."
            ) from None
        except redis.RedisError as exc:
            raise LedgerError(f"{self._source}: the server did not answer ({exc}).") from None
        finally:
            self._at = ""
            client.close()

    def _of_key(self, client: Any, key: bytes) -> dict[str, Any]:
        name = self._text(key, "")
        self._at = f"key {name!r}"
        kind = self._text(client.type(key), "")
        if kind != "hash":
            raise LedgerError(
                f"{self._source} is a {kind}, not a hash; keys= matches only the hashes of "
                "the attempts (HSET <key> <field> <value> ...): narrow the pattern."
            )
        fields = {self._text(f, "?"): v for f, v in client.hgetall(key).items()}
        return {KEY: name, **{f: self._text(v, f) for f, v in fields.items()}}

    def _of_field(self, field: bytes, value: bytes) -> dict[str, Any]:
        name = self._text(field, "")
        self._at = f"hash {self.hash!r} field {name!r}"
        text = self._text(value, name)
        record: dict[str, Any] = {FIELD: name, VALUE: text}
        if text.startswith("{"):
            try:
                parsed = json.loads(text)
            except ValueError:
                raise LedgerError(
                    f"{self._source} holds {text[:80]!r}, which is not JSON; store the state "
                    "itself or a JSON object of the attempt's fields."
                ) from None
            if isinstance(parsed, dict):
                record.update(parsed)
        return record

    def _text(self, value: Any, field: str) -> str:
        """``value`` (bytes from the server) as text. Raises :class:`LedgerError` for bytes
        that are not UTF-8, naming where they are."""
        if not isinstance(value, bytes):
            return str(value)
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            where = f"{self._source} field {field!r}" if field else self._source
            raise LedgerError(
                f"{where} holds {value[:40]!r}, which is not UTF-8 text; store ids, states "
                "and times as text (or numbers)."
            ) from None

    # -- what SQLiteLedgerView reads ------------------------------------------------------------

    def _table_columns(self) -> frozenset[str] | None:
        records = self._records()
        return frozenset(name for record in records for name in record) if records else None

    def _rows(self, table: str, required: Sequence[str], mapping: Mapping[str, str]) -> Any:
        records = self._records()
        if not records:
            return set(), []
        present = {name for record in records for name in record}
        missing = [mapping.get(name, name) for name in required]
        missing = [c for c in missing if c not in present and c != _ROWID]
        if missing:
            raise LedgerError(
                f"no record of {self._source} has the field(s) {', '.join(missing)}; map "
                "your names with columns={'seed_name': 'your_field'}."
            )
        for position, record in enumerate(records, start=1):
            record[_ROWID] = position
            for name in present:  # a field other records have, this one lacks
                record.setdefault(name, None)
        return present | {_ROWID}, records

    def _attempt(self, row: Any, names: Mapping[str, str], present: set[str]) -> Any:
        self._at = (f"key {row.get(KEY)!r}" if self.keys is not None
                    else f"hash {self.hash!r} field {row.get(FIELD)!r}")
        try:
            return super()._attempt(row, names, present)
        finally:
            self._at = ""
