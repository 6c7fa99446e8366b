"""How the checkers tie things together: ledger rows to provider requests, and a case's
effects to those of the fault-free run.

A row is tied to a request by whatever the agent really stored: its idempotency key (the
``Idempotency-Key`` or correlation header the request carried), the provider's request id,
or the id of what the request created, in any form the provider's API shows (a charge id, a
message id, an issue number or its URL). Nothing in the request's payload is needed.

A case's effects are compared with the fault-free run's (the providers' journals of both,
attributed to messages by the harness's credentials): an effect there is matched by provider,
operation and payload hash, or, for payloads that differ from run to run (a timestamp, a
random id), by provider, operation and message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..._ledger.records import Attempt
from .evidence import Evidence, ExpectedEffect, ProviderRequest

__all__ = [
    "LINK_COLUMNS",
    "Comparison",
    "compare_with_baseline",
    "effects_of",
    "requests_of",
    "stored_links",
    "twin_of",
]

#: The ledger columns that can tie a row to a provider request.
LINK_COLUMNS = ("idempotency_key", "provider_request_id", "result_ref")


def stored_links(attempt: Attempt, evidence: Evidence) -> frozenset[str]:
    """The values the row stored that may name a request or what it created."""
    values = [getattr(attempt, column) for column in LINK_COLUMNS if evidence.reads(column)]
    return frozenset(str(value) for value in values if value)


def requests_of(attempt: Attempt, evidence: Evidence) -> list[ProviderRequest]:
    """The provider requests the row names (any of its stored values), in journal order, and
    the effect each write it names repeated without changing anything (an idempotent retry
    names what the first one did)."""
    links = stored_links(attempt, evidence)
    named = [
        r
        for r in evidence.requests
        if (links & r.identifiers)
        or (r.attempt_id is not None and r.attempt_id == attempt.attempt_id)
    ]
    return _with_repeated(named, evidence)


def effects_of(attempt: Attempt, evidence: Evidence) -> tuple[list[ProviderRequest], bool]:
    """The effects the row stands for, and whether it names them exactly: those its key or
    request id names (and what a write it names repeated), else, where it names only what
    the provider made (an object's id, which every later write of that object shares too),
    that object's effects."""
    links = stored_links(attempt, evidence)
    exact = [
        r
        for r in evidence.requests
        if links & {name for name in (r.request_id, r.operation_key) if name}
        or (r.attempt_id is not None and r.attempt_id == attempt.attempt_id)
    ]
    if exact:
        return [r for r in _with_repeated(exact, evidence) if r.effect_applied], True
    return [r for r in requests_of(attempt, evidence) if r.effect_applied], False


def _with_repeated(
    named: list[ProviderRequest], evidence: Evidence
) -> list[ProviderRequest]:
    repeats = {
        (r.provider, r.journal_key)
        for r in named
        if r.journal_key and not r.effect_applied and r.status < 400
    }
    if not repeats:
        return named
    return [
        r
        for r in evidence.requests
        if r in named or (r.effect_applied and (r.provider, r.journal_key) in repeats)
    ]


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A case's effects against the fault-free run's."""

    matched: tuple[tuple[ExpectedEffect, ProviderRequest], ...]
    extra: tuple[ProviderRequest, ...]
    missing: tuple[ExpectedEffect, ...]


def _same_message(expected: ExpectedEffect, effect: ProviderRequest) -> bool:
    return expected.message is not None and expected.message == effect.message


def compare_with_baseline(
    expected: Sequence[ExpectedEffect], effects: Sequence[ProviderRequest]
) -> Comparison:
    """Match each effect to one effect of the fault-free run, the closest first. The effects
    an incident holds take their places first: the work production did counts as done once,
    and the case's own effects are measured against what is left."""
    earlier = [e for e in effects if e.from_incident]
    if not earlier:
        return _matched(expected, effects)
    first = _matched(expected, earlier)
    rest = _matched(first.missing, [e for e in effects if not e.from_incident])
    return Comparison(first.matched + rest.matched, first.extra + rest.extra, rest.missing)


def _matched(
    expected: Sequence[ExpectedEffect], effects: Sequence[ProviderRequest]
) -> Comparison:
    passes: list[Callable[[ExpectedEffect, ProviderRequest], bool]] = [
        lambda e, f: e.payload_hash == f.payload_hash and _same_message(e, f),
        lambda e, f: e.payload_hash == f.payload_hash,
        lambda e, f: _same_message(e, f),
        lambda e, f: f.message is None,  # a recovery run's, with a payload of its own
    ]
    left = list(expected)
    unmatched = list(effects)
    matched: list[tuple[ExpectedEffect, ProviderRequest]] = []
    for fits in passes:
        still: list[ProviderRequest] = []
        for effect in unmatched:
            found = next(
                (
                    e
                    for e in left
                    if e.provider == effect.provider
                    and e.operation == effect.kind
                    and fits(e, effect)
                ),
                None,
            )
            if found is None:
                still.append(effect)
            else:
                left.remove(found)
                matched.append((found, effect))
        unmatched = still
    return Comparison(tuple(matched), tuple(unmatched), tuple(left))


def twin_of(
    extra: ProviderRequest, effects: Sequence[ProviderRequest], *, task: str | None = None
) -> ProviderRequest | None:
    """Another effect that ``extra`` repeats: the same operation at the same provider, with
    the same payload or for the same message (or with no message to tell them apart); of
    those, one of the same task (``task``: the task of ``extra`` when no message says it),
    then one that is no incident's history."""
    same = [
        other
        for other in effects
        if other is not extra and other.provider == extra.provider and other.kind == extra.kind
    ]
    for other in same:
        if other.payload_hash == extra.payload_hash:
            return other
    for other in same:  # the same message's before one that served none
        if extra.message is not None and other.message == extra.message:
            return other
    task = extra.task_id or task
    loose = [other for other in same if other.message is None or extra.message is None]
    loose.sort(key=lambda other: (task is None or other.task_id != task, other.history))
    return loose[0] if loose else None
