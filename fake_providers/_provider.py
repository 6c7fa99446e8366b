"""The request pipeline every fake provider shares.

A provider is a request handler (``handle(httpx.Request) -> httpx.Response``, like the handler of
httpx's ``MockTransport``) over its journal. The pipeline, for every request:

1. route it (unknown route: 404 in the provider's format);
2. authenticate (unknown or revoked key: 401; a derived key authenticates as its base key and
   brings its label) and authorize (a request that names another tenant than the key's, or an
   operation the key's scopes do not cover: 403);
3. take the fault switches that apply, atomically (latency, 429, 5xx, lookup timeout);
4. run the operation's handler, which validates (400, never an effect) and builds the answer;
5. commit, in one transaction: the effect (if any), the request row (with the key's label and
   the aliases of the object created or read), whatever the handler must store with it (a saved
   idempotent response); only then produce the response, or lose it when the
   ``lose_responses`` switch is on.

Every request gets a request id and a row in the journal, whatever its outcome. Every response
the provider produces carries a :class:`ResponseInfo` in ``response.extensions["crashpoints"]``:
what the journal recorded of the request, for whoever holds the response object (an in-process
client, or the loopback server's preamble hook), without parsing the provider's wire format.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

import httpx

from pytest_crashpoints.errors import ArgumentsError
from pytest_crashpoints.ledger import args_hash

from ._exports import EXPORT_FORMAT, Exported, ExportError, own_format
from ._faults import LOST_RESPONSES, ActiveFault, Faults, RequestKind, take
from ._journal import Journal, next_counter
from ._keys import ApiKey, Keys, covers
from ._seeding import export as export_journal
from ._seeding import seed as seed_journal
from ._settings import ProviderSettings, Settings

__all__ = [
    "ATTEMPT_HEADER",
    "CORRELATION_HEADER",
    "TENANT_HEADER",
    "ApiDescription",
    "Call",
    "EffectDraft",
    "Provider",
    "Reply",
    "ResponseInfo",
    "Route",
    "described",
    "json_body",
    "json_document",
    "payload_hash",
]

#: Optional header naming the ledger attempt a request belongs to (recorded, never required).
ATTEMPT_HEADER = "X-Crashpoints-Attempt-Id"
#: Optional header carrying a correlation id (every provider; some also take it in the body).
CORRELATION_HEADER = "X-Correlation-Id"
#: Optional header naming the tenant the request acts for; must match the key's tenant.
TENANT_HEADER = "X-Crashpoints-Tenant"

Clock = Callable[[], float]


def json_body(value: Any) -> bytes:
    """The provider's JSON encoding of a response body (stable, so replays are byte-identical)."""
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")


def json_document(content: bytes) -> Any:
    """The JSON document a request body holds (UTF-8); ``NaN`` and ``Infinity`` are not JSON.
    Raises ``ValueError`` (a ``UnicodeDecodeError`` among them) when it holds none."""
    return json.loads(content.decode("utf-8"), parse_constant=_not_json)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def payload_hash(params: Mapping[str, Any]) -> str | None:
    """``pytest_crashpoints.ledger.args_hash`` of a request's logical parameters (None if
    unhashable)."""
    try:
        return args_hash(params)
    except ArgumentsError:
        return None


@dataclass(frozen=True)
class ResponseInfo:
    """What the provider made of a request, in ``response.extensions["crashpoints"]`` of every
    response it produces (refusals and injected 429/5xx included; a lost response or a lookup
    timeout produces none). The same facts as the request's journal row.

    ``operation``: the operation's name (``"charges.create"``, ``"issues.get"``, ...), None for
    an unknown route. ``kind``: ``"write"`` (may apply an effect), ``"lookup"`` (tells whether
    an effect happened) or ``"read"`` (anything else), None for an unknown route. ``status``:
    the HTTP status. ``effect_applied``: this request applied an effect. ``replayed``: a saved
    idempotent answer was replayed (payments). ``request_id``: the provider's request id (its
    request id header). ``label``: the label of the derived key presented, None for a plain key,
    an unknown key or none. ``idempotency_key``: the ``Idempotency-Key`` presented, if any.
    ``provider``: the provider's name (``"payments"``, ...). ``tool_calls``: the names of the
    tools a model's answer calls (empty for every other answer).
    """

    operation: str | None
    kind: RequestKind | None
    status: int
    effect_applied: bool
    replayed: bool
    request_id: str
    label: str | None
    idempotency_key: str | None
    provider: str
    #: The tools a model's answer calls, in order (empty for every other answer).
    tool_calls: tuple[str, ...] = ()
    #: The answer is the protocol's own traffic (``Route.plumbing``), not an outcome.
    plumbing: bool = False
    #: What of the request the fake does not serve (a route, a parameter, a media type its
    #: description lacks), if anything: the simulated world ends there.
    world_limit: str | None = None


@dataclass(frozen=True)
class EffectDraft:
    """An effect the handler wants applied: the object it creates, stored in the journal."""

    object_type: str
    object_id: str
    body: dict[str, Any]


@dataclass
class Reply:
    """What a handler answers, plus what the journal must record about it."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    effect: EffectDraft | None = None
    idempotency_key: str | None = None
    correlation_id: str | None = None
    operation_key: str | None = None
    payload_hash: str | None = None
    args_hash: str | None = None
    object_id: str | None = None
    #: The names the API gives the object created or read by id (see ``RequestRecord``).
    aliases: tuple[str, ...] = ()
    replayed: bool = False
    #: The tools a model's answer calls (see ``ResponseInfo.tool_calls``).
    tool_calls: tuple[str, ...] = ()
    #: What of the request the fake does not serve (see :meth:`Provider.unserved`), if any.
    world_limit: str | None = None
    #: Runs inside the commit transaction, after the request row (gets the final headers).
    on_commit: Callable[[sqlite3.Connection, Reply], None] | None = None


@dataclass(frozen=True)
class Call:
    """One authenticated, authorized request on its way to an operation handler."""

    request: httpx.Request
    route: Route
    groups: dict[str, str]
    key: ApiKey
    now: float
    seq: int
    request_id: str
    settings: ProviderSettings
    search_miss: bool
    #: The wall time (Unix seconds) that clock time 0 stands for (see ``Provider``).
    epoch: float = 0.0

    @property
    def wall(self) -> float:
        """The request's wall time (Unix seconds): what the objects it makes are stamped
        with (Stripe's ``created``, GitHub's ``created_at``)."""
        return self.epoch + self.now

    @property
    def tenant_id(self) -> str:
        return self.key.tenant_id

    @property
    def query(self) -> httpx.QueryParams:
        return self.request.url.params

    @property
    def media_type(self) -> str:
        """The body's media type, lower case, without its parameters (``""`` when not given)."""
        content_type: str = self.request.headers.get("Content-Type", "")
        return content_type.split(";")[0].strip().lower()

    @property
    def origin(self) -> str:
        """``scheme://host[:port]`` the client used (absolute URLs in bodies point there)."""
        return f"{self.request.url.scheme}://{self.request.url.netloc.decode('ascii')}"


@dataclass(frozen=True)
class Route:
    """An operation: method and path pattern, name, kind, required scope, handler.

    ``generates``: the request makes an answer that is not made again the same way (a
    model's generation). It applies no effect and is journaled as its ``kind`` says, but the
    fault switches act on it as on a write: refused before it is made (``server_errors``,
    ``rate_limits``, ``write_timeouts`` with ``on="writes"``), or made and then lost
    (``lose_responses``).
    """

    method: str
    pattern: re.Pattern[str]
    operation: str
    kind: RequestKind
    scope: str
    handler: Callable[[Call], Reply]
    search: bool = False
    generates: bool = False
    #: Whether the route takes this request, beyond its method and path (an MCP server's
    #: operations share one path; the JSON-RPC body names the tool). ``None``: every one.
    accepts: Callable[[httpx.Request], bool] | None = None
    #: The protocol's own traffic (an MCP session's handshake, its stream, its end), not an
    #: operation of the provider: its answer is no outcome, so no B or C comes with it.
    plumbing: bool = False


@dataclass(frozen=True)
class _Context:
    request: httpx.Request
    seq: int
    request_id: str
    now: float
    route: Route | None
    key: ApiKey | None
    #: The key the request presented, even when it was refused (unknown keys: None).
    presented: ApiKey | None = None


_P = TypeVar("_P", bound="Provider")


def described(
    base: type[_P], suffix: str, name: str, base_url: str, **attributes: Any
) -> type[_P]:
    """The provider class of an API described by the user (an ``HttpApi``, an ``McpServer``):
    ``base`` with the description's ``name``, URL, request ids and ``attributes``."""
    kind = type(
        f"{name.title().replace('-', '').replace('_', '')}{suffix}",
        (base,),
        {
            "name": name,
            "default_base_url": base_url,
            "request_id_prefix": f"{name.replace('-', '_')}_req_",
            **attributes,
        },
    )
    return cast("type[_P]", kind)


class ApiDescription(Generic[_P]):
    """Base of an API described by the user (:class:`~fake_providers.HttpApi`,
    :class:`~fake_providers.McpServer`): a description makes its fake provider."""

    def _provider_class(self) -> type[_P]:
        """The class of this API's fake provider (see :func:`described`)."""
        raise NotImplementedError

    def provider(
        self,
        journal_path: Any,
        *,
        clock: Clock = time.time,
        sleep: Callable[[float], None] | None = None,
        keys: Iterable[ApiKey] = (),
        settings: ProviderSettings | None = None,
        base_url: str | None = None,
        epoch: Clock | None = None,
    ) -> _P:
        """The fake provider of this API over its journal, with the same arguments as the
        bundled providers' constructors (``Payments(journal_path, clock=..., ...)``)."""
        return self._provider_class()(
            journal_path, clock=clock, sleep=sleep, keys=keys, settings=settings,
            base_url=base_url, epoch=epoch,
        )


class Provider:
    """Base of the four providers (private: users never subclass it).

    Arguments common to every provider:

    ``journal_path``: the provider's SQLite journal (created if missing; reopened if it exists,
    keeping its keys, settings, faults and history).
    ``clock``: harness seconds (default ``time.time``).
    ``sleep``: called with the harness seconds a ``latency`` fault adds (e.g. the harness clock's
    advance); default: none, latency only moves the provider's own notion of now.
    ``keys``: API keys to accept (added to those already in the journal).
    ``settings``: settings to put in force (default: keep what the journal holds).
    ``base_url``: where the in-process routes live (``mock``); the loopback server has its own.
    ``epoch``: the wall time (Unix seconds) that ``clock``'s time 0 stands for, read at each
    request; the objects the provider makes are stamped with ``epoch() + clock()`` (Stripe's
    ``created``, GitHub's ``created_at``). Default: 0, for a clock that tells wall time.
    """

    name: ClassVar[str]
    default_base_url: ClassVar[str]
    #: Whether a client can ask the provider if an effect happened (by id, list or search).
    has_lookup: ClassVar[bool] = True
    #: Whether it has a search, which lags behind writes (``settings.search_lag``).
    has_search: ClassVar[bool] = True
    #: Whether it is a model: its answers are generated (from a script), never effects; the
    #: crash point at an answer that calls a tool is ``model.tool_call``, not C.
    is_model: ClassVar[bool] = False
    request_id_header: ClassVar[str] = "X-Request-Id"
    #: Request ids differ between providers, as real ones do: a ledger row that stored one
    #: names one request of one provider.
    request_id_prefix: ClassVar[str] = "req_"

    def __init__(
        self,
        journal_path: str | Any,
        *,
        clock: Clock = time.time,
        sleep: Callable[[float], None] | None = None,
        keys: Iterable[ApiKey] = (),
        settings: ProviderSettings | None = None,
        base_url: str | None = None,
        epoch: Clock | None = None,
    ) -> None:
        self.journal = Journal(journal_path, provider=self.name)
        self.keys = Keys(self.journal)
        self.settings = Settings(self.journal)
        self.faults = Faults(self.journal)
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._clock = clock
        self._epoch = epoch
        self._sleep = sleep
        keys = tuple(keys)
        if keys:
            self.keys.add(*keys)
        if settings is not None:
            self.settings.replace(settings)
        self._routes = self.routes()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.journal.path)!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close this process's journal connections (the provider reopens them if used again)."""
        self.journal.close()

    def __enter__(self) -> Provider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- provider-specific parts ---------------------------------------------------------------

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        """An error answer in the provider's own format."""
        raise NotImplementedError

    def named_tenant(self, request: httpx.Request, groups: Mapping[str, str]) -> str | None:
        """The tenant a request says it acts for, if it names one."""
        named: str | None = request.headers.get(TENANT_HEADER)
        return named

    def unknown_route(self, request: httpx.Request) -> str:
        """What :meth:`unserved` says of a request no route matches: no route for its method
        and path, or, when the path has routes, not for this method."""
        path = request.url.path
        methods = sorted({r.method for r in self._routes if r.pattern.fullmatch(path)})
        if methods:
            return (
                f"{request.method} {path}: this path is served for {', '.join(methods)} only"
            )
        return f"{request.method} {path}: no such route"

    def credential(self, request: httpx.Request) -> str | None:
        """The API key secret a request presents (Bearer, ``token`` or Basic user)."""
        header = request.headers.get("Authorization", "")
        scheme, _, value = header.strip().partition(" ")
        scheme = scheme.lower()
        if scheme in ("bearer", "token"):
            return value.strip() or None
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return decoded.partition(":")[0] or None
        return None

    def unauthorized(self, request: httpx.Request) -> Reply:
        if not request.headers.get("Authorization"):
            return self.error(401, "No API key provided: send Authorization: Bearer <key>.")
        return self.error(401, "Invalid API key provided: the key is unknown or was revoked.")

    def notes(self) -> dict[str, str]:
        """What the provider has to say about some of its requests, by request id, for a
        timeline (a model: the turn it answered). None by default."""
        return {}

    def unserved(self, what: str, *, status: int = 404, code: str = "not_found") -> Reply:
        """The answer to a request beyond what this fake serves (``what``: a route, a method, a
        parameter or a media type its description lacks, in words). The client gets an error
        in the provider's format (``status``: 404 for a route, 400 for a parameter or a body);
        the journal records ``what`` as the request's ``world_limit``, and a crash test reports
        the case as the world's limit, never as the agent's violation."""
        reply = self.error(
            status,
            f"The fake {self.name} provider does not serve this request: {what}. (The "
            "simulated world ends here; the crash test reports it as the world's limit.)",
            code=code,
        )
        reply.world_limit = what
        return reply

    def rate_limited(self, retry_after: float) -> Reply:
        reply = self.error(429, "Too many requests: retry later.", code="rate_limit")
        reply.headers["Retry-After"] = f"{retry_after:g}"
        return reply

    # -- objects from outside ---------------------------------------------------------------

    def exported_objects(self, data: Any, *, where: str) -> list[Exported]:
        """The objects of an export document (``where``: its file, for errors): the fakes' own
        format here; a provider that reads its real counterpart's export extends this.
        Raises :class:`~fake_providers._exports.ExportError` saying what is wrong."""
        objects = own_format(data, provider=self.name, where=where)
        if objects is None:
            raise ExportError(
                f"{where} is not an export the {self.name} provider reads: give the fakes' "
                f"own format ({{\"format\": {EXPORT_FORMAT!r}, \"objects\": [...]}}, "
                "see fake_providers.Provider.export)."
            )
        return objects

    def seed(self, objects: Iterable[Exported], *, key: ApiKey, at: float) -> list[str]:
        """Put ``objects`` in the journal as effects made with ``key`` (its tenant, scopes
        and label) at harness time ``at``, as if requests had made them; their idempotency
        keys, if known, replay the object. The request ids, in order."""
        return seed_journal(
            self.journal, objects, key=key, at=at, provider=self.name,
            request_id_prefix=self.request_id_prefix, request_id_header=self.request_id_header,
            hash_of=payload_hash, then=self.seeded,
        )

    def seeded(self, conn: sqlite3.Connection, objects: Sequence[Exported]) -> None:
        """Called in :meth:`seed`'s transaction after ``objects`` went in: a provider whose
        own ids count up (issue numbers) moves its counters past theirs. Nothing by default."""

    def export(self) -> dict[str, Any]:
        """Every object in the journal, in the fakes' own export format (JSON-ready)."""
        return export_journal(self.journal, provider=self.name)

    # -- shared helpers for handlers -----------------------------------------------------------

    def visible(self, call: Call, object_type: str) -> list[dict[str, Any]]:
        """Objects of ``object_type`` of the caller's tenant a *search* can see now.

        A search lags: it sees only effects committed at or before ``now - search_lag``, and
        nothing while the ``search_misses`` switch is on.
        """
        return [json.loads(r["body"]) for r in self.effect_rows(call, object_type, lags=True)]

    def effect_rows(
        self, call: Call, object_type: str, *, lags: bool, columns: str = "body"
    ) -> list[sqlite3.Row]:
        """``columns`` (of the journal's effects table) of the caller's tenant's effects on
        objects of ``object_type``, in commit order: those a search sees now when it ``lags``
        (see :meth:`visible`), else all of them."""
        if lags and call.search_miss:
            return []
        horizon = call.now - call.settings.search_lag if lags else math.inf
        with self.journal.connection() as conn:
            rows: list[sqlite3.Row] = conn.execute(
                f"SELECT {columns} FROM effects WHERE object_type=? AND tenant_id=? AND "
                "time<=? ORDER BY seq",
                (object_type, call.tenant_id, horizon),
            ).fetchall()
        return rows

    def lookup(self, call: Call, object_type: str, object_id: str) -> dict[str, Any] | None:
        """The caller's tenant's object by id, consistently (it exists once committed)."""
        with self.journal.connection() as conn:
            row = conn.execute(
                "SELECT body FROM effects WHERE object_type=? AND object_id=? AND tenant_id=?",
                (object_type, object_id, call.tenant_id),
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def lookup_all(self, call: Call, object_type: str) -> list[dict[str, Any]]:
        """Every object of ``object_type`` of the caller's tenant, consistently."""
        return [json.loads(r["body"]) for r in self.effect_rows(call, object_type, lags=False)]

    # -- the pipeline --------------------------------------------------------------------------

    def _match(self, request: httpx.Request) -> tuple[Route | None, dict[str, str]]:
        path = request.url.path
        for route in self._routes:
            if route.method == request.method:
                found = route.pattern.fullmatch(path)
                if found and (route.accepts is None or route.accepts(request)):
                    return route, found.groupdict()
        return None, {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request, as the provider would.

        Raises ``httpx.ReadTimeout`` (lookup timeout switch) or ``httpx.RemoteProtocolError``
        (effect applied, response lost) when a fault says the client gets no response.
        """
        request.read()
        now = self._clock()
        route, groups = self._match(request)
        key = self.keys.find(self.credential(request))
        refusal = self._refusal(request, route, groups, key)
        latency = fired = miss = None
        with self.journal.transaction() as conn:
            seq = next_counter(conn, "request")
            if refusal is None and route is not None:
                kind: RequestKind = "write" if route.generates else route.kind
                latency = take(conn, "latency", kind)
                fired = (
                    take(conn, "rate_limit", kind)
                    or take(conn, "server_error", kind)
                    or take(conn, "lookup_timeout", kind)
                    or take(conn, "write_timeout", kind)
                )
                if route.search and fired is None:
                    miss = take(conn, "search_miss", kind)
        if latency is not None and latency.value:
            now += latency.value
            if self._sleep is not None:
                self._sleep(latency.value)
        presented = key if key is not None else self.keys.presented(self.credential(request))
        ctx = _Context(
            request, seq, f"{self.request_id_prefix}{seq:014d}", now, route, key, presented
        )
        if refusal is not None:
            return self._finish(ctx, refusal)
        assert route is not None and key is not None
        if fired is not None:
            return self._fault(ctx, fired)
        call = Call(
            request, route, groups, key, now, seq, ctx.request_id, self.settings.get(),
            miss is not None, 0.0 if self._epoch is None else self._epoch(),
        )
        try:
            reply = route.handler(call)
        except RecursionError:  # a JSON body nested thousands deep: the client's mistake
            reply = self.error(
                400, "The request body is nested too deep to read: send a flatter document."
            )
            return self._finish(ctx, reply)
        except Exception as exc:  # a bug must not take the server down; it is recorded
            reply = self.error(500, f"Internal error in the fake provider: {exc!r}.")
            return self._finish(ctx, reply, fault="internal_error")
        return self._finish(ctx, reply)

    def _refusal(
        self,
        request: httpx.Request,
        route: Route | None,
        groups: Mapping[str, str],
        key: ApiKey | None,
    ) -> Reply | None:
        """The answer to a request the provider refuses before doing anything: no route
        (404), no valid key (401), a key of another tenant or without the route's scope
        (403); ``None`` when it is admitted."""
        if route is None:
            return self.unserved(self.unknown_route(request))
        if key is None:
            return self.unauthorized(request)
        named = self.named_tenant(request, groups)
        if named is not None and named != key.tenant_id:
            return self.error(
                403,
                f"The key {key.key_id} acts for tenant {key.tenant_id!r} and may not act "
                f"for tenant {named!r}.",
                code="tenant_mismatch",
            )
        if not covers(key.scopes, route.scope):
            return self.error(
                403,
                f"The key {key.key_id} lacks the scope {route.scope!r} that "
                f"{route.operation} requires (it has: {', '.join(sorted(key.scopes))}).",
                code="insufficient_scope",
            )
        return None

    def _fault(self, ctx: _Context, fault: ActiveFault) -> httpx.Response:
        if fault.kind == "rate_limit":
            return self._finish(ctx, self.rate_limited(fault.value or 0.0), fault="rate_limit")
        if fault.kind == "server_error":
            status = int(fault.value or 500)
            reply = self.error(status, "The provider had an internal error; nothing was applied.")
            return self._finish(ctx, reply, fault="server_error")
        assert fault.kind in ("lookup_timeout", "write_timeout")
        self._record(ctx, Reply(status=0), fault=fault.kind, status=None)
        raise httpx.ReadTimeout("The read operation timed out", request=ctx.request)

    def _record(
        self, ctx: _Context, reply: Reply, *, fault: str | None, status: int | None,
        conn: sqlite3.Connection | None = None,
    ) -> None:
        route, key = ctx.route, ctx.key or ctx.presented
        row = {
            "seq": ctx.seq,
            "request_id": ctx.request_id,
            "time": ctx.now,
            "method": ctx.request.method,
            "path": ctx.request.url.path,
            "operation": route.operation if route else None,
            "kind": route.kind if route else None,
            "tenant_id": key.tenant_id if key else None,
            "key_id": key.key_id if key else None,
            "scopes": json.dumps(sorted(key.scopes)) if key else None,
            "label": key.label if key else None,
            "idempotency_key": _idempotency_key(ctx, reply),
            "correlation_id": reply.correlation_id or ctx.request.headers.get(CORRELATION_HEADER),
            "attempt_id": ctx.request.headers.get(ATTEMPT_HEADER),
            "operation_key": reply.operation_key,
            "payload_hash": reply.payload_hash,
            "args_hash": reply.args_hash,
            "status": status,
            "effect_applied": int(reply.effect is not None),
            "object_id": reply.object_id,
            "aliases": json.dumps(list(reply.aliases)),
            "fault": fault,
            "replayed": int(reply.replayed),
            "world_limit": reply.world_limit,
            # Not the harness clock (frozen inside a worker): the machine's, which every
            # process shares, to order requests to several providers.
            "mono_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
        }
        sql = (
            f"INSERT INTO requests({', '.join(row)}) "
            f"VALUES ({', '.join(':' + name for name in row)})"
        )
        if conn is not None:
            conn.execute(sql, row)
        else:
            with self.journal.transaction() as own:
                own.execute(sql, row)

    def _finish(self, ctx: _Context, reply: Reply, *, fault: str | None = None) -> httpx.Response:
        reply.headers[self.request_id_header] = ctx.request_id
        lost = None
        with self.journal.transaction() as conn:
            effect = reply.effect
            if effect is not None:
                assert ctx.key is not None and ctx.route is not None
                assert reply.payload_hash is not None and reply.operation_key is not None
                conn.execute(
                    "INSERT INTO effects(time, operation, operation_key, object_type, object_id, "
                    "tenant_id, key_id, scopes, label, idempotency_key, correlation_id, "
                    "attempt_id, payload_hash, args_hash, request_id, aliases, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ctx.now, ctx.route.operation, reply.operation_key, effect.object_type,
                        effect.object_id, ctx.key.tenant_id, ctx.key.key_id,
                        json.dumps(sorted(ctx.key.scopes)), ctx.key.label,
                        reply.idempotency_key, reply.correlation_id,
                        ctx.request.headers.get(ATTEMPT_HEADER), reply.payload_hash,
                        reply.args_hash, ctx.request_id, json.dumps(list(reply.aliases)),
                        json.dumps(effect.body),
                    ),
                )
            if effect is not None or (
                ctx.route is not None and ctx.route.generates and reply.status < 400
            ):
                lost = take(conn, "response_lost", "write")
            variant = None if lost is None else LOST_RESPONSES[int(lost.value or 0)]
            if variant is not None:
                fault = "response_lost" if variant == "reset" else f"response_lost:{variant}"
            self._record(
                ctx, reply, fault=fault, status=502 if variant == "502" else reply.status,
                conn=conn,
            )
            if reply.on_commit is not None:
                reply.on_commit(conn, reply)
        if variant == "reset":
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=ctx.request
            )
        if variant == "timeout":
            raise httpx.ReadTimeout("The read operation timed out", request=ctx.request)
        if variant == "502":
            # A gateway in front of the provider lost the answer: the effect is applied.
            gateway = self.error(502, "Bad gateway: the upstream answer was lost.")
            gateway.headers[self.request_id_header] = ctx.request_id
            reply = dataclasses.replace(gateway, effect=reply.effect, object_id=reply.object_id)
        key = ctx.key or ctx.presented
        info = ResponseInfo(
            operation=ctx.route.operation if ctx.route else None,
            kind=ctx.route.kind if ctx.route else None,
            status=reply.status,
            effect_applied=reply.effect is not None,
            replayed=reply.replayed,
            request_id=ctx.request_id,
            label=key.label if key else None,
            idempotency_key=_idempotency_key(ctx, reply),
            provider=self.name,
            tool_calls=reply.tool_calls,
            plumbing=bool(ctx.route is not None and ctx.route.plumbing),
            world_limit=reply.world_limit,
        )
        return httpx.Response(
            reply.status, headers=reply.headers, content=reply.body, request=ctx.request,
            extensions={"crashpoints": info},
        )


def _idempotency_key(ctx: _Context, reply: Reply) -> str | None:
    found: str | None = reply.idempotency_key or ctx.request.headers.get("Idempotency-Key")
    return found
