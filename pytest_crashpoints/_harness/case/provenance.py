"""Whose each object of an incident is, and on what evidence.

An export lists what a provider held: the charges of a customer, the issues of a repository,
the e-mails to an address. Some of them are the work the case finishes (what the redelivered
messages, and the rows production left in flight, were doing); the rest is history: another
task's objects, or objects nothing ties to any task. The harness never guesses: an object
belongs to a task only on evidence, in this order:

1. the export says so (the fakes' own format's ``task_id``);
2. a row of the incident's ledger names it (its id, its idempotency key as the export gives
   it, an issue's number or URL, in the row's ``idempotency_key``, ``provider_request_id`` or
   ``result_ref``), or it carries the row's idempotency key (in its metadata or custom args,
   as the reference adapters send it): the row's task;
3. the object names a task of the incident (a message's, or a row's): a value of Stripe's
   ``metadata``, SendGrid's custom args (``unique_args``), a GitHub issue's label, or the
   task id as a word of its title or body.

An object that names no task of the incident but holds a value under a field that names one
in another object (``metadata order_id``) is the history of that value's task; anything
else is history of no task. How each object was read is said in the timeline and in every
violation that shows it (:class:`Reading`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fake_providers import Exported

    from ..._ledger.records import Attempt

__all__ = ["Reading", "read_objects", "task_of"]

#: The ledger columns that may name an object (as the checks tie rows to requests).
_LINKS = ("idempotency_key", "provider_request_id", "result_ref")
#: The fields of an object's body whose values name its work, and how a reader calls them.
_KEYED = (("metadata", "metadata"), ("unique_args", "custom args"))
#: The text fields of an object (a GitHub issue's) in which a task id may be a word.
_TEXTS = ("title", "body")


@dataclasses.dataclass(frozen=True)
class Reading:
    """How the harness read one object of an incident.

    ``task``: the task it belongs to (``None``: none that anything names); ``work``: whether
    it is the case's work (a redelivered message's task, or the task of a row production
    left in flight): the case must account for it, and repeating it is a duplicate;
    otherwise it is history, never the case's effect. ``evidence`` says why.
    """

    object_id: str
    task: str | None
    work: bool
    evidence: str

    @property
    def text(self) -> str:
        """One line: ``ch_9: ord-7's effect: ledger row 3 names it in its result_ref``,
        ``pi_1: history of ord-8 (metadata order_id)``."""
        if self.work:
            return f"{self.object_id}: {self.task}'s effect: {self.evidence}"
        if self.task:
            return f"{self.object_id}: history of {self.task} ({self.evidence})"
        return f"{self.object_id}: history: {self.evidence}"


def read_objects(
    objects: Sequence[Exported], rows: Sequence[Attempt], messages: Sequence[str]
) -> list[Reading]:
    """The reading of each of ``objects`` (in order), given the incident's ledger ``rows``
    and the tasks of the messages the case redelivers (``messages``)."""
    known = list(dict.fromkeys([*messages, *(task_of(row) for row in rows)]))
    work = set(messages) | {task_of(row) for row in rows if row.in_flight}
    found = [_direct(obj, rows, known, work) for obj in objects]
    # The fields that named a task somewhere: the same field in another object names that
    # object's task, even one the incident holds no row of.
    fields = {
        field
        for obj, reading in zip(objects, found, strict=True)
        if reading is not None and reading.task is not None
        for field, value in _keyed(obj.body)
        if value == reading.task
    }
    out = []
    for obj, reading in zip(objects, found, strict=True):
        if reading is None:
            reading = _by_field(obj, fields) or Reading(
                obj.object_id, None, False, "no ledger row names it, and it names no task"
            )
        out.append(reading)
    return out


def _direct(
    obj: Exported, rows: Sequence[Attempt], known: Sequence[str], work: set[str]
) -> Reading | None:
    """The reading of ``obj`` from the export, a row, or a task it names (``None``: none)."""
    if obj.task_id is not None:
        return Reading(obj.object_id, obj.task_id, obj.task_id in work, "the export names it")
    keyed = dict(_keyed(obj.body))
    for row in rows:
        task = task_of(row)
        mine = row.in_flight or task in work
        for column in _LINKS:
            value = getattr(row, column)
            if value and str(value) in obj.names:
                said = f"ledger row {row.attempt_id} names it in its {column}"
                return Reading(obj.object_id, task, mine, said)
        for field, value in keyed.items():  # it carries the key the row dispatched it with
            if row.idempotency_key and value == row.idempotency_key:
                said = f"its {field} is ledger row {row.attempt_id}'s idempotency key"
                return Reading(obj.object_id, task, mine, said)
    named = _named(obj.body)
    for task in known:
        where = named(task)
        if where is not None:
            return Reading(obj.object_id, task, task in work, where)
    return None


def task_of(row: Attempt) -> str:
    """The task of a row of the incident: its ``task_id``, or, for a view that reads none,
    the row itself (its attempt id): the unit of work it records."""
    return row.task_id or row.attempt_id


def _by_field(obj: Exported, fields: Iterable[str]) -> Reading | None:
    wanted = set(fields)
    for field, value in _keyed(obj.body):
        if field in wanted:
            return Reading(obj.object_id, value, False, field)
    return None


def _keyed(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, value)`` of what an object carries to name its work: each value of Stripe's
    ``metadata`` (``"metadata order_id"``) and SendGrid's ``unique_args``."""
    out = []
    for name, said in _KEYED:
        values = body.get(name)
        if isinstance(values, Mapping):
            out += [
                (f"{said} {key}", str(value))
                for key, value in values.items()
                if isinstance(value, (str, int)) and not isinstance(value, bool)
            ]
    return out


def _named(body: Mapping[str, Any]) -> Callable[[str], str | None]:
    """A function of a task id: where ``body`` names it (``None``: nowhere)."""
    keyed = _keyed(body)
    labels = body.get("labels")
    names = [str(v) for v in labels if isinstance(v, str)] if isinstance(labels, list) else []
    texts = [(field, body[field]) for field in _TEXTS if isinstance(body.get(field), str)]

    def where(task: str) -> str | None:
        for field, value in keyed:
            if value == task:
                return field
        if task in names:
            return f"label {task}"
        word = re.compile(rf"(?<![\w-]){re.escape(task)}(?![\w-])")
        for field, text in texts:
            if word.search(text):
                return f"its {field} names it"
        return None

    return where
