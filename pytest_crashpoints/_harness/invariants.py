"""The six invariants, each a plain function over a case's evidence (docs/concepts.md).

Each checker returns the violations it finds, in words an operator can act on, with the
ledger rows, journal entries and events that show it. The ground truth is the providers'
journals: an effect is what a provider applied, whatever the ledger says.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable

from .._ledger.args import args_hash as hash_args
from .._ledger.authority import Authority, format_scope
from .._ledger.records import Attempt
from .._ledger.states import FINAL_STATES, State
from .evidence import Evidence, ProviderRequest

__all__ = ["CHECKS", "INVARIANTS", "Violation", "check_all"]

#: One line per invariant, as reports name them.
INVARIANTS: dict[int, str] = {
    1: "no non-idempotent side effect happens twice",
    2: "every attempt ends CONFIRMED, FAILED or MANUAL_REVIEW and agrees with the provider",
    3: "the operator can see the arguments, their hash and the provider request id",
    4: "a retry never widens credentials or crosses a tenant boundary",
    5: "in-flight work is visible in the queue and has an owner",
    6: "recovery is safe to run twice and after being killed",
}


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken invariant: which, for which attempts, why, and the evidence."""

    invariant: int
    attempt_ids: tuple[str, ...]
    message: str
    evidence: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"invariant {self.invariant} ({INVARIANTS[self.invariant]}): {self.message}"]
        lines += [f"    {line}" for line in self.evidence]
        return "\n".join(lines)


def _short(digest: str | None) -> str:
    return "none" if not digest else digest[:8] + "…"


def _t(at: float) -> str:
    return f"t={at:g}s"


def _describe(attempt: Attempt) -> str:
    return f"attempt {attempt.attempt_id} ({attempt.tool_name}, args {_short(attempt.args_hash)})"


def _row(attempt: Attempt) -> str:
    return (
        f"ledger: {attempt.attempt_id} task={attempt.task_id} tool={attempt.tool_name} "
        f"key={attempt.idempotency_key} state={attempt.state.value} "
        f"args={_short(attempt.args_hash)} request={attempt.provider_request_id} "
        f"tenant={attempt.authority.tenant_id} scope='{attempt.authority.scope_text}' "
        f"policy={attempt.authority.policy_version} owner={attempt.owner}"
    )


def _entry(request: ProviderRequest) -> str:
    applied = "effect applied" if request.effect_applied else "no effect"
    return (
        f"journal: {request.provider} {request.request_id} {_t(request.at)} {request.kind} "
        f"key={request.operation_key} args={_short(request.logical_hash)} "
        f"tenant={request.tenant_id} scope='{format_scope(request.scope)}' "
        f"status={request.status} {applied}"
    )


def _requests_of(evidence: Evidence, attempt: Attempt) -> list[ProviderRequest]:
    return [r for r in evidence.requests if r.operation_key == attempt.idempotency_key]


def _incidents_between(evidence: Evidence, start: float, end: float) -> list[str]:
    return [i.text for i in evidence.incidents if start <= i.at <= end]


def check_no_duplicate_effects(evidence: Evidence) -> list[Violation]:
    """Invariant 1: per logical effect, at most one effect at the provider.

    A logical effect is the same arguments for the same task at the same provider: two
    sends with different idempotency keys (a fresh key per try), or under two tenants (a
    task moved), are still one logical effect done twice, while two tasks may each send the
    same text once. An effect no attempt names is grouped by its tenant instead.
    """
    task_of = {a.idempotency_key: a.task_id for a in evidence.attempts}
    groups: dict[tuple[str, str, str], list[ProviderRequest]] = defaultdict(list)
    for effect in evidence.effects:
        name = effect.logical_hash or f"key:{effect.operation_key}"
        task = task_of.get(effect.operation_key or "")
        owner = f"task:{task}" if task is not None else f"tenant:{effect.tenant_id}"
        groups[(effect.provider, owner, name)].append(effect)
    violations = []
    for (provider, owner, name), effects in groups.items():
        task = owner.removeprefix("task:") if owner.startswith("task:") else None
        if len(effects) < 2:
            continue
        keys = {e.operation_key for e in effects}
        culprits = [
            a
            for a in evidence.attempts
            if a.idempotency_key in keys or (a.args_hash == name and a.task_id == task)
        ]
        who = ", ".join(_describe(a) for a in culprits) or "no attempt in the ledger"
        times = " and ".join(f"{e.request_id} at {_t(e.at)}" for e in effects)
        idempotency = (
            "it honours idempotency keys, so the keys differed"
            if all(e.idempotent for e in effects) and len(keys) > 1
            else "it has no idempotency"
            if not any(e.idempotent for e in effects)
            else "the same effect was applied twice"
        )
        between = _incidents_between(evidence, effects[0].at, effects[-1].at)
        before = [i.text for i in evidence.incidents if i.at < effects[0].at]
        story = (
            f"; between them: {'; '.join(between)}"
            if between
            else f"; before them: {'; '.join(before)}"
            if before
            else ""
        )
        violations.append(
            Violation(
                1,
                tuple(a.attempt_id for a in culprits),
                f"{who} caused {len(effects)} {provider} effects: requests {times}; "
                f"{provider}: {idempotency}{story}.",
                tuple(_entry(e) for e in effects) + tuple(_row(a) for a in culprits),
            )
        )
    return violations


def check_outcomes_agree(evidence: Evidence) -> list[Violation]:
    """Invariant 2: final states only, the ledger agrees with the journals, nothing dropped."""
    violations = []
    for attempt in evidence.attempts:
        effects = [r for r in _requests_of(evidence, attempt) if r.effect_applied]
        if attempt.state not in FINAL_STATES:
            violations.append(
                Violation(
                    2,
                    (attempt.attempt_id,),
                    f"{_describe(attempt)} ended {attempt.state.value} after the quiet phase, "
                    f"not CONFIRMED, FAILED or MANUAL_REVIEW (owner {attempt.owner}).",
                    (_row(attempt), *map(_entry, effects)),
                )
            )
        elif attempt.state is State.OUTCOME_CONFIRMED:
            matching = [e for e in effects if e.logical_hash in (None, attempt.args_hash)]
            if len(effects) != 1 or len(matching) != 1:
                violations.append(
                    Violation(
                        2,
                        (attempt.attempt_id,),
                        f"{_describe(attempt)} is CONFIRMED but the provider has "
                        f"{len(effects)} effect(s) for key {attempt.idempotency_key!r}, "
                        f"{len(matching)} with its arguments hash; CONFIRMED needs exactly one.",
                        (_row(attempt), *map(_entry, effects)),
                    )
                )
        elif attempt.state is State.FAILED and effects:
            violations.append(
                Violation(
                    2,
                    (attempt.attempt_id,),
                    f"{_describe(attempt)} is FAILED but the provider applied it "
                    f"({', '.join(e.request_id for e in effects)}): the work happened and the "
                    "ledger says it did not.",
                    (_row(attempt), *map(_entry, effects)),
                )
            )
    keys = {a.idempotency_key for a in evidence.attempts}
    hashes = {a.args_hash for a in evidence.attempts}
    for effect in evidence.effects:
        if effect.operation_key not in keys and effect.logical_hash not in hashes:
            violations.append(
                Violation(
                    2,
                    (),
                    f"{effect.provider} applied {effect.request_id} at {_t(effect.at)} "
                    f"(key {effect.operation_key!r}) but no attempt in the ledger records it.",
                    (_entry(effect),),
                )
            )
    recorded = {(a.task_id, a.tool_name, a.args_hash) for a in evidence.attempts}
    applied = {e.logical_hash for e in evidence.effects}
    for expected in evidence.expected_effects:
        found = (expected.task_id, expected.tool_name, expected.args_hash) in recorded
        if not found and expected.args_hash not in applied:
            violations.append(
                Violation(
                    2,
                    (),
                    f"message {expected.task_id} was delivered and its {expected.tool_name} "
                    f"(args {_short(expected.args_hash)}) was silently dropped: no attempt in "
                    "the ledger and no effect at the provider.",
                )
            )
    return violations


def check_operator_visibility(evidence: Evidence) -> list[Violation]:
    """Invariant 3: arguments, their hash, and a real provider request id are visible."""
    # A provider names a request by its request id or by the id of what it created.
    issued = {r.request_id for r in evidence.requests} | {
        r.object_id for r in evidence.requests if r.object_id
    }
    violations = []
    for attempt in evidence.attempts:
        problems = []
        if not attempt.args_hash:
            problems.append("no arguments hash")
        elif not attempt.args:
            problems.append("no arguments recorded")
        elif hash_args(attempt.args) != attempt.args_hash:
            problems.append(
                f"the recorded arguments hash to {_short(hash_args(attempt.args))}, not the "
                f"recorded {_short(attempt.args_hash)}"
            )
        if attempt.state is State.OUTCOME_CONFIRMED and not attempt.provider_request_id:
            problems.append("CONFIRMED without a provider request id")
        if attempt.provider_request_id and attempt.provider_request_id not in issued:
            problems.append(
                f"request id {attempt.provider_request_id!r} was never issued by the provider"
            )
        if problems:
            violations.append(
                Violation(
                    3,
                    (attempt.attempt_id,),
                    f"the operator cannot trust {_describe(attempt)}: {'; '.join(problems)}.",
                    (_row(attempt),),
                )
            )
    return violations


_NO_HISTORY = object()


def _authority_at(evidence: Evidence, task_id: str, at: float) -> Authority | object | None:
    """The task's authority in force at ``at`` (None: revoked; _NO_HISTORY: never recorded)."""
    current: Authority | object | None = _NO_HISTORY
    for change in evidence.authority_history:
        if change.task_id == task_id and change.at <= at:
            current = change.authority
    return current


def check_authority(evidence: Evidence) -> list[Violation]:
    """Invariant 4: every request within the attempt's tenant and scope, under live authority."""
    by_key = {a.idempotency_key: a for a in evidence.attempts}
    by_id = {a.attempt_id: a for a in evidence.attempts}
    violations = []
    for request in evidence.requests:
        attempt = by_key.get(request.operation_key or "") or by_id.get(request.attempt_id or "")
        if attempt is None or request.tenant_id is None:
            continue
        problems = []
        if request.tenant_id != attempt.authority.tenant_id:
            problems.append(
                f"made for tenant {request.tenant_id!r}, the attempt belongs to "
                f"{attempt.authority.tenant_id!r}"
            )
        wider = request.scope - attempt.authority.credential_scope
        if wider:
            problems.append(f"made with scope wider than the attempt's: {format_scope(wider)}")
        in_force = _authority_at(evidence, attempt.task_id, request.at)
        if in_force is None:
            problems.append(f"made at {_t(request.at)} after the task's authority was revoked")
        elif isinstance(in_force, Authority) and in_force != attempt.authority:
            problems.append(
                f"made at {_t(request.at)} under authority that had changed (now tenant "
                f"{in_force.tenant_id!r}, scope '{in_force.scope_text}', policy "
                f"{in_force.policy_version!r})"
            )
        if problems:
            violations.append(
                Violation(
                    4,
                    (attempt.attempt_id,),
                    f"{request.provider} request {request.request_id} of {_describe(attempt)} "
                    f"was {'; '.join(problems)}.",
                    (_entry(request), _row(attempt)),
                )
            )
    return violations


def check_queue_visibility(evidence: Evidence) -> list[Violation]:
    """Invariant 5: at every observation, in-flight work is in the queue and has an owner."""
    reported: set[str] = set()
    violations = []
    for seen in evidence.observations:
        queued = {entry.attempt_id for entry in seen.queue}
        for attempt in seen.attempts:
            if not attempt.in_flight or attempt.attempt_id in reported:
                continue
            problems = []
            if not attempt.owner:
                problems.append("has no owner")
            if attempt.attempt_id not in queued:
                problems.append("is missing from the queue")
            if problems:
                reported.add(attempt.attempt_id)
                violations.append(
                    Violation(
                        5,
                        (attempt.attempt_id,),
                        f"after step {seen.step} ({seen.label}, {_t(seen.at)}) "
                        f"{_describe(attempt)} is {attempt.state.value} and "
                        f"{' and '.join(problems)}.",
                        (_row(attempt),),
                    )
                )
    return violations


def check_recovery_idempotent(evidence: Evidence) -> list[Violation]:
    """Invariant 6: a second recovery changes nothing; a killed one ends where a whole one does."""
    rerun = evidence.rerun
    if rerun is None:
        return []
    violations = []
    if rerun.ledger_changes:
        violations.append(
            Violation(
                6,
                (),
                "running recovery a second time after the quiet phase changed the ledger.",
                rerun.ledger_changes,
            )
        )
    if rerun.new_requests:
        effects = [r for r in rerun.new_requests if r.effect_applied]
        if effects:
            violations.append(
                Violation(
                    6,
                    (),
                    f"running recovery a second time caused {len(effects)} provider effect(s).",
                    tuple(_entry(r) for r in effects),
                )
            )
    if rerun.killed_vs_uninterrupted:
        where = f" at {rerun.killed_at}" if rerun.killed_at else ""
        violations.append(
            Violation(
                6,
                (),
                f"recovery killed{where} and run again ended elsewhere than an uninterrupted "
                "recovery from the same state.",
                rerun.killed_vs_uninterrupted,
            )
        )
    return violations


#: The checkers by invariant number.
CHECKS: dict[int, Callable[[Evidence], list[Violation]]] = {
    1: check_no_duplicate_effects,
    2: check_outcomes_agree,
    3: check_operator_visibility,
    4: check_authority,
    5: check_queue_visibility,
    6: check_recovery_idempotent,
}


def check_all(evidence: Evidence, invariants: Iterable[int] = CHECKS) -> list[Violation]:
    """Run the checkers for ``invariants`` (all six by default), in order."""
    return [v for number in invariants for v in CHECKS[number](evidence)]
