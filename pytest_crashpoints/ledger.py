"""The interruption ledger and what production code builds on it.

Everything an agent needs at run time, with or without a test harness:

- the reference ledger on SQLite (:class:`Ledger`) and on PostgreSQL
  (:class:`PostgresLedger`), its records (:class:`Attempt`,
  :class:`Event`, :class:`QueueEntry`), states and their legal transitions (:class:`State`,
  :data:`TRANSITIONS`, :data:`FINAL_STATES`, :data:`IN_FLIGHT_STATES`);
- canonical arguments and their hash (:func:`normalize_args`, :func:`canonical_json`,
  :func:`args_hash`) and the :class:`Authority` an attempt is made under;
- the safe-order tool call (:func:`guarded_call`) around any :class:`ToolAdapter`, with what
  an adapter answers (:class:`Receipt`, :class:`Found`, :class:`Absent`, :class:`Unavailable`);
- the reference recovery (:func:`recover`, :class:`RecoveryPolicy`, :class:`RecoveryAction`);
- views that let the harness read any ledger (:class:`LedgerView`, :class:`SQLiteLedgerView`,
  :class:`JSONLinesLedgerView`, :class:`PostgresLedgerView`, :class:`RedisLedgerView`).

The most used names are also importable from ``pytest_crashpoints`` itself.
"""

from ._agent.recovery import RecoveryAction, RecoveryPolicy, recover
from ._agent.toolcall import (
    Absent,
    Found,
    LookupResult,
    Receipt,
    ToolAdapter,
    Unavailable,
    guarded_call,
)
from ._exports import show_public_home
from ._ledger.args import JSONValue, args_hash, canonical_json, normalize_args
from ._ledger.authority import Authority
from ._ledger.jsonlines import JSONLinesLedgerView
from ._ledger.postgres_ledger import PostgresLedger
from ._ledger.postgres_view import PostgresLedgerView
from ._ledger.records import Attempt, Event, QueueEntry
from ._ledger.redis_view import RedisLedgerView
from ._ledger.sqlite import SCHEMA_VERSION, Ledger
from ._ledger.states import FINAL_STATES, IN_FLIGHT_STATES, TRANSITIONS, State
from ._ledger.views import LedgerView, SQLiteLedgerView

__all__ = [
    "FINAL_STATES",
    "IN_FLIGHT_STATES",
    "SCHEMA_VERSION",
    "TRANSITIONS",
    "Absent",
    "Attempt",
    "Authority",
    "Event",
    "Found",
    "JSONLinesLedgerView",
    "JSONValue",
    "Ledger",
    "LedgerView",
    "LookupResult",
    "PostgresLedger",
    "PostgresLedgerView",
    "QueueEntry",
    "Receipt",
    "RecoveryAction",
    "RecoveryPolicy",
    "RedisLedgerView",
    "SQLiteLedgerView",
    "State",
    "ToolAdapter",
    "Unavailable",
    "args_hash",
    "canonical_json",
    "guarded_call",
    "normalize_args",
    "recover",
]

show_public_home(__name__, __all__)
