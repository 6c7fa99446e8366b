"""The world's objects of a described provider: where they are kept, how they are named, found
and shown.

:class:`WorldObjects` is the base of :class:`~fake_providers._described.engine.DescribedProvider`:
every object an operation makes is an effect in the journal (a later version of it
``<name>~<request number>``), read back as its latest version; it is named by the field its item
paths give (``id``, GitHub's ``number``, a label's ``name``) and placed under the path parameters
it was made under (a comment's repository); answers show it as the description's schema
documents it (``shapes.py``), through the hooks a provider writes by hand (``present``,
``aliases``...).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .._descriptions import load
from .._journal import next_counter
from .._provider import Call, Provider, Reply, Route, json_body
from .listing import Style
from .operations import Document, Operation
from .shapes import instance, shaped

__all__ = ["Beyond", "Refused", "WorldObjects", "document", "operations", "public"]

#: A later version of an object is journaled as ``<id>~<request number>``.
_VERSION = re.compile(r"~\d+$")


@functools.cache
def document(name: str) -> Document:
    """The vendored description ``name``, read once per process."""
    return Document(load(name))


@functools.cache
def operations(name: str) -> tuple[Operation, ...]:
    """Every operation of the vendored description ``name``, in matching order."""
    return tuple(document(name).operations())


class Beyond(Exception):
    """A request beyond the description: the world's limit (``what``, in words)."""

    def __init__(self, what: str, *, status: int = 400, code: str = "parameter_unknown") -> None:
        super().__init__(what)
        self.status, self.code = status, code


class Refused(Exception):
    """A request the real service refuses (a 400, 404, 409 in its own format)."""

    def __init__(self, status: int, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def public(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object's fields without the engine's own (``_path``, ``_created``...)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}



class WorldObjects(Provider):
    """The objects of a described provider (see the module docstring)."""

    #: The vendored description it serves (``fake_providers._descriptions``).
    description: ClassVar[str]
    #: How its lists page.
    style: ClassVar[Style] = "plain"
    #: The header that makes a write idempotent, if the service has one.
    idempotency_header: ClassVar[str | None] = None
    #: A search's result type, and the type of the objects it searches.
    searched: ClassVar[Mapping[str, str]] = {}
    #: The status of a request the service finds invalid (a field missing): GitHub's 422.
    invalid_status: ClassVar[int] = 400
    #: Whether an action is a state change made once (Stripe's ``confirm``), or a change
    #: that may be made again (GitHub's adding assignees to an issue: a set).
    actions_once: ClassVar[bool] = False

    # -- what a subclass writes by hand ---------------------------------------------------

    def own_routes(self) -> list[Route]:
        """The operations served by hand (they win over the description's of the same
        method and path). None by default."""
        return []

    def present(self, call: Call, object_type: str, obj: dict[str, Any]) -> dict[str, Any]:
        """An object as the service shows it now, before its schema renders it (links, counts
        read from other objects). As stored, by default."""
        return obj

    def act(self, call: Call, op: Operation, verb: str, obj: dict[str, Any],
            body: dict[str, Any]) -> dict[str, Any]:
        """What action ``verb`` does to ``obj``: the object after it. By default the body's
        fields are merged in. Raise :class:`Refused` for a state that refuses it."""
        return {**obj, **body}

    def search_predicate(self, op: Operation, call: Call, body: Mapping[str, Any]
                         ) -> Callable[[Mapping[str, Any]], bool]:
        """Which objects a search finds: by default, every word of its ``q`` or ``query``
        (parameter or body field) in the object's text. Raise :class:`Refused` for a query
        the service refuses."""
        text = str(call.query.get("q") or call.query.get("query") or body.get("query") or "")
        words = text.lower().split()

        def found(obj: Mapping[str, Any]) -> bool:
            shown = json.dumps(public(obj)).lower()
            return all(word in shown for word in words)

        return found

    def new_id(self, call: Call, object_type: str, integer: bool) -> str | int:
        """The id of a new object of ``object_type``: a count for an integer id, else the
        type's prefix (Stripe's ``cus``) and the request's number."""
        if integer:
            with self.journal.transaction() as conn:
                return 1000 + next_counter(conn, f"ids:{object_type}")
        schema = self._schema(object_type)
        declared = document(self.description).resolve(
            (schema.get("properties") or {}).get("id") or {})
        if declared.get("format") == "uuid" or declared.get("minLength") == 36:
            return f"00000000-0000-4000-8000-{call.seq:012d}"  # a UUID, as the schema says
        prefix = schema.get("x-crashpoints-id-prefix") or re.sub(
            r"[^a-z0-9]+", "_", object_type.lower().rsplit("/", 1)[-1]).strip("_")[:12]
        made = f"{prefix}_{call.seq:024d}"
        longest = declared.get("maxLength")
        return made if not isinstance(longest, int) else made[-longest:].lstrip("_0") or made

    # -- the world's objects ---------------------------------------------------------------

    def _schema(self, object_type: str) -> dict[str, Any]:
        """The schema of ``object_type``: its component, or, for objects a description names
        by their path (its answers written in place), what its create or read answers."""
        return _schema_of(self.description, object_type)

    def _id_field(self, op: Operation, object_type: str) -> str:
        """The field of ``object_type`` its item paths name it by (``op``'s last parameter)."""
        properties = self._schema(object_type).get("properties") or {}
        param = op.id_param
        if param is not None:
            if param in properties:
                return param
            if param.endswith("_number") and "number" in properties:
                return "number"
            if "id" in properties or not properties:
                return "id"
            return "_id"  # the schema shows no id: the engine keeps its own
        return "id" if "id" in properties or not properties else next(
            (p for p in properties if p.endswith("_id")), "_id")

    def objects(self, call: Call, object_type: str, *, lags: bool = False
                ) -> list[dict[str, Any]]:
        """Every object of ``object_type`` of the caller's tenant as its latest version left
        it, oldest first (as a lagging search sees them, when ``lags``), deleted ones not."""
        rows = self.effect_rows(call, object_type, lags=lags, columns="object_id, body")
        latest: dict[str, dict[str, Any]] = {}
        for row in rows:
            key = _VERSION.sub("", row["object_id"])
            body = {**json.loads(row["body"]), "_key": key}
            latest.pop(key, None)
            latest[key] = body
        return [body for body in latest.values() if not body.get("_deleted")]

    def current(self, call: Call, object_type: str, key: str) -> dict[str, Any] | None:
        """The object the journal names ``key`` (its first version's id), as its latest
        version left it; ``None`` when there is none, or it was deleted."""
        return next((o for o in self.objects(call, object_type) if o["_key"] == key), None)

    def journal_id(self, call: Call, op: Operation, values: Mapping[str, str],
                   obj: Mapping[str, Any], field: str) -> str:
        """The journal's name of a new object: its id, after the path parameters that place
        it (``acme/shop#7``); an id the request chose (a label's name, an e-mail address) also
        after the tenant, since another tenant may choose it too."""
        parents = "/".join(values[p] for p in op.parents if p in values)
        object_id = str(obj.get(field))
        if parents:
            return f"{parents}#{object_id}"
        return f"{call.tenant_id}:{object_id}" if obj.get("_chosen") else object_id

    def next_number(self, call: Call, values: Mapping[str, str]) -> int:
        """The ``number`` of a new object placed under ``values`` (GitHub's issue and pull
        request numbers: one count per repository)."""
        scope = "/".join(values.values())
        with self.journal.transaction() as conn:
            return next_counter(conn, f"numbers:{call.tenant_id}:{scope}")

    def placement(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """The path parameters that placed ``obj`` (the repository of a comment), by name."""
        placed: Mapping[str, Any] = obj.get("_path") or {}
        return placed

    def _placed(self, op: Operation, values: Mapping[str, str], obj: Mapping[str, Any]) -> bool:
        placed = self.placement(obj)
        return all(str(placed[p]) == values[p] for p in op.parents if p in placed and p in values)

    def revise(self, call: Call, object_type: str, before: Mapping[str, Any],
               after: dict[str, Any]) -> dict[str, Any]:
        """What else an update changes (an issue closed gets its ``closed_at``). Nothing
        more, by default."""
        return after

    def find(self, op: Operation, call: Call, values: Mapping[str, str]
             ) -> dict[str, Any] | None:
        """The object ``op``'s path names (``values``: its path parameters), if it exists."""
        object_type = op.object_type or op.collection
        field = self._id_field(op, object_type)
        wanted = values.get(op.id_param or "")
        for obj in reversed(self.objects(call, object_type)):
            if str(obj.get(field)) == wanted and self._placed(op, values, obj):
                return dict(obj)
        return None

    def _missing(self, op: Operation, values: Mapping[str, str]) -> Refused:
        noun = (op.object_type or "object").rsplit("/", 1)[-1]
        return Refused(404, f"No such {noun}: '{values.get(op.id_param or '', '')}'",
                       code="resource_missing")

    # -- answers -----------------------------------------------------------------------------

    def render(self, call: Call, schema: Any, object_type: str, obj: dict[str, Any]) -> Any:
        """``obj`` as an answer shows it: :meth:`present`, its times, through ``schema``."""
        doc = document(self.description)
        shown = self.present(call, object_type, dict(obj))
        node = doc.resolve(schema) if schema is not None else {}
        properties = (node.get("properties") or {}) if isinstance(node, Mapping) else {}
        created = float(obj.get("_created", call.wall))
        updated = float(obj.get("_updated", created))
        for name, at in (("created", created), ("created_at", created),
                         ("updated_at", updated)):
            if name in properties and name not in shown:
                kind = doc.resolve(properties[name]).get("type")
                shown[name] = int(at) if kind in ("integer", "number") or kind == [
                    "integer"] else _time_text(at, doc.resolve(properties[name]))
        rendered = shaped(doc, schema, public(shown))
        if isinstance(rendered, dict) and node.get("additionalProperties") is not False:
            # What the world holds beyond the description (a field of a newer API version,
            # in an object exported from production) is shown as it is.
            rendered.update({k: v for k, v in public(shown).items() if k not in rendered
                             and k not in properties and k != "deleted"})
        return rendered

    def documented(self, method: str, template: str, body: Any) -> Any:
        """``body`` (an answer built by hand: a search's envelope) in the shape the
        description documents for ``method template``'s success."""
        op = next(o for o in operations(self.description)
                  if o.method == method and o.template == template)
        return shaped(document(self.description), op.response, body)

    def _answer(self, op: Operation, call: Call, obj: dict[str, Any] | None,
                *, status: int | None = None) -> Reply:
        status = status or op.status
        if op.response is None:
            return Reply(status, b"", {})
        if obj is None:
            body = instance(document(self.description), op.response)
        else:
            body = self.render(call, op.response, op.object_type or op.collection, obj)
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def aliases(self, call: Call, obj: Mapping[str, Any], field: str) -> tuple[str, ...]:
        """The names an answer gives the object it made or found (the journal's
        ``aliases``): its id, the request's path and URL."""
        object_id = str(obj.get(field, ""))
        path = call.request.url.path
        return tuple(dict.fromkeys(n for n in (object_id, path, f"{call.origin}{path}") if n))

@functools.cache
def _schema_of(description: str, object_type: str) -> dict[str, Any]:
    doc = document(description)
    try:
        found = doc.resolve(doc.schema(object_type))
    except KeyError:
        found = next(
            (doc.resolve(op.response) for op in operations(description)
             if op.object_type == object_type and op.kind in ("create", "retrieve")
             and isinstance(doc.resolve(op.response), Mapping)
             and doc.resolve(op.response).get("properties")),
            {},
        )
    return dict(found) if isinstance(found, Mapping) else {}


def doc_type(schema: Any) -> str | None:
    """The first JSON type a (resolved) property schema names."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else None


def _time_text(seconds: float, schema: Mapping[str, Any]) -> str:
    """Harness (Unix) seconds as the text ``schema`` documents a time in: ISO 8601, or the
    form its ``pattern`` asks for (SendGrid's ``2026-01-01 00:00:00``)."""
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    pattern = schema.get("pattern")
    for form in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        text = moment.strftime(form)
        if not isinstance(pattern, str) or re.search(pattern, text):
            return text
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
