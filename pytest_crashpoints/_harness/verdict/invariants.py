"""The six invariants, each a plain function over a case's evidence (docs/concepts.md).

Each checker returns the violations it finds, in words an operator can act on, with the
ledger rows, journal entries and events that show it. The ground truth is the providers'
journals, attributed to processes and messages by the harness itself: an effect is what a
provider applied, whoever asked and whatever the ledger says. The ledger is checked against
that truth, never used as evidence for it; where the ledger view cannot read a column a
check needs, that check is skipped and :func:`unchecked` says so.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import traceback
from collections.abc import Callable, Iterable, Sequence

from ..._ledger.args import args_hash as hash_args
from ..._ledger.authority import Authority, format_scope
from ..._ledger.records import Attempt
from ..._ledger.states import FINAL_STATES, State
from ...errors import HarnessUsageError
from .evidence import Evidence, ProviderRequest
from .linking import LINK_COLUMNS, compare_with_baseline, effects_of, requests_of, twin_of

__all__ = [
    "CHECKS",
    "INVARIANTS",
    "Invariant",
    "Violation",
    "check_all",
    "check_invariants",
    "check_own",
    "invariant_key",
    "invariant_name",
    "unaccounted",
    "unchecked",
]

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
    """One broken invariant: which, for which attempts, why, and the evidence.

    ``invariant`` is the number of one of the six, or the name of an invariant of your own
    (its function's name); ``title`` is the one line an invariant of your own says of itself
    (its docstring's first line). ``evidence`` lines are shown under the message, as the
    six show journal entries and ledger rows. ``requests`` names, as ``(provider,
    request_id)``, the journal entries the check found the violation in (for invariant 1, the
    effect and its repeat), so a report can point at exactly what the check used.
    """

    invariant: int | str
    attempt_ids: tuple[str, ...] = ()
    message: str = ""
    evidence: tuple[str, ...] = ()
    title: str = ""
    requests: tuple[tuple[str, str], ...] = ()

    @property
    def says(self) -> str:
        """What the invariant says, in one line."""
        if isinstance(self.invariant, int):
            return INVARIANTS.get(self.invariant, self.title)
        return self.title or self.invariant

    def __str__(self) -> str:
        lines = [f"invariant {self.invariant} ({self.says}): {self.message}"]
        lines += [f"    {line}" for line in self.evidence]
        return "\n".join(lines)


#: An invariant of your own: a function over one case's evidence that returns (or yields) what
#: it finds broken, each a :class:`Violation` or just its message. Its name is the function's
#: name; its docstring's first line says what it holds to.
Invariant = Callable[[Evidence], Iterable["Violation | str"]]


def _short(digest: str | None) -> str:
    return "none" if not digest else digest[:8] + "…"


def _t(evidence: Evidence, at: float) -> str:
    from .history import shown_time

    return f"t={shown_time(at, evidence.epoch)}"


def _describe(attempt: Attempt) -> str:
    args = f"args {_short(attempt.args_hash)}" if attempt.args_hash else ""
    what = ", ".join(part for part in (attempt.tool_name, args) if part)
    return f"attempt {attempt.attempt_id}" + (f" ({what})" if what else "")


def _row(attempt: Attempt) -> str:
    return (
        f"ledger: {attempt.attempt_id} task={attempt.task_id or '-'} "
        f"tool={attempt.tool_name or '-'} key={attempt.idempotency_key or '-'} "
        f"state={attempt.state.value} args={_short(attempt.args_hash)} "
        f"request={attempt.provider_request_id} result={attempt.result_ref} "
        f"tenant={attempt.authority.tenant_id or '-'} scope='{attempt.authority.scope_text}' "
        f"policy={attempt.authority.policy_version or '-'} owner={attempt.owner}"
    )


def _entry(evidence: Evidence, request: ProviderRequest) -> str:
    applied = "effect applied" if request.effect_applied else "no effect"
    if request.reading is not None:
        applied += f" [from the incident: {request.reading}]"
    return (
        f"journal: {request.provider} {request.request_id} {_t(evidence, request.at)} "
        f"{request.kind} "
        f"by {request.sender} key={request.operation_key} "
        f"payload={_short(request.payload_hash)} tenant={request.tenant_id} "
        f"scope='{format_scope(request.scope)}' status={request.status} {applied}"
    )


def _refs(requests: Iterable[ProviderRequest]) -> tuple[tuple[str, str], ...]:
    return tuple((r.provider, r.request_id) for r in requests)


def _incidents_between(evidence: Evidence, start: float, end: float) -> list[str]:
    return [i.text for i in evidence.incidents if start <= i.at <= end]


def _story(evidence: Evidence, first: ProviderRequest, last: ProviderRequest) -> str:
    between = _incidents_between(evidence, first.at, last.at)
    before = [i.text for i in evidence.incidents if i.at < first.at]
    if between:
        return f"; between them: {'; '.join(between)}"
    if before:
        return f"; before them: {'; '.join(before)}"
    return ""


def _rows_of(evidence: Evidence, requests: Iterable[ProviderRequest]) -> list[Attempt]:
    ids = {id(r) for r in requests}
    return [a for a in evidence.attempts if any(id(r) in ids for r in requests_of(a, evidence))]


# -- invariant 1 ------------------------------------------------------------------------------


def check_no_duplicate_effects(evidence: Evidence) -> list[Violation]:
    """Invariant 1: no effect beyond what the fault-free run of the same messages produced.

    Effects come from the providers' journals; the harness knows which process sent each
    one and which message that process served. An effect with no counterpart in the
    fault-free run that repeats another one of this case (the same operation at the same
    provider, for the same message or with the same payload) is a duplicate, whatever keys
    the agent used or recorded. Idempotent replays are not effects. For a case with no
    baseline (the fault-free run itself), two effects with the same payload for the same
    message (or one made by a recovery run, which serves no message) are a duplicate.

    In a case that starts from an incident, what production made before counts as done
    once: a repeat of it by the case is a duplicate, but two effects that production made
    (a duplicate that already happened) are the incident itself, not the case's doing.
    """
    effects = list(evidence.effects)
    if evidence.expected_effects is None:
        extras = []
        for index, effect in enumerate(effects):
            earlier = [
                e
                for e in effects[:index]
                if (e.provider, e.kind, e.payload_hash)
                == (effect.provider, effect.kind, effect.payload_hash)
                and (e.message is None or effect.message is None or e.message == effect.message)
            ]
            if earlier:
                extras.append((earlier[0], effect))
        baseline = "the same payload once before"
    else:
        comparison = compare_with_baseline(evidence.expected_effects, effects)
        extras = []
        paired: set[frozenset[int]] = set()
        for extra in comparison.extra:
            task = next((a.task_id for a in _rows_of(evidence, [extra]) if a.task_id), None)
            others = list(effects)
            while (twin := twin_of(extra, others, task=task)) is not None:
                if frozenset((id(twin), id(extra))) not in paired:
                    break
                others.remove(twin)  # each pair once: two extras repeat each other
            if twin is not None:
                paired.add(frozenset((id(twin), id(extra))))
                extras.append((twin, extra) if twin.at <= extra.at else (extra, twin))
        baseline = "the fault-free run of the same messages made it once"
    violations = []
    for first, second in extras:
        pair = (first, second)
        if first.from_incident and second.from_incident:
            continue  # production's own duplicate: what the incident was, not the case's
        said = "production had made it before the case" if first.from_incident else baseline
        rows = _rows_of(evidence, pair)
        messages = {r.message for r in pair if r.message is not None}
        tasks = {r.task_id for r in pair if r.task_id is not None}
        tasks |= {a.task_id for a in rows if a.task_id} if not tasks else set()
        whose = "the same"
        if len(messages) == 1:
            whose = f"message {messages.pop()}'s"
        elif len(tasks) == 1:
            whose = f"task {tasks.pop()}'s"
        if all(r.idempotent for r in pair) and first.operation_key != second.operation_key:
            why = "it honours idempotency keys, so the keys differed"
        elif not any(r.idempotent for r in pair):
            why = "it has no idempotency"
        else:
            why = "the same effect was applied twice"
        violations.append(
            Violation(
                1,
                tuple(a.attempt_id for a in rows),
                f"{whose} {first.kind} happened twice at {first.provider} ({said}): "
                f"{first.request_id} at {_t(evidence, first.at)} by {first.sender} and "
                f"{second.request_id} at {_t(evidence, second.at)} by {second.sender}; "
                f"{first.provider}: {why}{_story(evidence, first, second)}.",
                tuple(_entry(evidence, r) for r in pair) + tuple(_row(a) for a in rows),
                requests=_refs(pair),
            )
        )
    return violations


# -- invariant 2 ------------------------------------------------------------------------------


def check_outcomes_agree(evidence: Evidence) -> list[Violation]:
    """Invariant 2: final states only, the ledger agrees with the journals, nothing dropped.

    From an incident: every row production left in flight must end in a final state; a row
    it finished that nothing of the case changed is its history, not checked against the
    providers (the export may hold none of its objects); the objects of other work (another
    task's, or nobody's) need no row."""
    violations = []
    linkable = evidence.reads_any(*LINK_COLUMNS)
    confirmed: list[tuple[Attempt, ProviderRequest]] = []  # each with its one effect
    for attempt in evidence.attempts:
        effects = [r for r in requests_of(attempt, evidence) if r.effect_applied]
        if attempt.state not in FINAL_STATES:
            violations.append(
                Violation(
                    2,
                    (attempt.attempt_id,),
                    f"{_describe(attempt)} ended {attempt.state.value} after the quiet phase, "
                    f"not CONFIRMED, FAILED or MANUAL_REVIEW (owner {attempt.owner}).",
                    (_row(attempt), *(_entry(evidence, e) for e in effects)),
                    requests=_refs(effects),
                )
            )
        elif not linkable:
            continue
        elif evidence.as_left(attempt):
            if attempt.state is State.OUTCOME_CONFIRMED and len(effects) == 1:
                confirmed.append((attempt, effects[0]))  # another row may take it too
            continue
        elif attempt.state is State.OUTCOME_CONFIRMED:
            effects, exact = effects_of(attempt, evidence)
            matching = [e for e in effects if e.args_hash in (None, attempt.args_hash)]
            if len(effects) == 1:
                confirmed.append((attempt, effects[0]))
            # A row that names only an object (its id) stands for that object's history: it
            # exists, and no operation of it happened twice.
            history = not exact and effects and len({e.kind for e in effects}) == len(effects)
            if not history and (len(effects) != 1 or len(matching) != 1):
                violations.append(
                    Violation(
                        2,
                        (attempt.attempt_id,),
                        f"{_describe(attempt)} is CONFIRMED but the provider has "
                        f"{len(effects)} effect(s) for what the row names "
                        f"({', '.join(sorted(_links(attempt, evidence))) or 'nothing'}), "
                        f"{len(matching)} with its arguments; CONFIRMED needs exactly one.",
                        (_row(attempt), *(_entry(evidence, e) for e in effects)),
                        requests=_refs(effects),
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
                    (_row(attempt), *(_entry(evidence, e) for e in effects)),
                    requests=_refs(effects),
                )
            )
    if linkable:
        violations += _unrecorded_effects(evidence)
        violations += _shared_effects(evidence, confirmed)
    violations += _dropped_work(evidence)
    return violations


def _shared_effects(
    evidence: Evidence, confirmed: Sequence[tuple[Attempt, ProviderRequest]]
) -> list[Violation]:
    """One effect that two CONFIRMED rows each take for their own (a key shared by two orders:
    the provider replays the first charge for the second, which is never made). The fault-free
    run has the same bug, so only this catches it. ``confirmed``: each CONFIRMED row with
    the one effect it names (a row naming any other count is reported already)."""
    owners: dict[int, list[Attempt]] = {}
    effect_of: dict[int, ProviderRequest] = {}
    for attempt, effect in confirmed:
        owners.setdefault(id(effect), []).append(attempt)
        effect_of[id(effect)] = effect
    violations = []
    for key, attempts in owners.items():
        # Two rows of the same work (a duplicate delivery that wrote a second row and got
        # the first one's answer replayed) stand for one effect rightly; rows of different
        # tasks or arguments each needed their own.
        if len({(a.task_id, a.tool_name, a.args_hash) for a in attempts}) < 2:
            continue
        if all(evidence.as_left(a) for a in attempts):
            continue  # production's rows as it left them: its history
        effect = effect_of[key]
        names = ", ".join(_describe(a) for a in attempts)
        violations.append(
            Violation(
                2,
                tuple(a.attempt_id for a in attempts),
                f"{len(attempts)} attempts are CONFIRMED by one and the same effect, "
                f"{effect.provider} {effect.request_id} ({effect.kind} by {effect.sender}): "
                f"{names}. Each needs an effect of its own; all but one were never done "
                "(a key or reference shared between different work?).",
                (*map(_row, attempts), _entry(evidence, effect)),
                requests=_refs([effect]),
            )
        )
    return violations


def _links(attempt: Attempt, evidence: Evidence) -> frozenset[str]:
    from .linking import stored_links

    return stored_links(attempt, evidence)


def _unrecorded_effects(evidence: Evidence) -> list[Violation]:
    """Effects no row names, unless a row that names nothing may stand for them (a row in
    review or failed that never learned what the provider did; a row in review whose key
    names no request at all: an incident's object made before the harness saw anything).
    An incident's object of other work (``history``) needs no row, nor does production's
    repeat of an object of its own that a row records (a duplicate that already happened:
    the incident, not the case's doing)."""
    violations = []
    for effect, standing in _unrecorded(evidence):
        if any(a.state is State.MANUAL_REVIEW for a in standing):
            continue  # set aside for a person, who will find out what happened
        failed = [a for a in standing if a.state is State.FAILED]
        if failed and all(not a.task_id for a in failed):
            continue  # whose work the row is cannot be told: NOT CHECKED (unaccounted)
        if failed:
            # FAILED is "proven not to have happened": a row of this task says so of work
            # the provider did, and no row records it.
            violations.append(
                Violation(
                    2,
                    tuple(a.attempt_id for a in failed),
                    f"{', '.join(_describe(a) for a in failed)} ended FAILED (proven not to "
                    f"have happened), but {effect.provider} applied {effect.request_id} at "
                    f"{_t(evidence, effect.at)} ({effect.kind} by {effect.sender}) for the "
                    "same task, and no attempt records it: the work happened and the ledger "
                    "says it did not.",
                    (*map(_row, failed), _entry(evidence, effect)),
                    requests=_refs([effect]),
                )
            )
            continue
        violations.append(
            Violation(
                2,
                (),
                f"{effect.provider} applied {effect.request_id} at {_t(evidence, effect.at)} "
                f"({effect.kind} by {effect.sender}) but no attempt in the ledger records it.",
                (_entry(evidence, effect),),
                requests=_refs([effect]),
            )
        )
    return violations


def _unrecorded(
    evidence: Evidence,
) -> list[tuple[ProviderRequest, list[Attempt]]]:
    """Each effect of the case no row names (production's history aside), with the rows
    that name nothing and could stand for it: in review or failed with no link, or in review
    whose links name no request, of its task (any task, for a row whose task is not read)."""
    recorded = {id(r) for a in evidence.attempts for r in requests_of(a, evidence)}
    blank = [
        a
        for a in evidence.attempts
        if (not _links(a, evidence) and a.state in (State.MANUAL_REVIEW, State.FAILED))
        or (a.state is State.MANUAL_REVIEW and not requests_of(a, evidence))
    ]
    found = []
    for effect in evidence.effects:
        if id(effect) in recorded or effect.process == "harness" or effect.history:
            continue
        if effect.from_incident and _repeats_recorded(effect, evidence, recorded):
            continue
        found.append((effect, [a for a in blank if not a.task_id or a.task_id == effect.task_id]))
    return found


def unaccounted(evidence: Evidence) -> list[str]:
    """What invariant 2 could not check in this case, row by row: an effect no row records
    whose only possible account is a FAILED row that names neither a request nor a task (its
    tie column empty, its task not read)."""
    if not evidence.reads_any(*LINK_COLUMNS):
        return []
    lines = []
    for effect, standing in _unrecorded(evidence):
        if any(a.state is State.MANUAL_REVIEW for a in standing):
            continue
        failed = [a for a in standing if a.state is State.FAILED]
        if failed and all(not a.task_id for a in failed):
            lines.append(
                f"invariant 2 (the ledger agrees with the provider): "
                f"{effect.provider} applied {effect.kind} for task {effect.task_id or '?'}, "
                f"and no row records it; FAILED row(s) "
                f"{', '.join(a.attempt_id for a in failed)} name no request and no task "
                "(their tie column empty, no task_id column read), so whether one of them "
                "is that work cannot be told: map task_id, or store the request id or key"
            )
    return lines


def _repeats_recorded(
    effect: ProviderRequest, evidence: Evidence, recorded: set[int]
) -> bool:
    """Whether production made ``effect``'s work before, in another effect a row records
    (the same operation at the same provider for the same task)."""
    return effect.task_id is not None and any(
        id(other) in recorded
        for other in evidence.effects
        if other is not effect
        and other.from_incident
        and (other.provider, other.kind, other.task_id)
        == (effect.provider, effect.kind, effect.task_id)
    )


def _dropped_work(evidence: Evidence) -> list[Violation]:
    """Effects of the fault-free run that this case never produced, with no ledger row in
    review or failed to account for them: a delivered message was silently dropped."""
    if evidence.expected_effects is None:
        return []
    missing = compare_with_baseline(evidence.expected_effects, evidence.effects).missing
    settled = [a for a in evidence.attempts if a.state in (State.MANUAL_REVIEW, State.FAILED)]
    no_ledger = evidence.ledger_columns is not None and not evidence.ledger_columns
    # Tasks whose authority the case changed (E): work not done for them may be work the
    # agent rightly refused. With no ledger, nothing can show that it set it aside, nor that
    # it dropped it: not checked (the summary's NOT CHECKED says the ledger was not read).
    changed = {c.task_id for c in evidence.authority_history if c.reason.startswith("E:")}
    violations = []
    for expected in missing:
        if no_ledger and expected.task_id in changed:
            continue
        accounted = [
            a
            for a in settled
            if not (evidence.reads("task_id") and expected.task_id) or a.task_id == expected.task_id
        ]
        if accounted:
            continue
        whose = f"message {expected.message}" if expected.message is not None else "a message"
        task = f" (task {expected.task_id})" if expected.task_id else ""
        where = "in the ledger"
        if evidence.ledger_columns is not None and not evidence.ledger_columns:
            # Ground truth says the work is missing; with no ledger, nothing can say where it
            # went (parked for a person is fine, but only a record can show it).
            where = (
                "that the harness can read: the case has no ledger view; if your agent parks "
                "such work, pass ledger_view= so its record can account for it"
            )
        violations.append(
            Violation(
                2,
                (),
                f"{whose}{task} was delivered and its {expected.operation} at "
                f"{expected.provider} (in the fault-free run: {expected.request_id}) was "
                "silently dropped: no effect at the provider and no attempt in review or failed "
                f"{where}.",
            )
        )
    return violations


# -- invariant 3 ------------------------------------------------------------------------------


def check_operator_visibility(evidence: Evidence) -> list[Violation]:
    """Invariant 3: arguments, their hash, and a real provider request id are visible."""
    # A provider names a request by its request id or by the id of what it created, in any
    # form its API shows.
    issued = {name for r in evidence.requests for name in r.identifiers}
    # What names an effect: a request that applied one, or a replay of it (the same key at
    # the same provider), by its request id or what it created. A read's own request id
    # names the read: a row CONFIRMED by a lookup stores what the lookup found, not that.
    keys = {(r.provider, r.operation_key) for r in evidence.requests if r.effect_applied}
    # A write made again that changed nothing (an idempotent retry, at a provider that keeps
    # no key) names the effect it repeats too.
    made = {(r.provider, r.journal_key) for r in evidence.requests if r.effect_applied}
    effects = {
        name
        for r in evidence.requests
        if r.effect_applied
        or (r.operation_key and (r.provider, r.operation_key) in keys)
        or (r.journal_key and r.status < 400 and (r.provider, r.journal_key) in made)
        for name in r.identifiers
    }
    args = evidence.reads("args_json") and evidence.reads("args_hash")
    request_ids = evidence.reads("provider_request_id")
    violations = []
    for attempt in evidence.attempts:
        if evidence.as_left(attempt):
            continue  # what production wrote, untouched by the case: not the case's to show
        problems = []
        if args:
            if not attempt.args_hash:
                problems.append("no arguments hash")
            elif not attempt.args:
                problems.append("no arguments recorded")
            elif hash_args(attempt.args) != attempt.args_hash:
                problems.append(
                    f"the recorded arguments hash to {_short(hash_args(attempt.args))}, not "
                    f"the recorded {_short(attempt.args_hash)}"
                )
        if request_ids:
            if attempt.state is State.OUTCOME_CONFIRMED and not attempt.provider_request_id:
                problems.append("CONFIRMED without a provider request id")
            stored = attempt.provider_request_id
            if stored and stored not in issued:
                problems.append(f"request id {stored!r} was never issued by the provider")
            elif stored and attempt.state is State.OUTCOME_CONFIRMED and stored not in effects:
                # Only a successful call that applied nothing: a read (a write refused or
                # failed is invariant 2's "CONFIRMED but the provider has 0 effects").
                named = [r for r in evidence.requests if stored in r.identifiers]
                if all(200 <= r.status < 300 and not r.effect_applied for r in named):
                    read = named[0]
                    problems.append(
                        f"CONFIRMED with request id {stored!r}, which names a read "
                        f"({read.provider} {read.kind} by {read.sender}), not the effect: "
                        "store the id of the write that made it, or of what it created"
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


# -- invariant 4 ------------------------------------------------------------------------------

_NO_HISTORY = object()


def _authority_at(evidence: Evidence, task_id: str, at: float) -> Authority | object | None:
    """The task's authority in force at ``at`` (None: revoked; _NO_HISTORY: never recorded)."""
    current: Authority | object | None = _NO_HISTORY
    for change in evidence.authority_history:
        if change.task_id == task_id and change.at <= at:
            current = change.authority
    return current


def _authority_text(authority: Authority) -> str:
    return (
        f"tenant {authority.tenant_id!r}, scope '{authority.scope_text}', policy "
        f"{authority.policy_version!r}"
    )


def _credential_problems(evidence: Evidence, request: ProviderRequest) -> list[str]:
    """What is wrong with the authority the harness issued the request's credential for,
    against what the task it served held at that moment (ground truth: no ledger needed)."""
    used = request.authority
    if used is None or request.process in (None, "harness"):
        return []
    if request.task_id is not None:
        tasks = [request.task_id]
    else:
        tasks = sorted({a.task_id for a in _rows_of(evidence, [request]) if a.task_id})
    held = [
        (task, at)
        for task in tasks
        if (at := _authority_at(evidence, task, request.at)) is not _NO_HISTORY
    ]
    if not held:
        # A recovery's request no row names: any task holding that authority will do.
        everyone = {c.task_id for c in evidence.authority_history}
        anyone = [_authority_at(evidence, task, request.at) for task in sorted(everyone)]
        if not anyone or any(h == used for h in anyone):
            return []
        return [
            f"made under {_authority_text(used)}, which no task held at "
            f"{_t(evidence, request.at)} "
            "(revoked or changed)"
        ]
    problems: list[str] = []
    for task, now in held:
        if now is None:
            problems.append(
                f"made at {_t(evidence, request.at)} for task {task} after its authority "
                "was revoked"
            )
        elif now != used and isinstance(now, Authority):
            problems.append(
                f"made at {_t(evidence, request.at)} for task {task} under "
                f"{_authority_text(used)}, "
                f"but the task then held {_authority_text(now)}"
            )
    return problems


def _ledger_problems(evidence: Evidence, request: ProviderRequest, attempt: Attempt) -> list[str]:
    """The request against the authority the attempt recorded (when the view reads it)."""
    problems = []
    if request.tenant_id is not None and request.tenant_id != attempt.authority.tenant_id:
        problems.append(
            f"made for tenant {request.tenant_id!r}, the attempt belongs to "
            f"{attempt.authority.tenant_id!r}"
        )
    wider = request.scope - attempt.authority.credential_scope
    if request.tenant_id is not None and wider:
        problems.append(f"made with scope wider than the attempt's: {format_scope(wider)}")
    if request.authority is None:
        in_force = _authority_at(evidence, attempt.task_id, request.at)
        if in_force is None:
            problems.append(
                f"made at {_t(evidence, request.at)} after the task's authority was revoked"
            )
        elif isinstance(in_force, Authority) and in_force != attempt.authority:
            problems.append(
                f"made at {_t(evidence, request.at)} under authority that had changed (now "
                f"{_authority_text(in_force)})"
            )
    return problems


def _refused_unauthenticated(request: ProviderRequest) -> bool:
    """A request the provider refused (401) for a credential it issued to no one: the key a
    task gets once its authority is revoked, or none at all. It carried no authority, so it
    was made under none, and applied nothing: no request of the task's, whatever ids its
    client attached (a correlation header naming the attempt)."""
    return (
        request.authority is None
        and request.process is None
        and request.status == 401
        and not request.effect_applied
    )


def check_authority(evidence: Evidence) -> list[Violation]:
    """Invariant 4: every request within the tenant and scope of its task's authority at
    that moment, never under authority that was revoked or changed."""
    with_authority = evidence.reads("tenant_id", "credential_scope", "policy_version")
    violations = []
    for request in evidence.requests:
        if request.from_incident:
            continue  # production's own request, under its authority: not the case's
        if _refused_unauthenticated(request):
            continue
        rows = _rows_of(evidence, [request])
        problems = _credential_problems(evidence, request)
        if with_authority:
            for attempt in rows:
                more = _ledger_problems(evidence, request, attempt)
                problems += [p for p in more if p not in problems]
        if problems:
            who = f" of {_describe(rows[0])}" if rows else ""
            violations.append(
                Violation(
                    4,
                    tuple(a.attempt_id for a in rows),
                    f"{request.provider} request {request.request_id}{who} by {request.sender} "
                    f"was {'; '.join(problems)}.",
                    (_entry(evidence, request), *map(_row, rows)),
                    requests=_refs([request]),
                )
            )
    return violations


# -- invariant 5 ------------------------------------------------------------------------------


def check_queue_visibility(evidence: Evidence) -> list[Violation]:
    """Invariant 5: at every observation, in-flight work is in the queue and has an owner."""
    owners = evidence.reads("owner")
    reported: set[str] = set()
    violations = []
    for seen in evidence.observations:
        queued = {entry.attempt_id for entry in seen.queue}
        for attempt in seen.attempts:
            if not attempt.in_flight or attempt.attempt_id in reported:
                continue
            if evidence.as_left(attempt):
                # Production's row as it left it (invariant 2 judges whether the case ends it).
                continue
            problems = []
            if owners and not attempt.owner:
                problems.append("has no owner")
            if attempt.attempt_id not in queued:
                problems.append("is missing from the queue")
            if problems:
                reported.add(attempt.attempt_id)
                violations.append(
                    Violation(
                        5,
                        (attempt.attempt_id,),
                        f"after step {seen.step} ({seen.label}, {_t(evidence, seen.at)}) "
                        f"{_describe(attempt)} is {attempt.state.value} and "
                        f"{' and '.join(problems)}.",
                        (_row(attempt),),
                    )
                )
    return violations


# -- invariant 6 ------------------------------------------------------------------------------


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
                    tuple(_entry(evidence, r) for r in effects),
                    requests=_refs(effects),
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


# -- invariants of your own -----------------------------------------------------------------


def invariant_name(check: object) -> str:
    """The name an invariant of your own goes by: its function's name."""
    target = check.func if isinstance(check, functools.partial) else check
    name = getattr(target, "__name__", None) or type(target).__name__
    return str(name)


def _title(check: object) -> str:
    target = check.func if isinstance(check, functools.partial) else check
    doc = inspect.getdoc(target)
    return doc.strip().splitlines()[0].rstrip(".") if doc else invariant_name(check)


def check_invariants(checks: Sequence[object]) -> None:
    """Raise :class:`HarnessUsageError` (one line) unless ``checks`` are invariants of your own:
    callables taking the evidence, each under a name of its own."""
    seen: set[str] = set()
    for check in checks:
        if not callable(check):
            raise HarnessUsageError(
                f"invariants=[..., {check!r}, ...]: {check!r} is not callable; an invariant "
                "is a function check(evidence) that returns the violations it finds."
            )
        name = invariant_name(check)
        if name in seen:
            raise HarnessUsageError(
                f"invariants: two invariants are named {name!r}; give each function a name of "
                "its own (reports, expect= and the summary know an invariant by its name)."
            )
        if name.isdigit():
            raise HarnessUsageError(
                f"invariants: {name!r} is a number; the six are 1 to 6, name yours in words."
            )
        seen.add(name)
        try:
            inspect.signature(check).bind(object())
        except TypeError as exc:
            raise HarnessUsageError(
                f"invariants: {name} cannot be called as {name}(evidence) ({exc}); give it "
                "one parameter, the case's Evidence."
            ) from None
        except ValueError:  # no signature to read (a builtin): it will tell when called
            continue


def check_own(evidence: Evidence, checks: Iterable[Invariant]) -> tuple[list[Violation], list[str]]:
    """Run invariants of your own on ``evidence``: the violations they found (named for the
    invariant that found them), and a harness error line for each that raised."""
    found: list[Violation] = []
    errors: list[str] = []
    for check in checks:
        name, title = invariant_name(check), _title(check)
        try:
            for item in check(evidence) or ():
                if isinstance(item, Violation):
                    found.append(dataclasses.replace(item, invariant=name, title=title))
                elif isinstance(item, str):
                    found.append(Violation(name, (), item, (), title))
                else:
                    raise TypeError(
                        f"it returned {item!r}; return Violation(...) objects or messages (str)"
                    )
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            errors.append(
                f"the invariant {name} raised {type(exc).__name__}: {exc} (at "
                f"{where.filename}:{where.lineno}); an invariant must return what it finds, "
                "never raise"
            )
    return found, errors


def invariant_key(invariant: int | str) -> tuple[int, int, str]:
    """Orders invariants: the six by number, then your own by name."""
    if isinstance(invariant, int):
        return (0, invariant, "")
    return (1, 0, invariant)


def unchecked(ledger_columns: frozenset[str] | None) -> list[str]:
    """What the checks above could not look at, for a ledger view that reads only
    ``ledger_columns`` (``None``: every column; an empty set: no ledger at all)."""
    if ledger_columns is None:
        return []
    evidence = Evidence((), (), (), ledger_columns=ledger_columns)
    skipped = []
    if not ledger_columns:
        return [
            "invariants 2, 3 and 5 on the ledger: the case has no ledger (pass ledger_view= "
            "to read your own; only the providers' ground truth was checked, against the "
            "fault-free run)"
        ]
    if not evidence.reads_any(*LINK_COLUMNS):
        skipped.append(
            "invariant 2 (the ledger agrees with the provider): no idempotency_key, "
            "provider_request_id or result_ref column ties rows to requests"
        )
    if not (evidence.reads("args_json") and evidence.reads("args_hash")):
        skipped.append("invariant 3 (arguments): no args_json column")
    if not evidence.reads("provider_request_id"):
        skipped.append("invariant 3 (request ids): no provider_request_id column")
    if not evidence.reads("tenant_id", "credential_scope", "policy_version"):
        skipped.append(
            "invariant 4 against the authority each row recorded: no tenant, scope and policy "
            "columns, nor authority_of= (the credentials the harness issued were checked)"
        )
    if not evidence.reads("owner"):
        skipped.append("invariant 5 (an owner): no owner column")
    return skipped
