"""Your own provider: describe an HTTP API, get a fake of it with everything the bundled ones have.

An :class:`HttpApi` is a name and routes. Each route is one of three kinds:

- :class:`Effect`: a write that changes the world (``POST`` creates an object; ``PUT``
  replaces one, ``PATCH`` updates one, ``DELETE`` deletes one, by the id in its path): an
  effect in the journal, the thing a crash test counts;
- :class:`Lookup`: read one object by the id in its path, consistently (``404`` when absent);
- :class:`Search`: list the objects of a type that match the request's query parameters and
  path parameters (equal fields; ``q``/``query``: a word in any text field), lagging behind
  writes by the provider's ``search_lag`` unless ``lags=False`` (a consistent list).

The provider built from it (:meth:`HttpApi.provider`, or a crash test's marker:
``providers=[api]``) has the journal, keys, tenants and scopes, faults (lookups that time out,
lost responses, 5xx and 429), the loopback server with B and C at the wire, ``mock`` and
``transport``, and the invariants, as the bundled providers have. What it needs to know:

- bodies are JSON objects or form-encoded fields; an object is the body's fields, the path's
  parameters and its id (in ``id_field``);
- ``idempotency_header`` (e.g. ``"Idempotency-Key"``): effects honour it as Stripe does (the
  same key and parameters replay the saved answer, with no new effect; other parameters: 400;
  in flight: 409); without it, every accepted write is an effect, the same body twice two;
- a request acts for the tenant of its key; ``tenant_param`` (a path parameter) or
  ``tenant_header`` (a header) may name the tenant too, and must then match the key's;
- scopes: ``<name>:write`` for effects, ``<name>:read`` for lookups and searches (a route may
  name another);
- the logical effect is named by the idempotency key, else the ``X-Correlation-Id`` header,
  else the payload (the path and the body).

:meth:`HttpApi.recording` needs no routes at all: any REST API, every write an effect, ``GET
/x/{id}`` a lookup, ``GET /x`` a list. :func:`~fake_providers.openapi` builds one from an
OpenAPI 3 document.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

import httpx

from ._faults import RequestKind
from ._idempotency import release as _release_key
from ._idempotency import reserve as _reserve_key
from ._idempotency import saver as _saver
from ._journal import next_counter
from ._provider import (
    CORRELATION_HEADER,
    ApiDescription,
    Call,
    EffectDraft,
    Provider,
    Reply,
    Route,
    described,
    json_body,
    json_document,
    payload_hash,
)

__all__ = ["Effect", "HttpApi", "Lookup", "Search"]

Action = Literal["create", "replace", "update", "delete"]
#: Builds an answer's JSON body from the object(s) a route wrote or found.
Respond = Callable[[Any], Any]
#: Builds an error's JSON body from the status, a short code and a message.
ErrorBody = Callable[[int, str, str], Any]

_ACTIONS: dict[str, Action] = {
    "POST": "create", "PUT": "replace", "PATCH": "update", "DELETE": "delete",
}
_STATUS: dict[Action, int] = {"create": 201, "replace": 200, "update": 200, "delete": 204}
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Query parameters a search reads as paging or ordering, never as a filter.
_PAGING = frozenset({"limit", "page", "per_page", "cursor", "offset", "sort", "order", "count"})
_TEXT = ("q", "query")
#: A later write of an object is journaled as ``<id>~<request number>``.
_VERSION = re.compile(r"~\d+$")


def _pattern(path: str) -> re.Pattern[str]:
    if not path.startswith("/"):
        raise ValueError(f"route path {path!r} must start with '/', e.g. '/v1/notes/{{id}}'")
    parts, last = [], 0
    for found in _PARAM.finditer(path):
        parts.append(re.escape(path[last : found.start()]))
        parts.append(f"(?P<{found.group(1)}>[^/]+)")
        last = found.end()
    parts.append(re.escape(path[last:]))
    return re.compile("".join(parts))


def _params(path: str) -> list[str]:
    return _PARAM.findall(path)


def _id_param(path: str, id_field: str) -> str | None:
    """The path parameter that names the object: the one called ``id_field``, else the last
    parameter at the end of the path."""
    params = _params(path)
    if id_field in params:
        return id_field
    if params and path.rstrip("/").endswith("{" + params[-1] + "}"):
        return params[-1]
    return None


def _require_object_param(kind: str, route: Effect | Lookup, fault: str) -> None:
    """Raise ``ValueError`` unless ``route`` (an ``Effect`` or ``Lookup`` spec: ``kind``)
    names its object by a parameter of its path; ``fault`` says what is wrong otherwise."""
    if _id_param(route.path, route.id_field) is None:
        raise ValueError(
            f"{kind}({route.method!r}, {route.path!r}) {fault}: end it with "
            f"{{{route.id_field}}}."
        )


@dataclasses.dataclass(frozen=True)
class Effect:
    """A write route: ``method`` on ``path`` (``{name}`` marks a path parameter) writes an
    object of type ``object``.

    ``action``: ``"create"`` (default for POST: a new object, its id generated unless the body
    or the path gives ``id_field``), ``"replace"`` (PUT), ``"update"`` (PATCH: merged into the
    object) or ``"delete"`` (DELETE); the last three name the object by the path parameter
    called ``id_field`` or else the path's last one. ``required``: body fields without which
    the request is a 400 (nothing applied). ``status``: the success status (201 create, 200
    replace/update, 204 delete). ``respond(obj)``: the answer's body (default: the object).
    ``new_id(n, now)``: the id of the ``n``-th created object at harness time ``now`` (default
    ``<object>_<n>``). ``name``: the operation in the journal (default
    ``<object>.<action>``); ``scope``: the scope it needs (default ``<api>:write``).
    """

    method: str
    path: str
    object: str
    id_field: str = "id"
    action: Action | None = None
    required: tuple[str, ...] = ()
    status: int | None = None
    respond: Respond | None = None
    new_id: Callable[[int, float], str | int] | None = None
    name: str | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        method = self.method.upper()
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "required", tuple(self.required))
        if self.action is None:
            if method not in _ACTIONS:
                raise ValueError(
                    f"Effect({self.method!r}, {self.path!r}): a {method} is not a write; use "
                    "POST, PUT, PATCH or DELETE, or say action=..."
                )
            object.__setattr__(self, "action", _ACTIONS[method])
        if self.action not in _STATUS:
            raise ValueError(f"Effect action {self.action!r} is not one of {', '.join(_STATUS)}")
        if self.action != "create":
            _require_object_param(
                "Effect", self, f"{self.action}s an object but its path names none"
            )
        _pattern(self.path)


@dataclasses.dataclass(frozen=True)
class Lookup:
    """A consistent read of one object of type ``object`` by the id in ``path`` (the path
    parameter called ``id_field``, else the path's last one): 200 and the object, or 404.
    Other path parameters must match the object's fields too. ``respond``, ``name`` (default
    ``<object>.get``) and ``scope`` (default ``<api>:read``) as for :class:`Effect`."""

    method: str
    path: str
    object: str
    id_field: str = "id"
    respond: Respond | None = None
    name: str | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method.upper())
        _require_object_param("Lookup", self, "must name the object in its path")
        _pattern(self.path)


@dataclasses.dataclass(frozen=True)
class Search:
    """A list of the objects of type ``object`` whose fields equal the request's path
    parameters and query parameters (a dotted name reads a nested field: ``metadata.order``;
    ``q`` or ``query`` match a word in any text field; ``limit``, ``page``, ``cursor``... are
    ignored), oldest first. It lags: it sees only what was written at least the provider's
    ``search_lag`` harness seconds ago (a crash test's ``ProviderSpec(search_lag=...)``),
    unless ``lags=False`` (a consistent list). ``respond(objects)``: the answer's body (default:
    the list). ``name`` (default ``<object>.search`` or ``<object>.list``) and ``scope`` as for
    :class:`Lookup`."""

    method: str
    path: str
    object: str
    lags: bool = True
    respond: Respond | None = None
    name: str | None = None
    scope: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", self.method.upper())
        _pattern(self.path)


RouteSpec = Union[Effect, Lookup, Search]  # noqa: UP007 - a runtime alias on Python 3.10


class HttpApi(ApiDescription[Provider]):
    """An HTTP API described as routes: the fake provider of it, for crash tests.

    ``HttpApi(name, *routes, idempotency_header=None, tenant_param=None, tenant_header=None,
    request_id_header="X-Request-Id", error=None, base_url=None)``. ``name`` names the provider
    (``providers=[api]`` in the marker; ``ctx.base_url(name)``; ``CRASHPOINTS_<NAME>_URL``);
    ``error(status, code, message)`` builds an error's JSON body (default ``{"error":
    {"code", "message"}}``); ``base_url`` is where ``mock``/``transport`` serve it (default
    ``https://<name>.crashpoints.test``). Raises ``ValueError`` for a bad route or name.
    """

    def __init__(
        self,
        name: str,
        *routes: RouteSpec,
        idempotency_header: str | None = None,
        tenant_param: str | None = None,
        tenant_header: str | None = None,
        request_id_header: str = "X-Request-Id",
        error: ErrorBody | None = None,
        base_url: str | None = None,
        _recording: bool = False,
    ) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", name or ""):
            raise ValueError(
                f"HttpApi name {name!r} must be lower case letters, digits, '-' or '_', "
                "starting with a letter (it names the provider, its scopes and its URL)."
            )
        for route in routes:
            if not isinstance(route, Effect | Lookup | Search):
                raise ValueError(
                    f"HttpApi({name!r}): {route!r} is not a route; use Effect(...), "
                    "Lookup(...) or Search(...)."
                )
        if not routes and not _recording:
            raise ValueError(
                f"HttpApi({name!r}) has no routes; describe some, or use "
                f"HttpApi.recording({name!r}) for any REST API."
            )
        self.name = name
        self.routes: tuple[RouteSpec, ...] = tuple(routes)
        self.idempotency_header = idempotency_header
        self.tenant_param = tenant_param
        self.tenant_header = tenant_header
        self.request_id_header = request_id_header
        self.error = error
        self.base_url = base_url or f"https://{name}.crashpoints.test"
        self.is_recording = _recording
        operations = [_operation(r) for r in self.routes]
        twice = sorted({op for op in operations if operations.count(op) > 1})
        if twice:
            raise ValueError(
                f"HttpApi({name!r}): operation {twice[0]!r} is named by two routes; give one "
                "of them name=..."
            )

    @classmethod
    def recording(
        cls,
        name: str,
        *,
        idempotency_header: str | None = None,
        tenant_header: str | None = None,
        request_id_header: str = "X-Request-Id",
        base_url: str | None = None,
    ) -> HttpApi:
        """A provider for any REST API, with no routes to describe: every POST, PUT, PATCH
        and DELETE is an effect (POST to a collection ``/x`` creates an object with an ``id``
        in it, unless the body gives one; PUT, PATCH and DELETE of ``/x/{id}`` write that
        object); ``GET /x/{id}`` looks an object up (404 if absent) and ``GET /x`` lists the
        collection (consistently; query parameters filter it, as :class:`Search`'s do). No
        idempotency unless ``idempotency_header`` is given."""
        return cls(
            name,
            idempotency_header=idempotency_header,
            tenant_header=tenant_header,
            request_id_header=request_id_header,
            base_url=base_url,
            _recording=True,
        )

    def __repr__(self) -> str:
        kind = "recording" if self.is_recording else f"{len(self.routes)} route(s)"
        return f"HttpApi({self.name!r}, {kind})"

    @property
    def has_lookup(self) -> bool:
        """Whether a client can ask it whether an effect happened."""
        return self.is_recording or any(isinstance(r, Lookup | Search) for r in self.routes)

    @property
    def has_search(self) -> bool:
        """Whether it has a search that lags behind writes."""
        return any(isinstance(r, Search) and r.lags for r in self.routes)

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope its routes need (what a task needs to use all of it)."""
        found = {f"{self.name}:read", f"{self.name}:write"}
        found.update(r.scope for r in self.routes if r.scope)
        return frozenset(found)

    def _provider_class(self) -> type[Provider]:
        """The class of this API's fake provider: an :class:`ApiProvider` of its routes."""
        return described(
            ApiProvider, "Api", self.name, self.base_url,
            request_id_header=self.request_id_header, has_lookup=self.has_lookup,
            has_search=self.has_search, api=self,
        )


def _operation(route: RouteSpec) -> str:
    if route.name:
        return route.name
    if isinstance(route, Effect):
        return f"{route.object}.{route.action}"
    if isinstance(route, Lookup):
        return f"{route.object}.get"
    return f"{route.object}.{'search' if route.lags else 'list'}"


class _Invalid(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


class ApiProvider(Provider):
    """The provider of an :class:`HttpApi` (made by :meth:`HttpApi.provider`)."""

    api: HttpApi

    # -- routes -------------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        api = self.api
        out = []
        kind: RequestKind
        for spec in api.routes:
            if isinstance(spec, Effect):
                handler: Callable[[Call], Reply] = self._effect_handler(spec)
                kind, scope = "write", spec.scope or f"{api.name}:write"
            elif isinstance(spec, Lookup):
                handler = self._lookup_handler(spec)
                kind, scope = "lookup", spec.scope or f"{api.name}:read"
            else:
                handler = self._search_handler(spec)
                kind, scope = "lookup", spec.scope or f"{api.name}:read"
            out.append(
                Route(spec.method, _pattern(spec.path), _operation(spec), kind, scope, handler,
                      search=isinstance(spec, Search) and spec.lags)
            )
        return out

    def _match(self, request: httpx.Request) -> tuple[Route | None, dict[str, str]]:
        if self.api.is_recording:
            return self._record_route(request)
        return super()._match(request)

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        code = code or _default_code(status)
        body = (
            self.api.error(status, code, message)
            if self.api.error is not None
            else {"error": {"code": code, "message": message}}
        )
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def named_tenant(self, request: httpx.Request, groups: Mapping[str, str]) -> str | None:
        api = self.api
        if api.tenant_param and groups.get(api.tenant_param):
            return groups[api.tenant_param]
        if api.tenant_header and request.headers.get(api.tenant_header):
            named: str = request.headers[api.tenant_header]
            return named
        return super().named_tenant(request, groups)

    # -- objects in the journal -------------------------------------------------------------

    def _current(self, call: Call, object_type: str, object_id: str) -> dict[str, Any] | None:
        """The object as its latest write left it (``None``: never written, or deleted)."""
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT operation, body FROM effects WHERE object_type=? AND tenant_id=? AND "
                "(object_id=? OR object_id LIKE ? ESCAPE '\\') ORDER BY seq DESC LIMIT 1",
                (object_type, call.tenant_id, object_id, _versions(object_id)),
            ).fetchone()
        if row is None or self._deleted(row["operation"]):
            return None
        return dict(json.loads(row["body"]))

    def _all(self, call: Call, object_type: str, *, lags: bool) -> list[dict[str, Any]]:
        """Every object of the type as its latest write left it, oldest first (as a lagging
        search sees them when ``lags``)."""
        rows = self.effect_rows(
            call, object_type, lags=lags, columns="operation, object_id, body"
        )
        latest: dict[str, tuple[str, dict[str, Any]]] = {}
        for row in rows:
            key = _VERSION.sub("", row["object_id"])
            latest.pop(key, None)  # a later write moves it to its place in the order
            latest[key] = (row["operation"], json.loads(row["body"]))
        return [body for op, body in latest.values() if not self._deleted(op)]

    def _deleted(self, operation: str) -> bool:
        """Whether a write of ``operation`` deleted its object."""
        if self.api.is_recording:
            return operation.endswith(".delete")
        return any(
            isinstance(r, Effect) and r.action == "delete" and _operation(r) == operation
            for r in self.api.routes
        )

    # -- handlers -----------------------------------------------------------------------------

    def _body(self, call: Call, spec_required: Sequence[str]) -> dict[str, Any]:
        raw = call.request.content
        kind = call.media_type
        if not raw:
            data: Any = {}
        elif kind == "application/x-www-form-urlencoded":
            try:
                pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True,
                                               strict_parsing=True)
            except (UnicodeDecodeError, ValueError) as exc:
                raise _Invalid(400, "invalid_body", f"The form body is malformed: {exc}.") from None
            data = dict(pairs)
        elif kind in ("application/json", "") or kind.endswith("+json"):
            try:
                data = json_document(raw)
            except ValueError:
                raise _Invalid(400, "invalid_json", "The request body is not valid JSON.") from None
        else:
            raise _Invalid(
                415, "unsupported_media_type",
                f"Send the body as JSON or form fields, not {kind!r}.",
            )
        if not isinstance(data, dict):
            raise _Invalid(400, "invalid_body", "The request body must be a JSON object.")
        missing = [name for name in spec_required if data.get(name) in (None, "")]
        if missing:
            raise _Invalid(400, "missing_field", f"Missing required field {missing[0]!r}.")
        return data

    def _new_id(self, call: Call, object_type: str, spec: Effect | None) -> str | int:
        with self.journal.transaction() as conn:
            n = next_counter(conn, f"ids:{call.tenant_id}:{object_type}")
        if spec is not None and spec.new_id is not None:
            return spec.new_id(n, call.now)
        noun = object_type.rstrip("/").rpartition("/")[2] or "object"
        if object_type.startswith("/") and noun.endswith("s") and len(noun) > 1:
            noun = noun[:-1]  # a recorded collection's object: /v1/notes -> note_1
        return f"{noun}_{n}"

    def _write(
        self,
        call: Call,
        *,
        object_type: str,
        action: Action,
        id_field: str,
        object_id: str | int | None,
        body: dict[str, Any],
        status: int,
        respond: Respond | None,
        id_param: str | None = None,
    ) -> Reply:
        """Apply one write: the object as it is after it, the effect, the answer."""
        params = {k: v for k, v in call.groups.items() if k not in (id_field, id_param)}
        logical = {"path": call.request.url.path, "body": body}
        phash = payload_hash(logical)
        if phash is None:
            return self.error(400, "The request body is not valid JSON.", code="invalid_json")
        key_header = self.api.idempotency_header
        presented = call.request.headers.get(key_header) if key_header else None
        correlation = call.request.headers.get(CORRELATION_HEADER)
        base = Reply(
            0,
            idempotency_key=presented,
            correlation_id=correlation,
            operation_key=presented or correlation or phash,
            payload_hash=phash,
        )
        claimed = presented if presented and call.settings.idempotency else None
        if claimed is not None:
            early = _reserve_key(
                self, call, claimed, phash,
                in_use=lambda message: self.error(409, message, code="idempotency_key_in_use"),
                mismatch=lambda message: self.error(400, message, code="idempotency_error"),
            )
            if early is not None:
                early = _carry(base, early)
                if early.replayed:
                    early.object_id = _saved_id(early.body, id_field)
                    early.aliases = _aliases(call, object_type, early.object_id, action)
                return early
        try:
            reply = self._apply(call, object_type, action, id_field, object_id, body, params,
                                status, respond)
        except BaseException:
            if claimed is not None:
                _release_key(self, call, claimed)
            raise
        reply = _carry(base, reply)
        if claimed is not None:
            if reply.effect is None:
                _release_key(self, call, claimed)
            else:
                reply.on_commit = _saver(call, claimed)
        return reply

    def _apply(
        self, call: Call, object_type: str, action: Action, id_field: str,
        object_id: str | int | None, body: dict[str, Any], params: dict[str, str],
        status: int, respond: Respond | None,
    ) -> Reply:
        if action == "create":
            if object_id is None:
                given = body.get(id_field)
                object_id = given if isinstance(given, str | int) and given != "" else None
            if object_id is None:
                object_id = self._new_id(call, object_type, self._spec_of(call))
            obj = {**body, **params, id_field: object_id}
        else:
            assert object_id is not None
            current = self._current(call, object_type, str(object_id))
            if action in ("update", "delete") and current is None:
                return self.error(404, f"No {object_type} {object_id!r}.", code="not_found")
            kept = (current or {}).get(id_field, object_id)  # an id keeps its type
            if action == "update":
                obj = {**(current or {}), **body, **params, id_field: kept}
            elif action == "replace":
                obj = {**body, **params, id_field: kept}
            else:
                obj = {**(current or {}), id_field: kept}
        text_id = str(object_id)
        version = text_id if self._current_or_deleted_absent(call, object_type, text_id) else (
            f"{text_id}~{call.seq}"
        )
        shown = None if action == "delete" else (respond(obj) if respond else obj)
        content = b"" if shown is None and status == 204 else json_body(shown)
        return Reply(
            status,
            content,
            {"Content-Type": "application/json"} if content else {},
            effect=EffectDraft(object_type, version, obj),
            object_id=text_id,
            aliases=_aliases(call, object_type, text_id, action),
        )

    def _current_or_deleted_absent(self, call: Call, object_type: str, object_id: str) -> bool:
        """Whether no write ever named this object (its first version takes the plain id)."""
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT 1 FROM effects WHERE object_type=? AND object_id=?",
                (object_type, object_id),
            ).fetchone()
        return row is None

    def _spec_of(self, call: Call) -> Effect | None:
        for spec in self.api.routes:
            if isinstance(spec, Effect) and _operation(spec) == call.route.operation:
                return spec
        return None

    def _effect_handler(self, spec: Effect) -> Callable[[Call], Reply]:
        assert spec.action is not None
        action: Action = spec.action
        id_param = _id_param(spec.path, spec.id_field) if action != "create" or (
            spec.id_field in _params(spec.path)) else None

        def handle(call: Call) -> Reply:
            try:
                body = self._body(call, spec.required if action != "delete" else ())
            except _Invalid as exc:
                return self.error(exc.status, str(exc), code=exc.code)
            object_id = call.groups.get(id_param) if id_param else None
            return self._write(
                call, object_type=spec.object, action=action, id_field=spec.id_field,
                object_id=object_id, body=body, status=spec.status or _STATUS[action],
                respond=spec.respond, id_param=id_param,
            )

        return handle

    def _lookup_handler(self, spec: Lookup) -> Callable[[Call], Reply]:
        id_param = _id_param(spec.path, spec.id_field)
        assert id_param is not None

        def handle(call: Call) -> Reply:
            object_id = call.groups[id_param]
            obj = self._current(call, spec.object, object_id)
            others = {k: v for k, v in call.groups.items() if k != id_param}
            if obj is None or not _matches(obj, others):
                return self.error(404, f"No {spec.object} {object_id!r}.", code="not_found")
            reply = Reply(200, json_body(spec.respond(obj) if spec.respond else obj),
                          {"Content-Type": "application/json"})
            reply.object_id = object_id
            reply.aliases = _aliases(call, spec.object, object_id, "get")
            return reply

        return handle

    def _search_handler(self, spec: Search) -> Callable[[Call], Reply]:
        def handle(call: Call) -> Reply:
            wanted = {**_filters(call.query), **call.groups}
            found = [o for o in self._all(call, spec.object, lags=spec.lags)
                     if _matches(o, wanted)]
            limit = call.query.get("limit")
            if limit and limit.isdigit():
                found = found[: int(limit)]
            body = spec.respond(found) if spec.respond else found
            return Reply(200, json_body(body), {"Content-Type": "application/json"})

        return handle

    # -- the recording form -------------------------------------------------------------------

    def _record_route(self, request: httpx.Request) -> tuple[Route | None, dict[str, str]]:
        path = "/" + request.url.path.strip("/")
        method = request.method
        name = self.api.name
        if method in _ACTIONS:
            action = _ACTIONS[method]
            if action == "create":
                collection, object_id = path, None
            else:
                collection, _, object_id = path.rpartition("/")
                if not object_id:
                    return None, {}
            operation = f"{collection}.{action}"

            def write(call: Call) -> Reply:
                try:
                    body = self._body(call, ())
                except _Invalid as exc:
                    return self.error(exc.status, str(exc), code=exc.code)
                return self._write(
                    call, object_type=collection, action=action, id_field="id",
                    object_id=object_id, body=body, status=_STATUS[action], respond=None,
                )

            route = Route(method, re.compile(re.escape(path)), operation, "write",
                          f"{name}:write", write)
            return route, {}
        if method in ("GET", "HEAD"):
            parent, _, last = path.rpartition("/")
            as_lookup = bool(parent) and last != "" and not request.url.query and (
                self._known(parent) or any(c.isdigit() for c in last)
            )
            if as_lookup:
                def get(call: Call) -> Reply:
                    obj = self._current(call, parent, last)
                    if obj is None:
                        return self.error(404, f"Nothing at {path}.", code="not_found")
                    reply = Reply(200, json_body(obj),
                                  {"Content-Type": "application/json"})
                    reply.object_id = last
                    reply.aliases = _aliases(call, parent, last, "get")
                    return reply

                return Route(method, re.compile(re.escape(path)), f"{parent}.get", "lookup",
                             f"{name}:read", get), {}

            def list_(call: Call) -> Reply:
                wanted = _filters(call.query)
                found = [o for o in self._all(call, path, lags=False) if _matches(o, wanted)]
                return Reply(200, json_body(found), {"Content-Type": "application/json"})

            return Route(method, re.compile(re.escape(path)), f"{path}.list", "lookup",
                         f"{name}:read", list_), {}
        return None, {}

    def _known(self, collection: str) -> bool:
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT 1 FROM effects WHERE object_type=? LIMIT 1", (collection,)
            ).fetchone()
        return row is not None


def _carry(base: Reply, answer: Reply) -> Reply:
    answer.idempotency_key = base.idempotency_key
    answer.correlation_id = base.correlation_id
    answer.operation_key = base.operation_key
    answer.payload_hash = base.payload_hash
    return answer


def _saved_id(body: bytes, id_field: str) -> str | None:
    try:
        saved = json.loads(body)
    except ValueError:
        return None
    found = saved.get(id_field) if isinstance(saved, dict) else None
    return None if found is None else str(found)


def _aliases(call: Call, object_type: str, object_id: str | None, action: str) -> tuple[str, ...]:
    """Every name a client may keep for the object: its id, the request's path (and URL),
    and, for a create, the object's own path under the collection."""
    if object_id is None:
        return ()
    path = call.request.url.path
    names = [object_id, path, f"{call.origin}{path}"]
    if action == "create" and not path.rstrip("/").endswith("/" + object_id):
        names += [f"{path.rstrip('/')}/{object_id}", f"{call.origin}{path.rstrip('/')}/{object_id}"]
    return tuple(dict.fromkeys(names))


def _versions(object_id: str) -> str:
    escaped = object_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{escaped}~%"


def _filters(query: httpx.QueryParams) -> dict[str, str]:
    return {k: v for k, v in query.items() if k not in _PAGING}


def _field(obj: Mapping[str, Any], dotted: str) -> Any:
    node: Any = obj
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _matches(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    for name, value in wanted.items():
        if name in _TEXT:
            words = value.lower().split()
            text = " ".join(str(v) for v in obj.values() if isinstance(v, str)).lower()
            if not all(word in text for word in words):
                return False
            continue
        found = _field(obj, name)
        if found is None:
            return False
        shown = json.dumps(found) if isinstance(found, bool) else str(found)
        if shown != value:
            return False
    return True


def _default_code(status: int) -> str:
    return {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
            409: "conflict", 429: "rate_limited"}.get(
        status, "server_error" if status >= 500 else "bad_request")
