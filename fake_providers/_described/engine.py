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
have no field for. Answers carry every field their schema requires, in its type (``shapes.py``),
and what the world holds beyond it (a field of an exported object). The objects and their
answers are ``objects.py``'s; the writes ``writes.py``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .._provider import Call, Reply, Route, json_body, json_document, payload_hash
from .forms import parse_form
from .listing import PAGING, ListError, Page, filters, matches, paged
from .objects import Beyond, Refused, document, operations, public
from .operations import Document, Operation
from .shapes import coerce, instance, shaped
from .writes import Writes

__all__ = ["Beyond", "DescribedProvider", "Refused", "document", "operations", "public"]

_FORM = "application/x-www-form-urlencoded"


class DescribedProvider(Writes):
    """Base of a provider that serves a vendored description (see the module docstring)."""

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


def _url_of(doc: Document, properties: Mapping[str, Any], path: str) -> str:
    """A list's ``url``: the request's path, or, where the schema fixes its form (Stripe's
    balance history lists ``/v1/balance_transactions``), that form."""
    pattern = doc.resolve(properties.get("url") or {}).get("pattern")
    if isinstance(pattern, str) and not re.search(pattern, path):
        return str(instance(doc, properties["url"]))
    return path
