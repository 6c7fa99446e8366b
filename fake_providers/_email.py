"""email: a non-idempotent, SendGrid-like provider (v3 mail send and the email activity API).

Endpoints (JSON; ``X-Request-Id`` on every response; ``on-behalf-of`` may name the tenant and
must then match the key's)::

    POST /v3/mail/send            send (202, empty body, X-Message-Id)    email:write
    GET  /v3/messages/{msg_id}    message lookup by id (consistent)       email:read   lookup
    GET  /v3/messages?query=      message search (lags behind sends)      email:read   lookup

Every accepted send is an effect: sending the same body twice sends two messages.

Correlation id, first found of: ``custom_args["crashpoints_correlation_id"]`` (top level or in a
personalization), the mail header ``X-Correlation-Id`` (the body's ``headers``), the HTTP header
``X-Correlation-Id``. ``custom_args["crashpoints_args_hash"]`` is recorded as the declared args
hash. Custom args are stored and returned as ``unique_args``.

Search queries: clauses ``unique_args['key']="value"``, ``msg_id="..."``, ``to_email="..."``,
``from_email="..."``, ``subject="..."``, optionally parenthesized, joined by ``AND``;
``limit`` (1..1000, default 10).

Aliases (journal ``aliases``): the message id, as ``X-Message-Id`` gives it, of a message sent
or looked up by id.

Payload hash: ``args_hash`` of the JSON body as sent. Logical operation: the correlation id, or
the payload hash when there is none.

Messages sent elsewhere come in from SendGrid's email activity JSON (``GET /v3/messages``):
see :meth:`Email.exported_objects`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import httpx

from ._described.engine import DescribedProvider
from ._exports import Exported, ExportError, listed
from ._provider import (
    CORRELATION_HEADER,
    Call,
    EffectDraft,
    Reply,
    Route,
    json_body,
    json_document,
    payload_hash,
)

__all__ = ["Email", "exported_time", "iso_time"]

_CLAUSE = re.compile(
    r"""\s*\(?\s*(?:unique_args\[(?P<q>['"])(?P<arg>[^'"]+)(?P=q)\]|(?P<field>[a-z_]+))"""
    r"""\s*=\s*(?P<vq>['"])(?P<value>[^'"]*)(?P=vq)\s*\)?\s*"""
)
_FIELDS = frozenset({"msg_id", "to_email", "from_email", "subject", "status"})


def iso_time(seconds: float) -> str:
    """Unix seconds as an ISO 8601 UTC timestamp (``2026-01-01T00:00:00Z``)."""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exported_time(value: Any, where: str) -> float:
    """Unix seconds of an export's ISO 8601 timestamp with its UTC offset
    (``2026-01-01T00:00:00Z``, ``...+02:00``); raises :class:`ExportError` otherwise."""
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ExportError(
            f"{where} must be an ISO 8601 time with its UTC offset, such as "
            f"'2026-01-01T00:00:00Z', not {value!r}; give the JSON as the provider's API "
            "returned it."
        )
    return moment.timestamp()


class _Invalid(Exception):
    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field


def _address(value: Any, field: str) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("email"), str) or "@" not in (
        value["email"]
    ):
        raise _Invalid(
            f"The {field} object must be provided with a valid email address.", f"{field}.email"
        )
    email: str = value["email"]
    return email


def _str_dict(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _Invalid(f"{field} must be an object of string keys and string values.", field)
    return dict(value)


#: The operations of scheduled sends: served as the world's limit (not simulated).
_SCHEDULING: tuple[tuple[str, str, str, Any, str], ...] = (
    ("POST", r"/v3/mail/batch/?", "mail.batch.create", "write", "write"),
    ("GET", r"/v3/mail/batch/[^/]+/?", "mail.batch.retrieve", "lookup", "read"),
    *(
        (method, r"/v3/user/scheduled_sends(/[^/]+)?/?", f"scheduled_sends.{verb}", kind, scope)
        for method, verb, kind, scope in (
            ("GET", "get", "lookup", "read"), ("POST", "create", "write", "write"),
            ("PATCH", "update", "write", "write"), ("DELETE", "delete", "write", "write"),
        )
    ),
)


class Email(DescribedProvider):
    """The email provider: not idempotent, SendGrid. See the module docstring."""

    name = "email"
    default_base_url = "https://email.crashpoints.test"
    request_id_prefix = "sg_req_"
    description = "sendgrid"
    style = "plain"

    def own_routes(self) -> list[Route]:
        return [
            Route("POST", re.compile(r"/v3/mail/send/?"), "mail.send", "write", "email:write",
                  self._send),
            *(
                Route(method, re.compile(path), name, kind, f"email:{scope}",
                      lambda call: self.unserved(
                          f"{call.request.method} {call.request.url.path}: scheduled sends "
                          "(their batch ids, pausing and cancelling them) are not simulated"))
                for method, path, name, kind, scope in _SCHEDULING
            ),
            Route("GET", re.compile(r"/v3/messages/?"), "messages.search", "lookup",
                  "email:read", self._search, search=True),
            Route("GET", re.compile(r"/v3/messages/(?P<msg_id>[^/]+)/?"), "messages.get",
                  "lookup", "email:read", self._get),
        ]

    def error(self, status: int, message: str, *, code: str | None = None,
              field: str | None = None) -> Reply:
        body = {"errors": [{"message": message, "field": field}]}
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def named_tenant(self, request: httpx.Request, groups: Any) -> str | None:
        named: str | None = request.headers.get("on-behalf-of")
        return named or super().named_tenant(request, groups)

    def unauthorized(self, request: httpx.Request) -> Reply:
        return self.error(401, "The provided authorization grant is invalid, expired, or revoked")

    def exported_objects(self, data: Any, *, where: str) -> list[Exported]:
        """SendGrid's email activity JSON (``GET /v3/messages``: ``{"messages": [...]}``, or one
        message), or the fakes' own format.

        Each message becomes the one the fake stores for a send, so ``messages.get`` by its
        ``msg_id`` and ``messages.search`` on ``msg_id``, ``from_email``, ``to_email``,
        ``subject`` and ``status`` find it. What the activity JSON does not carry gets what a
        send to one recipient with no custom args or mail headers would have: ``recipients``
        is ``[to_email]``, ``unique_args`` and ``headers`` are empty, no correlation id. A
        message that does carry ``unique_args`` as an object (the fake's own
        ``messages.get`` answer) keeps them, and its correlation id with them.
        The messages come oldest first (by ``last_event_time``, the only time the activity
        JSON gives), the order the fake would have sent them in. Raises
        :class:`ExportError` saying what is wrong."""
        if isinstance(data, Mapping) and data.get("format") is not None:
            return super().exported_objects(data, where=where)
        messages = [_activity_message(item, f"{where}: message {index}")
                    for index, item in enumerate(listed(data, where=where))]
        return sorted(messages, key=lambda message: message.created or 0.0)

    def _send(self, call: Call) -> Reply:
        request = call.request
        if call.media_type != "application/json":
            return self.error(400, "Content-Type should be application/json.")
        try:
            mail = json_document(request.content)
        except ValueError:
            return self.error(400, "The request body must be valid JSON.")
        if not isinstance(mail, dict):
            return self.error(400, "The request body must be a JSON object.")
        scheduled = [name for name in ("send_at", "batch_id") if mail.get(name) is not None]
        if scheduled:
            # A mail sent later, and cancelled or not before then: not simulated. Said so,
            # rather than sent at once (which a correct agent would be blamed for).
            return self.unserved(
                f"POST /v3/mail/send with {scheduled[0]!r}: scheduled sends are not simulated"
            )
        try:
            message = self._message(call, mail)
        except _Invalid as exc:
            return self.error(400, str(exc), field=exc.field)
        phash = payload_hash(mail)
        if phash is None:
            return self.error(400, "The request body must be valid JSON.")
        args = message["unique_args"]
        correlation = (
            args.get("crashpoints_correlation_id")
            or message["headers"].get(CORRELATION_HEADER)
            or request.headers.get(CORRELATION_HEADER)
        )
        message["correlation_id"] = correlation
        msg_id = message["msg_id"]
        return Reply(
            202,
            b"",
            {"X-Message-Id": msg_id},
            effect=EffectDraft("message", msg_id, message),
            correlation_id=correlation,
            operation_key=correlation or phash,
            payload_hash=phash,
            args_hash=args.get("crashpoints_args_hash"),
            object_id=msg_id,
            aliases=(msg_id,),
        )

    def _message(self, call: Call, mail: dict[str, Any]) -> dict[str, Any]:
        personalizations = mail.get("personalizations")
        if not isinstance(personalizations, list) or not personalizations:
            raise _Invalid(
                "The personalizations field is required and must have at least one "
                "personalization.", "personalizations",
            )
        recipients: list[str] = []
        unique_args = _str_dict(mail.get("custom_args"), "custom_args")
        subjects: list[Any] = []
        for i, item in enumerate(personalizations):
            if not isinstance(item, dict) or not isinstance(item.get("to"), list) or not item["to"]:
                raise _Invalid(
                    "The to array is required for all personalization objects, and must have "
                    "at least one email object with a valid email address.",
                    f"personalizations.{i}.to",
                )
            recipients += [_address(to, f"personalizations.{i}.to") for to in item["to"]]
            unique_args.update(_str_dict(item.get("custom_args"), f"personalizations.{i}"
                                         ".custom_args"))
            subjects.append(item.get("subject"))
        sender = _address(mail.get("from"), "from")
        templated = isinstance(mail.get("template_id"), str)
        subject = mail.get("subject")
        if not templated and not (isinstance(subject, str) and subject) and not all(
            isinstance(s, str) and s for s in subjects
        ):
            raise _Invalid(
                "The subject is required. You can get around this requirement if you use a "
                "template with a subject defined or if every personalization has a subject "
                "defined.", "subject",
            )
        content = mail.get("content")
        content_ok = isinstance(content, list) and bool(content) and all(
            isinstance(c, dict) and isinstance(c.get("type"), str)
            and isinstance(c.get("value"), str) and c["value"]
            for c in content
        )
        if (content is not None or not templated) and not content_ok:
            raise _Invalid(
                "Unless a valid template_id is provided, the content parameter is required. "
                "There must be at least one defined content block with a type and a value.",
                "content",
            )
        headers = _str_dict(mail.get("headers"), "headers")
        return {
            "msg_id": f"msg_{call.seq:014d}",
            "from_email": sender,
            "to_email": recipients[0],
            "recipients": recipients,
            "subject": subject if isinstance(subject, str) else next(
                (s for s in subjects if isinstance(s, str)), None
            ),
            "status": "delivered",
            "opens_count": 0,
            "clicks_count": 0,
            "last_event_time": iso_time(call.wall),
            "unique_args": unique_args,
            "headers": headers,
        }

    def _get(self, call: Call) -> Reply:
        msg_id = call.groups["msg_id"]
        message = self.current(call, "message", msg_id)
        if message is None:
            return self.error(404, f"message {msg_id!r} not found", field="msg_id")
        reply = Reply(200, json_body(_details(message)), {"Content-Type": "application/json"})
        reply.object_id = msg_id
        reply.aliases = (msg_id,)
        return reply

    def _search(self, call: Call) -> Reply:
        query = call.query.get("query", "")
        try:
            clauses = _parse_query(query) if query else []
            limit = int(call.query.get("limit", "10"))
        except ValueError as exc:
            return self.error(400, f"invalid query {query!r}: {exc}", field="query")
        if not 1 <= limit <= 1000:
            return self.error(400, "limit must be between 1 and 1000", field="limit")
        hits = [m for m in self.objects(call, "message", lags=True) if _matches(m, clauses)][:limit]
        body = {"messages": [_summary(m) for m in hits]}
        return Reply(200, json_body(body), {"Content-Type": "application/json"})


def _activity_message(item: Any, where: str) -> Exported:
    """One message of SendGrid's email activity JSON, as :meth:`Email._send` stores it."""
    if not isinstance(item, Mapping):
        raise ExportError(f"{where} is {type(item).__name__} JSON, not a SendGrid message.")
    msg_id = item.get("msg_id")
    if not isinstance(msg_id, str) or not msg_id:
        raise ExportError(
            f"{where} has no msg_id (found {msg_id!r}); export messages as SendGrid's email "
            "activity API lists them (GET /v3/messages?query=...&limit=1000, "
            '{"messages": [...]}).'
        )
    at = f"{where} ({msg_id})"
    for name in ("from_email", "to_email"):
        address = item.get(name)
        if not isinstance(address, str) or "@" not in address:
            raise ExportError(f"{at}: {name} must be an email address, not {address!r}.")
    subject = item.get("subject")
    if subject is not None and not isinstance(subject, str):
        raise ExportError(f"{at}: subject must be a string, not {subject!r}.")
    status = item.get("status")
    if not isinstance(status, str) or not status:
        raise ExportError(f"{at}: status must be SendGrid's status of the message "
                          f"('processed', 'delivered', 'not_delivered'), not {status!r}.")
    counts = {}
    for name in ("opens_count", "clicks_count"):
        count = item.get(name, 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ExportError(f"{at}: {name} must be a count (an integer from 0), "
                              f"not {count!r}.")
        counts[name] = count
    if "last_event_time" not in item:
        raise ExportError(f"{at} has no last_event_time.")
    created = exported_time(item["last_event_time"], f"{at}: last_event_time")
    unique_args = item.get("unique_args")
    if not isinstance(unique_args, Mapping):  # the activity list has none ("Unavailable")
        unique_args = {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in unique_args.items()):
        raise ExportError(f"{at}: unique_args must map strings to strings.")
    message = {
        "msg_id": msg_id,
        "from_email": item["from_email"],
        "to_email": item["to_email"],
        "recipients": [item["to_email"]],
        "subject": subject,
        "status": status,
        **counts,
        "last_event_time": iso_time(created),
        "unique_args": dict(unique_args),
        "headers": {},
        "correlation_id": unique_args.get("crashpoints_correlation_id"),
    }
    return Exported(object_type="message", object_id=msg_id, operation="mail.send",
                    body=message, created=created, aliases=(msg_id,))


def _summary(message: dict[str, Any]) -> dict[str, Any]:
    keys = ("from_email", "msg_id", "subject", "to_email", "status", "opens_count",
            "clicks_count", "last_event_time")
    return {k: message[k] for k in keys}


def _details(message: dict[str, Any]) -> dict[str, Any]:
    details = _summary(message)
    details["unique_args"] = message["unique_args"]
    details["events"] = [
        {"event_name": "delivered", "processed": message["last_event_time"]}
    ]
    return details


def _parse_query(query: str) -> list[tuple[str, str]]:
    clauses: list[tuple[str, str]] = []
    for part in re.split(r"\s+AND\s+", query.strip(), flags=re.IGNORECASE):
        found = _CLAUSE.fullmatch(part)
        if not found or (found["field"] is not None and found["field"] not in _FIELDS):
            raise ValueError(
                f"cannot parse {part!r}; this fake supports unique_args['key']=\"value\" and "
                f"{'/'.join(sorted(_FIELDS))}=\"value\" clauses joined by AND"
            )
        name = f"unique_args.{found['arg']}" if found["arg"] is not None else str(found["field"])
        clauses.append((name, found["value"]))
    return clauses


def _matches(message: dict[str, Any], clauses: list[tuple[str, str]]) -> bool:
    for name, value in clauses:
        if name.startswith("unique_args."):
            actual = message["unique_args"].get(name[len("unique_args."):])
        else:
            actual = message.get(name)
        if actual != value:
            return False
    return True
