"""A provider that serves a published API description: every operation, as documented.

:class:`DescribedProvider` is the base of the bundled providers. Its routes are the operations
of its vendored description (``operations.py``), after the routes its subclass writes by hand
(``own_routes``: what the real service does beyond its description: idempotency as Stripe keeps
it, refunds bounded by what is left, a decline, a search's own language). Every other operation
is served from the world's state by what it is:

- a ``create`` makes a new object (its id generated as the service makes them, its fields the
  request's, rendered as the schema documents), an effect in the journal;
- ``retrieve`` finds an object by the parameter that ends its path, within the objects placed
  under the same path parameters (an issue's comments under its repository), or answers 404;
- ``update``/``replace`` write a new version of it (an effect), unless nothing changes (an
  idempotent retry is no second effect); ``delete`` removes it (an effect; a second delete
  answers 404); an ``action`` (``confirm``, ``capture``, ``cancel``) changes it once: made
  again, it is refused as the state machine refuses it, with no effect;
- ``list`` pages the objects as the service does (``listing.py``); ``search`` does too, from
  what its lag lets it see; ``read`` answers the shape the schema documents;
- any other ``write`` is an effect on what its path names, made once for the same body.

What the description does not have is the world's limit (``Provider.unserved``): a route, a
query parameter, a body field or a media type it does not document, and a filter the objects
have no field for. Answers carry exactly the fields their schema documents (``shapes.py``).
With ``idempotency_header``, every write honours it as Stripe does (``_idempotency.py``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .._descriptions import load
from .._idempotency import release, reserve, saver
from .._journal import next_counter
from .._provider import (
    CORRELATION_HEADER,
    Call,
    EffectDraft,
    Provider,
    Reply,
    Route,
    json_body,
    json_document,
    payload_hash,
)
from .forms import parse_form
from .listing import PAGING, ListError, Page, Style, filters, matches, paged
from .operations import Document, Operation
from .shapes import coerce, instance, shaped

__all__ = ["DescribedProvider", "document", "operations"]

#: A later version of an object is journaled as ``<id>~<request number>``.
_VERSION = re.compile(r"~\d+$")
_FORM = "application/x-www-form-urlencoded"


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


class DescribedProvider(Provider):
    """Base of a provider that serves a vendored description (see the module docstring)."""

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

    # -- routes ------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        own = self.own_routes()
        out = list(own)
        for op in operations(self.description):
            sample = re.sub(r"\{[^}/]+\}", "x1", op.template)
            if any(r.method == op.method and r.pattern.fullmatch(sample) for r in own):
                continue
            reads = op.method == "GET" or op.kind == "search"
            out.append(Route(
                op.method, op.pattern, self.operation_name(op), "lookup" if reads else "write",
                f"{self.name}:{'read' if reads else 'write'}", self._handler(op),
                search=op.kind == "search",
            ))
        return out

    def operation_name(self, op: Operation) -> str:
        """The operation's name in the journal: ``<collection>.<verb>`` from its path
        (``payment_intents.confirm``, ``issues.comments.create``)."""
        static = [p for p in op.template.strip("/").split("/") if p and not p.startswith("{")]
        static = [p for p in static if not re.fullmatch(r"v\d+", p) and p != "repos"]
        if op.kind == "action":
            return ".".join(static) if static else op.operation_id
        verb = {"retrieve": "retrieve", "list": "list", "search": "search", "create": "create",
                "update": "update", "replace": "replace", "delete": "delete"}.get(op.kind)
        if verb is None:
            verb = {"GET": "get", "POST": "post", "PUT": "put", "PATCH": "patch",
                    "DELETE": "delete"}[op.method]
        if op.kind == "search" and static and static[-1] == "search":
            static = static[:-1]
        return ".".join([*static, verb])

    def _handler(self, op: Operation) -> Callable[[Call], Reply]:
        def handle(call: Call) -> Reply:
            try:
                return self._serve(op, call)
            except Beyond as exc:
                return self.unserved(
                    f"{call.request.method} {call.request.url.path}: {exc}",
                    status=exc.status, code=exc.code,
                )
            except Refused as exc:
                return self._documented_error(op, self.error(exc.status, str(exc), code=exc.code))
            except ListError as exc:
                refused = self.error(400, str(exc), code="parameter_invalid")
                return self._documented_error(op, refused)

        return handle

    def _documented_error(self, op: Operation, reply: Reply) -> Reply:
        """An error answer in the shape ``op`` documents for its status, where it documents
        one (SendGrid's errors differ from one operation to the next)."""
        schema = op.errors.get(reply.status)
        if schema is None or not reply.body:
            return reply
        body = shaped(document(self.description), schema, json.loads(reply.body))
        reply.body = json_body(body)
        return reply

    # -- one request -------------------------------------------------------------------------

    def _serve(self, op: Operation, call: Call) -> Reply:
        values = op.path_values(call.request.url.path) or {}
        query = self._query(op, call)
        body = self._body(op, call) if op.method != "GET" else {}
        if op.object_type and body and op.kind != "search":
            # Form fields are strings: stored in the types the object's schema gives them.
            schema = self._schema(op.object_type)
            if schema:
                body = coerce(document(self.description), schema, body)
        kind = op.kind
        if kind == "retrieve":
            return self._serve_retrieve(op, call, values)
        if kind in ("list", "search"):
            return self._serve_list(op, call, values, query, body)
        if kind == "read":
            return self._answer(op, call, None)
        phash = payload_hash({"path": call.request.url.path, "body": body})
        if phash is None:
            raise Refused(400, "The request body holds values that are not JSON.")
        writers: dict[str, Callable[[], Reply]] = {
            "create": lambda: self._serve_create(op, call, values, body),
            "update": lambda: self._serve_update(op, call, values, body, replace=False),
            "replace": lambda: self._serve_update(op, call, values, body, replace=True),
            "delete": lambda: self._serve_delete(op, call, values),
            "action": lambda: self._serve_action(op, call, values, body),
        }
        if kind == "action" and not self.actions_once:
            del writers["action"]
        write = writers.get(kind, lambda: self._serve_write(op, call, values, body))
        return self._keyed(call, phash, write)

    def _query(self, op: Operation, call: Call) -> list[tuple[str, str]]:
        pairs = [(k, v) for k, v in call.request.url.params.multi_items()]
        for name, _ in pairs:
            base = name.split("[", 1)[0]
            if base not in op.query:
                raise Beyond(f"the query parameter {base!r}")
        missing = sorted(op.required_query - {n.split("[", 1)[0] for n, _ in pairs})
        if missing:
            raise Refused(self.invalid_status, f"Missing required parameter: {missing[0]}.",
                          code="parameter_missing")
        return pairs

    def _body(self, op: Operation, call: Call) -> dict[str, Any]:
        raw = call.request.content
        media = call.media_type
        if not raw.strip() or raw.strip() in (b"{}",):
            data: Any = {}
        elif op.media_types and media not in op.media_types and not (
            media == "" and "application/json" in op.media_types
        ):
            raise Beyond(f"a body of media type {media or 'none'!r} (it takes "
                         f"{', '.join(op.media_types)})", status=415, code="unsupported_media_type")
        elif not op.media_types:
            raise Beyond("a request body, which this operation does not take")
        elif media == _FORM:
            try:
                data = parse_form(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise Refused(400, f"Invalid request body: {exc}.") from None
        else:
            try:
                data = json_document(raw)
            except ValueError:
                raise Refused(400, "The request body is not valid JSON.") from None
        if not isinstance(data, dict):
            return {"_items": data} if isinstance(data, list) else {}
        schema = op.body or {}
        properties = schema.get("properties")
        if isinstance(properties, Mapping) and properties and schema.get(
                "additionalProperties") in (None, False):
            for name in data:
                if name not in properties and not (media == _FORM and name == "expand"):
                    raise Beyond(f"the body field {name!r}")
        for name in schema.get("required") or ():
            if data.get(name) in (None, ""):
                raise Refused(self.invalid_status, f"Missing required param: {name}.",
                              code="parameter_missing")
        data.pop("expand", None)
        return data

    # -- the world's objects ---------------------------------------------------------------

    def _schema(self, object_type: str) -> dict[str, Any]:
        doc = document(self.description)
        try:
            found = doc.resolve(doc.schema(object_type))
        except KeyError:
            return {}
        return dict(found) if isinstance(found, Mapping) else {}

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

    # -- reads -------------------------------------------------------------------------------

    def _serve_retrieve(self, op: Operation, call: Call, values: Mapping[str, str]) -> Reply:
        obj = self.find(op, call, values)
        node = document(self.description).resolve(op.response)
        if isinstance(node, Mapping) and node.get("type") == "array":
            # A read by id that answers a list (SendGrid's bounces of an address): the
            # objects it names, none when there are none.
            found = [] if obj is None else [obj]
            return self._envelope(op, call, op.object_type or op.collection,
                                  Page(found, has_more=False))
        if obj is None:
            raise self._missing(op, values)
        reply = self._answer(op, call, obj)
        field = self._id_field(op, op.object_type or op.collection)
        reply.object_id = str(obj.get(field))
        reply.aliases = self.aliases(call, obj, field)
        return reply

    def _serve_list(self, op: Operation, call: Call, values: Mapping[str, str],
              query: list[tuple[str, str]], body: Mapping[str, Any]) -> Reply:
        object_type = op.object_type or op.collection
        object_type = self.searched.get(object_type, object_type)
        found = [o for o in self.objects(call, object_type, lags=op.kind == "search")
                 if self._placed(op, values, o)]
        if op.kind == "search":
            found = [o for o in found if self.search_predicate(op, call, body)(o)]
        else:
            defaults = {name: str(schema["default"]) for name, schema in op.query.items()
                        if isinstance(schema, Mapping) and "default" in schema
                        and name not in PAGING[self.style]}
            wanted, unknown = filters(query, self.style, op.query, found, defaults=defaults)
            if unknown:
                raise Beyond(f"the filter {unknown[0]!r} (the fake has no such field to "
                             "filter by)")
            found = [o for o in found if all(
                value == "all" or matches(o, name, value) for name, value in wanted.items())]
        field = self._id_field(op, object_type)
        page = paged(
            self.style, found, query, url=str(call.request.url), id_of=lambda o: o.get(field),
            created_of=lambda o: float(o.get("_created", 0)),
            updated_of=lambda o: float(o.get("_updated", o.get("_created", 0))),
        )
        return self._envelope(op, call, object_type, page)

    def _envelope(self, op: Operation, call: Call, object_type: str, page: Page) -> Reply:
        doc = document(self.description)
        node = doc.resolve(op.response) if op.response is not None else {}
        if not isinstance(node, Mapping):
            node = {}
        if node.get("type") == "array":
            item = node.get("items", {})
            body: Any = [self.render(call, item, object_type, o) for o in page.items]
        else:
            properties = node.get("properties") or {}
            holder = next((n for n in ("data", "result", "results", "messages", "items",
                                       "policies") if n in properties), None)
            base = instance(doc, op.response)
            body = base if isinstance(base, dict) else {}
            if holder is not None:
                item = doc.resolve(properties[holder]).get("items", {})
                body[holder] = [self.render(call, item, object_type, o) for o in page.items]
            extras = {"has_more": page.has_more, "url": _url_of(doc, properties,
                                                             call.request.url.path),
                      "total_count": len(page.items), "incomplete_results": False}
            body.update({k: v for k, v in extras.items() if k in properties})
            if "next_page" in properties:
                body["next_page"] = None
        headers = {"Content-Type": "application/json", **page.headers}
        return Reply(op.status, json_body(body), headers)

    # -- writes ------------------------------------------------------------------------------

    def _keyed(self, call: Call, phash: str, run: Callable[[], Reply]) -> Reply:
        """``run()`` under the request's idempotency key, if the service has one: a replay of
        the saved answer, a refusal, or ``run()``'s answer saved with its effect."""
        header = self.idempotency_header
        presented = call.request.headers.get(header) if header else None
        correlation = call.request.headers.get(CORRELATION_HEADER)
        claimed = presented if presented and call.settings.idempotency else None

        def carried(reply: Reply) -> Reply:
            reply.idempotency_key = presented
            reply.correlation_id = correlation
            reply.operation_key = presented or correlation or phash
            reply.payload_hash = phash
            return reply

        if claimed is not None:
            early = reserve(
                self, call, claimed, phash,
                in_use=lambda m: self.error(409, m, code="idempotency_key_in_use"),
                mismatch=lambda m: self.error(400, m, code="idempotency_error"),
            )
            if early is not None:
                return carried(early)
        try:
            reply = run()
        except BaseException:  # a refusal too: answered by the handler, nothing saved
            if claimed is not None:
                release(self, call, claimed)
            raise
        reply = carried(reply)
        if claimed is not None:
            if reply.effect is None and reply.status >= 400:
                release(self, call, claimed)  # refused before executing: nothing is saved
            else:
                reply.on_commit = saver(call, claimed)
        return reply

    def _effect(self, op: Operation, call: Call, object_type: str, field: str,
                obj: dict[str, Any], *, key: str | None = None,
                status: int | None = None) -> Reply:
        """The answer of a write that makes ``obj`` (a new object, or the new version of the
        one journaled as ``key``) an effect."""
        object_id = str(obj.get(field))
        version = f"{key}~{call.seq}" if key else self.journal_id(
            call, op, obj.get("_path") or {}, obj, field)
        obj = {k: v for k, v in obj.items() if k != "_key"}
        reply = self._answer(op, call, obj, status=status)
        reply.effect = EffectDraft(object_type, version, obj)
        reply.object_id = object_id
        reply.aliases = self.aliases(call, obj, field)
        return reply

    def _serve_create(self, op: Operation, call: Call, values: Mapping[str, str],
                body: dict[str, Any]) -> Reply:
        object_type = op.object_type or op.collection
        field = self._id_field(op, object_type)
        properties = self._schema(object_type).get("properties") or {}
        obj: dict[str, Any] = {k: v for k, v in body.items() if not k.startswith("_")}
        if obj.get(field) not in (None, ""):
            if any(str(o.get(field)) == str(obj[field]) and self._placed(op, values, o)
                   for o in self.objects(call, object_type)):
                raise Refused(self.invalid_status,
                              f"A {object_type} with {field} {obj[field]!r} already exists.",
                              code="already_exists")
            obj["_chosen"] = True
        else:
            integer = doc_type(properties.get(field)) == "integer"
            obj[field] = self.new_id(call, object_type, integer)
        for param in op.parents:  # a refund made under its charge names the charge
            if param in properties and param in values and param not in obj:
                obj[param] = values[param]
        if "number" in properties and field != "number":
            obj["number"] = self.next_number(
                call, {p: values[p] for p in op.parents if p in values})
        obj.update(_path=dict(values), _created=call.wall, _updated=call.wall)
        return self._effect(op, call, object_type, field, obj)

    def _serve_update(self, op: Operation, call: Call, values: Mapping[str, str],
                body: dict[str, Any], *, replace: bool) -> Reply:
        object_type = op.object_type or op.collection
        field = self._id_field(op, object_type)
        current = self.find(op, call, values)
        if current is None:
            if not replace:
                raise self._missing(op, values)
            current = {field: values.get(op.id_param or ""), "_path": dict(values),
                       "_created": call.wall}
            merged = {**current, **body, "_chosen": True}
            return self._effect(op, call, object_type, field, {**merged, "_updated": call.wall})
        kept = {k: v for k, v in current.items() if k.startswith("_") or k == field}
        merged = {**kept, **body} if replace else _merge(current, body)
        merged = self.revise(call, object_type, current, merged)
        if public(merged) == public(current):
            return self._answer(op, call, current)  # nothing changes: no second effect
        merged["_updated"] = call.wall
        return self._effect(op, call, object_type, field, merged, key=current["_key"])

    def _serve_delete(self, op: Operation, call: Call, values: Mapping[str, str]) -> Reply:
        object_type = op.object_type or op.collection
        field = self._id_field(op, object_type)
        current = self.find(op, call, values)
        if current is None:
            raise self._missing(op, values)
        gone = {**current, "_deleted": True, "deleted": True, "_updated": call.wall}
        return self._effect(op, call, object_type, field, gone, key=current["_key"])

    def _serve_action(self, op: Operation, call: Call, values: Mapping[str, str],
                body: dict[str, Any]) -> Reply:
        object_type = op.object_type or op.collection
        field = self._id_field(op, object_type)
        current = self.find(op, call, values)
        if current is None:
            raise self._missing(op, values)
        verb = op.template.rstrip("/").rsplit("/", 1)[1]
        done = list(current.get("_actions") or [])
        if verb in done:
            raise Refused(self.invalid_status,
                          f"This {object_type} was already {verb}ed: {verb} happens "
                          "once.", code=f"{object_type}_unexpected_state")
        after = self.act(call, op, verb, dict(current), body)
        after.update(_actions=[*done, verb], _updated=call.wall)
        return self._effect(op, call, object_type, field, after, key=current["_key"])

    def _above(self, op: Operation, call: Call, values: Mapping[str, str]
               ) -> dict[str, Any] | None:
        """The object whose path ``op``'s path continues (an issue, for its assignees), when
        ``op`` answers with it."""
        at = op.template.rfind("}")
        item = op.template[: at + 1]
        for other in operations(self.description):
            if (other.kind == "retrieve" and other.template == item
                    and other.object_type == op.object_type):
                return self.find(other, call, values)
        return None

    def _above_exists(self, op: Operation) -> bool:
        """Whether ``op`` answers with the object above its path (a retrieve of that path
        answers its type)."""
        item = op.template[: op.template.rfind("}") + 1]
        return any(o.kind == "retrieve" and o.template == item and o.object_type == op.object_type
                   for o in operations(self.description))

    def _serve_write(self, op: Operation, call: Call, values: Mapping[str, str],
                     body: dict[str, Any]) -> Reply:
        """Any other write: an effect on what its path names, once for the same body;
        answered with the object above it when the description says so, else the answer's
        documented shape."""
        object_type = f"{op.method} {op.template}"
        path = call.request.url.path
        latest = [o for o in self.objects(call, object_type) if o.get("_at") == path]
        obj = {"_at": path, "_body": body, "_created": call.wall}
        above = self._above(op, call, values) if op.object_type else None
        if above is None and op.object_type and self._above_exists(op):
            noun = op.object_type.rsplit("/", 1)[-1]
            named = values.get(op.path_params[-1], "") if op.path_params else ""
            raise Refused(404, f"No such {noun}: '{named}'", code="resource_missing")
        if latest and latest[-1].get("_body") == body:
            return self._answer(op, call, above)
        reply = self._answer(op, call, above)
        version = path if not latest else f"{path}~{call.seq}"
        reply.effect = EffectDraft(object_type, version, obj)
        reply.object_id = path
        reply.aliases = (path, f"{call.origin}{path}")
        return reply


def _url_of(doc: Document, properties: Mapping[str, Any], path: str) -> str:
    """A list's ``url``: the request's path, or, where the schema fixes its form (Stripe's
    balance history lists ``/v1/balance_transactions``), that form."""
    pattern = doc.resolve(properties.get("url") or {}).get("pattern")
    if isinstance(pattern, str) and not re.search(pattern, path):
        return str(instance(doc, properties["url"]))
    return path


def doc_type(schema: Any) -> str | None:
    """The first JSON type a (resolved) property schema names."""
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return kind if isinstance(kind, str) else None


def _merge(current: Mapping[str, Any], body: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` updated by ``body``: a map field (metadata) merged key by key, an empty
    value unsetting a key, as Stripe does; any other field replaced."""
    out = dict(current)
    for name, value in body.items():
        if isinstance(value, Mapping) and isinstance(out.get(name), Mapping):
            merged = {**out[name], **value}
            out[name] = {k: v for k, v in merged.items() if v != ""}
        else:
            out[name] = value
    return out


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
