"""payments: an idempotent, Stripe-like provider (a subset of Stripe's v1 API).

Endpoints (form-encoded bodies, as Stripe takes them; JSON answers; ``Request-Id`` on every
response; ``Stripe-Account`` may name the tenant and must then match the key's)::

    POST /v1/charges                    create a charge           payments:write
    GET  /v1/charges/{id}               retrieve (consistent)     payments:read   lookup
    GET  /v1/charges/search?query=      search (lags)             payments:read   lookup
    POST /v1/payment_intents            create a payment intent   payments:write
    GET  /v1/payment_intents/{id}       retrieve (consistent)     payments:read   lookup
    GET  /v1/payment_intents/search     search (lags)             payments:read   lookup
    POST /v1/refunds                    refund a charge           payments:write
    GET  /v1/refunds/{id}               retrieve (consistent)     payments:read   lookup
    GET  /v1/refunds?charge=            list a charge's refunds   payments:read   lookup
                                        (consistent, newest first)

A refund names a ``charge`` of the caller's tenant (404 ``resource_missing`` otherwise) and an
``amount`` (default: what is left of the charge), at most what is left (400
``amount_too_large``; 400 ``charge_already_refunded`` when nothing is left); ``reason`` is
``duplicate``, ``fraudulent`` or ``requested_by_customer``. A charge shows ``amount_refunded``
and ``refunded``, counted from its refunds when it is read.

Search queries: clauses ``metadata['key']:'value'``, ``status:'succeeded'``,
``currency:'usd'``, ``amount:1000``, ``customer:'cus_1'`` joined by ``AND``.

Idempotency (``Idempotency-Key``, scoped per tenant, kept ``retention`` harness seconds):
the same key and parameters replay the saved response byte for byte with
``Idempotent-Replayed: true`` and ``Original-Request``; other parameters: 400
``idempotency_error``; while the first request is in flight: 409 ``idempotency_key_in_use``
(nothing stored). Validation errors are not saved (Stripe saves only requests that started
executing); a card decline (source ``tok_chargeDeclined`` or payment method
``pm_card_chargeDeclined``) is saved and replayed, with no effect. The in-flight marker records
its owner (pid and process start time): a marker whose owner died (a killed worker) is stale and
taken over. The effect and the saved response are committed in one transaction.

Aliases (journal ``aliases``): the object id (``ch_...``, ``pi_...``) of the charge or payment
intent a create made (also a declined one, which its 402 names), replayed, or retrieved.

Payload hash: ``args_hash`` of the parsed form parameters (nested as Stripe nests
``metadata[key]``; values stay strings except ``amount``, an integer), without ``expand``.
``metadata[crashpoints_args_hash]`` is recorded as the declared args hash;
``metadata[crashpoints_correlation_id]`` as the correlation id.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from ._described.engine import DescribedProvider, Refused, document, operations
from ._described.forms import parse_form
from ._described.operations import Operation
from ._described.shapes import coerce
from ._exports import Exported, listed
from ._idempotency import release as _release_key
from ._idempotency import reserve as _reserve_key
from ._idempotency import saver as _saver
from ._provider import Call, EffectDraft, Reply, Route, json_body, payload_hash
from ._stripe_exports import OWN_ID, stripe_object
from ._stripe_query import parse_query, query_matches
from ._stripe_states import DECLINING, act

__all__ = ["Payments"]

_REFUND_REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer"})


class Payments(DescribedProvider):
    """The payments provider: idempotent, Stripe. See the module docstring for the API."""

    name = "payments"
    default_base_url = "https://payments.crashpoints.test"
    request_id_header = "Request-Id"
    description = "stripe"
    style = "stripe"
    idempotency_header = "Idempotency-Key"
    actions_once = True

    def own_routes(self) -> list[Route]:
        def r(method: str, path: str, op: str, kind: Any, scope: str, handler: Any,
              search: bool = False) -> Route:
            return Route(method, re.compile(path), op, kind, scope, handler, search)

        return [
            r("POST", r"/v1/charges/?", "charges.create", "write", "payments:write",
              lambda c: self._create(c, "charge")),
            r("GET", r"/v1/charges/search/?", "charges.search", "lookup", "payments:read",
              lambda c: self._search(c, "charge"), search=True),
            r("POST", r"/v1/payment_intents/?", "payment_intents.create", "write",
              "payments:write", lambda c: self._create(c, "payment_intent")),
            r("GET", r"/v1/payment_intents/search/?", "payment_intents.search", "lookup",
              "payments:read", lambda c: self._search(c, "payment_intent"), search=True),
            r("POST", r"/v1/refunds/?", "refunds.create", "write", "payments:write",
              lambda c: self._create(c, "refund")),
        ]

    def error(
        self, status: int, message: str, *, code: str | None = None, param: str | None = None,
        type: str | None = None,
    ) -> Reply:
        if type is None:
            type = "api_error" if status >= 500 else "invalid_request_error"
        err: dict[str, Any] = {"type": type, "message": message}
        if code is not None:
            err["code"] = code
        if param is not None:
            err["param"] = param
        return Reply(status, json_body({"error": err}), {"Content-Type": "application/json"})

    def named_tenant(self, request: httpx.Request, groups: Any) -> str | None:
        return request.headers.get("Stripe-Account") or super().named_tenant(request, groups)

    # -- create --------------------------------------------------------------------------------

    def exported_objects(self, data: Any, *, where: str) -> list[Exported]:
        """Stripe's own JSON as its API lists it (``{"object": "list", "data": [...]}``, a
        search result, a JSON array, or one object) of charges, payment intents and refunds;
        or the fakes' own format. An object may carry an ``idempotency_key`` field (not
        Stripe's: add it where your request logs show the key that made it)."""
        if isinstance(data, dict) and data.get("format") is not None:
            return super().exported_objects(data, where=where)
        out = [stripe_object(item, f"{where}: object {index}")
               for index, item in enumerate(listed(data, where=where))]
        # Oldest first, the order the fake would have made them in (Stripe lists newest
        # first: of two made in the same second, the later one is listed first).
        return sorted(reversed(out), key=lambda obj: obj.created or 0.0)

    def seeded(self, conn: sqlite3.Connection, objects: Sequence[Exported]) -> None:
        """Moves the request counter the fake's own ids come from (``ch_<24 digits>``) past
        the ids seeded, so a charge made after seeding never takes one (an export of a fake)."""
        taken = [int(m.group(1)) for obj in objects
                 if (m := OWN_ID.fullmatch(obj.object_id)) is not None]
        if taken:
            conn.execute(
                "INSERT INTO counters(name, value) VALUES ('request', ?) ON CONFLICT(name) "
                "DO UPDATE SET value = max(value, excluded.value)",
                (max(taken),),
            )

    def _create(self, call: Call, object_type: str) -> Reply:
        request = call.request
        content_type = call.media_type
        if content_type != "application/x-www-form-urlencoded":
            return self.error(
                400,
                f"Invalid request: the body must be application/x-www-form-urlencoded, not "
                f"{content_type or 'missing'!r}.",
                code="invalid_content_type",
            )
        try:
            params = parse_form(request.content.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return self.error(400, f"Invalid request body: {exc}.", code="parameter_invalid")
        logical = {k: v for k, v in params.items() if k != "expand"}
        if isinstance(logical.get("amount"), str) and logical["amount"].isdigit():
            logical["amount"] = int(logical["amount"])
        phash = payload_hash(logical)
        full_hash = payload_hash(params)
        if phash is None or full_hash is None:
            return self.error(400, "Invalid request body.", code="parameter_invalid")
        metadata = params.get("metadata") if isinstance(params.get("metadata"), dict) else {}
        assert isinstance(metadata, dict)
        presented_key = request.headers.get("Idempotency-Key") or None
        base = Reply(
            0,
            idempotency_key=presented_key,
            operation_key=presented_key or phash,
            payload_hash=phash,
            args_hash=metadata.get("crashpoints_args_hash"),
            correlation_id=metadata.get("crashpoints_correlation_id"),
        )
        idem = presented_key if call.settings.idempotency else None
        if idem is not None:
            early = self._reserve(call, idem, full_hash, base)
            if early is not None:
                return early
        try:
            reply = self._execute(call, object_type, params, logical, base)
        except BaseException:
            if idem is not None:
                self._release(call, idem)
            raise
        if idem is None:
            return reply
        if reply.status in (400, 404):  # refused before executing: Stripe saves nothing
            self._release(call, idem)
            return reply
        reply.on_commit = _saver(call, idem)
        return reply

    def _reserve(self, call: Call, key: str, params_hash: str, base: Reply) -> Reply | None:
        """Claim ``key`` for this request, or answer now (replay, mismatch, in use)."""
        answer = _reserve_key(
            self, call, key, params_hash,
            in_use=lambda message: self.error(409, message, code="idempotency_key_in_use"),
            mismatch=lambda message: self.error(400, message, type="idempotency_error"),
        )
        if answer is None:
            return None
        answer = self._with(base, answer)
        if answer.replayed:
            answer.object_id = _named_object(json.loads(answer.body))
            answer.aliases = (answer.object_id,) if answer.object_id else ()
        return answer

    def _release(self, call: Call, key: str) -> None:
        _release_key(self, call, key)

    @staticmethod
    def _with(base: Reply, answer: Reply) -> Reply:
        answer.idempotency_key = base.idempotency_key
        answer.operation_key = base.operation_key
        answer.payload_hash = base.payload_hash
        answer.args_hash = base.args_hash
        answer.correlation_id = base.correlation_id
        return answer

    def _execute(
        self, call: Call, object_type: str, params: dict[str, Any], logical: dict[str, Any],
        base: Reply,
    ) -> Reply:
        if object_type == "refund":
            return self._refund(call, params, logical, base)
        path = "/v1/charges" if object_type == "charge" else "/v1/payment_intents"
        unknown = self._known(call, path, params)
        if unknown is not None:
            return self._with(base, unknown)
        for name in ("amount", "currency"):
            if name not in params:
                return self._with(base, self.error(
                    400, f"Missing required param: {name}.", code="parameter_missing",
                    param=name,
                ))
        amount = logical["amount"]
        if not isinstance(amount, int) or amount < 1:
            return self._with(base, self.error(
                400, f"Invalid positive integer: amount {params['amount']!r}.",
                code="parameter_invalid_integer", param="amount",
            ))
        currency = params["currency"]
        if not isinstance(currency, str) or not re.fullmatch(r"[A-Za-z]{3}", currency):
            return self._with(base, self.error(
                400, f"Invalid currency: {currency!r}. Use a three-letter ISO code like 'usd'.",
                param="currency",
            ))
        metadata = params.get("metadata", {})
        if metadata == "":
            metadata = {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            return self._with(base, self.error(
                400, "Invalid metadata: pass metadata[key]=value pairs of strings.",
                param="metadata",
            ))
        obj, declined = _payment(call, object_type, params, amount, currency, metadata)
        object_id: str = obj["id"]
        answer = self._with(base, Reply(200, object_id=object_id, aliases=(object_id,)))
        if declined:
            error: dict[str, Any] = {
                "type": "card_error",
                "code": "card_declined",
                "decline_code": "generic_decline",
                "message": "Your card was declined.",
            }
            error["charge" if object_type == "charge" else "payment_intent"] = object_id
            answer.status = 402
            answer.body = json_body({"error": error})
        else:
            answer.body = self._answer_of(call, path, object_type, obj)
            answer.effect = EffectDraft(object_type, object_id, obj)
        answer.headers["Content-Type"] = "application/json"
        return answer

    def _refund(
        self, call: Call, params: dict[str, Any], logical: dict[str, Any], base: Reply
    ) -> Reply:
        def invalid(message: str, param: str, code: str = "parameter_invalid") -> Reply:
            return self._with(base, self.error(400, message, code=code, param=param))

        unknown = self._known(call, "/v1/refunds", params)
        if unknown is not None:
            return self._with(base, unknown)
        charge_id = params.get("charge")
        if not isinstance(charge_id, str) or not charge_id:
            return invalid("Missing required param: charge.", "charge", "parameter_missing")
        charge = self.current(call, "charge", charge_id)
        if charge is None:
            return self._with(base, self.error(
                404, f"No such charge: '{charge_id}'", code="resource_missing", param="charge"
            ))
        left = int(charge["amount"]) - self._refunded(call, charge_id)
        if left <= 0:
            return invalid(f"Charge {charge_id} has already been refunded.", "charge",
                           "charge_already_refunded")
        amount = logical.get("amount", left)
        if not isinstance(amount, int) or amount < 1:
            return invalid(f"Invalid positive integer: amount {params.get('amount')!r}.",
                           "amount", "parameter_invalid_integer")
        if amount > left:
            return invalid(
                f"Refund amount ({amount}) is greater than unrefunded amount on charge "
                f"({left}).", "amount", "amount_too_large",
            )
        reason = params.get("reason")
        if reason is not None and reason not in _REFUND_REASONS:
            return invalid(f"Invalid reason: {reason!r}; use one of "
                           f"{', '.join(sorted(_REFUND_REASONS))}.", "reason")
        metadata = params.get("metadata") or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            return invalid("Invalid metadata: pass metadata[key]=value pairs of strings.",
                           "metadata")
        refund_id = f"re_{call.seq:024d}"
        refund = {
            "id": refund_id,
            "object": "refund",
            "amount": amount,
            "charge": charge_id,
            "currency": charge["currency"],
            "created": int(call.wall),
            "metadata": metadata,
            "reason": reason,
            "status": "succeeded",
        }
        answer = self._with(base, Reply(200, object_id=refund_id, aliases=(refund_id,)))
        answer.body = self._answer_of(call, "/v1/refunds", "refund", refund)
        answer.effect = EffectDraft("refund", refund_id, refund)
        answer.headers["Content-Type"] = "application/json"
        return answer

    def _refunded(self, call: Call, charge_id: str) -> int:
        return sum(
            int(r.get("amount") or 0) for r in self.objects(call, "refund")
            if r.get("charge") == charge_id and r.get("status") != "canceled"
        )

    def present(self, call: Call, object_type: str, obj: dict[str, Any]) -> dict[str, Any]:
        """A charge shows what was refunded of it, counted from its refunds."""
        if object_type != "charge" or "amount" not in obj:
            return obj
        refunded = self._refunded(call, str(obj["id"]))
        return {**obj, "amount_refunded": refunded, "refunded": refunded >= obj["amount"]}

    def aliases(self, call: Call, obj: Mapping[str, Any], field: str) -> tuple[str, ...]:
        """An object's id: the one name Stripe's answers give it."""
        return (str(obj[field]),) if obj.get(field) else ()

    def act(self, call: Call, op: Operation, verb: str, obj: dict[str, Any],
            body: dict[str, Any]) -> dict[str, Any]:
        """A payment intent's confirm, capture and cancel as its status machine allows them;
        a charge's capture; a refund's cancel."""
        return act(op.object_type or "", verb, obj, body)

    def search_predicate(self, op: Operation, call: Call, body: Any
                         ) -> Callable[[Mapping[str, Any]], bool]:
        """Stripe's search language: ``field:'value'`` and ``metadata['key']:'value'``
        clauses joined by ``AND``."""
        try:
            clauses = parse_query(str(call.query.get("query") or ""))
        except ValueError as exc:
            raise Refused(400, f"Invalid search query: {exc}.") from None
        return lambda obj: query_matches(dict(obj), clauses)

    def _answer_of(self, call: Call, path: str, object_type: str, obj: dict[str, Any]) -> bytes:
        """``obj`` as the answer of ``POST path`` documents it."""
        op = next(o for o in operations(self.description)
                  if o.method == "POST" and o.template == path)
        return json_body(self.render(call, op.response, object_type, obj))

    def _known(self, call: Call, path: str, params: Mapping[str, Any]) -> Reply | None:
        """The world's limit for a parameter that ``POST path``'s description lacks."""
        op = next(o for o in operations(self.description)
                  if o.method == "POST" and o.template == path)
        known = (op.body or {}).get("properties") or {}
        for name in params:
            if name not in known and name != "expand":
                return self.unserved(f"POST {path}: the parameter {name!r}", status=400,
                                     code="parameter_unknown")
        return None

    def _search(self, call: Call, object_type: str) -> Reply:
        query = call.query.get("query")
        if not query:
            return self.error(400, "Missing required param: query.", code="parameter_missing",
                              param="query")
        try:
            clauses = parse_query(query)
            limit = int(call.query.get("limit", "10"))
            offset = int(call.query.get("page") or "0")
        except ValueError as exc:
            return self.error(400, f"Invalid search query {query!r}: {exc}.", param="query")
        if not 1 <= limit <= 100:
            return self.error(400, "limit must be between 1 and 100.", param="limit")
        hits = [
            self.render(call, {'$ref': f'#/components/schemas/{object_type}'}, object_type, o)
            for o in self.objects(call, object_type, lags=True) if query_matches(o, clauses)
        ]
        page = hits[offset : offset + limit]
        more = offset + limit < len(hits)
        path = "/v1/charges/search" if object_type == "charge" else "/v1/payment_intents/search"
        body = {
            "object": "search_result",
            "url": path,
            "has_more": more,
            "data": page,
            "next_page": str(offset + limit) if more else None,
        }
        return Reply(200, json_body(body), {"Content-Type": "application/json"})


def _payment(
    call: Call, object_type: str, params: dict[str, Any], amount: int, currency: str,
    metadata: dict[str, str],
) -> tuple[dict[str, Any], bool]:
    """A new charge or payment intent of valid parameters, and whether its card was declined
    (a declined one is no effect: it answers 402)."""
    prefix = "ch" if object_type == "charge" else "pi"
    object_id = f"{prefix}_{call.seq:024d}"
    # What the request gave that the object keeps (a PaymentIntent's capture_method, a
    # shipping address), as its schema types it; what the service decides comes after.
    kept = {k: v for k, v in params.items() if k not in ("expand", "confirm", "capture")}
    obj: dict[str, Any] = {
        **coerce(document("stripe"), {"$ref": f"#/components/schemas/{object_type}"}, kept),
        "id": object_id,
        "object": object_type,
        "amount": amount,
        "currency": currency.lower(),
        "created": int(call.wall),
        "customer": params.get("customer"),
        "description": params.get("description"),
        "livemode": False,
        "metadata": metadata,
    }
    declined = False
    if object_type == "charge":
        source = params.get("source", "tok_visa")
        declined = source in DECLINING
        captured = not declined and params.get("capture") != "false"  # capture=false: later
        obj.update(
            amount_captured=amount if captured else 0,
            amount_refunded=0,
            refunded=False,
            captured=captured,
            paid=not declined,
            status="failed" if declined else "succeeded",
            failure_code="card_declined" if declined else None,
        )
    else:
        method = params.get("payment_method")
        confirm = params.get("confirm") == "true"
        declined = confirm and method in DECLINING
        manual = params.get("capture_method") == "manual"
        status = (
            "requires_payment_method" if declined or method is None
            else ("requires_capture" if manual else "succeeded") if confirm
            else "requires_confirmation"
        )
        obj.update(
            payment_method=method,
            capture_method="manual" if manual else "automatic",
            status=status,
            amount_received=amount if status == "succeeded" else 0,
            amount_capturable=amount if status == "requires_capture" else 0,
        )
    return obj, declined


def _named_object(body: Any) -> str | None:
    """The id of the charge or payment intent a saved answer names (a decline names it in its
    error)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    found = body.get("id") or (
        (error.get("charge") or error.get("payment_intent")) if isinstance(error, dict) else None
    )
    return found if isinstance(found, str) else None
