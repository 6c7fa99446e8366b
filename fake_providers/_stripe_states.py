"""What Stripe's actions do to its objects: the status machines of payment intents, charges,
refunds and invoices, as Stripe documents them (``/confirm``, ``/capture``, ``/cancel``,
``/finalize``, ``/pay``, ``/void``, ``/mark_uncollectible``). An action a status does not
allow is refused as Stripe refuses it (400 ``..._unexpected_state``), with no effect."""

from __future__ import annotations

from typing import Any

from ._described.engine import Refused

__all__ = ["DECLINING", "act"]

DECLINING = frozenset({"tok_chargeDeclined", "pm_card_chargeDeclined"})
_CONFIRMABLE = frozenset({"requires_payment_method", "requires_confirmation", "requires_action"})
_CANCELABLE = _CONFIRMABLE | {"requires_capture", "processing"}
#: An invoice's action: the statuses it may start from, and the status it leaves.
_INVOICE = {
    "finalize": ({"draft"}, "open"),
    "pay": ({"open"}, "paid"),
    "void": ({"open"}, "void"),
    "mark_uncollectible": ({"open"}, "uncollectible"),
    "send": ({"open"}, "open"),
}


def _refuse(object_type: str, verb: str, status: Any) -> Refused:
    noun = {"payment_intent": "PaymentIntent", "charge": "Charge", "refund": "Refund",
            "invoice": "Invoice"}.get(object_type, object_type)
    return Refused(400, f"You cannot {verb} this {noun} because it has a status of {status}.",
                   code=f"{object_type}_unexpected_state")


def _intent(verb: str, obj: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    status = obj.get("status")
    amount = int(obj.get("amount") or 0)
    if verb == "confirm":
        if status not in _CONFIRMABLE:
            raise _refuse("payment_intent", verb, status)
        method = body.get("payment_method") or obj.get("payment_method")
        if not method:
            raise Refused(400, "You cannot confirm this PaymentIntent because it's missing a "
                          "payment method.", code="payment_intent_unexpected_state")
        if method in DECLINING:
            raise Refused(402, "Your card was declined.", code="card_declined")
        manual = obj.get("capture_method") == "manual"
        after = {**obj, **body, "payment_method": method,
                 "status": "requires_capture" if manual else "succeeded"}
        after["amount_received"] = 0 if manual else amount
        after["amount_capturable"] = amount if manual else 0
        return after
    if verb == "capture":
        if status != "requires_capture":
            raise _refuse("payment_intent", verb, status)
        captured = int(body.get("amount_to_capture") or amount)
        return {**obj, "status": "succeeded", "amount_received": captured,
                "amount_capturable": 0}
    if verb == "cancel":
        if status not in _CANCELABLE:
            raise _refuse("payment_intent", verb, status)
        return {**obj, "status": "canceled",
                "cancellation_reason": body.get("cancellation_reason")}
    return {**obj, **body}


def act(object_type: str, verb: str, obj: dict[str, Any], body: dict[str, Any]
        ) -> dict[str, Any]:
    """``obj`` (a ``object_type``) after action ``verb`` with ``body``'s parameters; raises
    :class:`~fake_providers._described.engine.Refused` for a status that refuses it."""
    if object_type == "payment_intent":
        return _intent(verb, obj, body)
    if object_type == "charge" and verb == "capture":
        if obj.get("captured", True) or obj.get("status") != "succeeded":
            raise Refused(400, f"Charge {obj.get('id')} has already been captured.",
                          code="charge_already_captured")
        return {**obj, "captured": True, "amount_captured": obj.get("amount")}
    if object_type == "refund" and verb == "cancel":
        if obj.get("status") not in ("pending", "requires_action"):
            raise _refuse("refund", verb, obj.get("status"))
        return {**obj, "status": "canceled"}
    if object_type == "invoice" and verb in _INVOICE:
        allowed, after = _INVOICE[verb]
        status = obj.get("status") or "draft"
        if status not in allowed:
            raise _refuse("invoice", verb, status)
        return {**obj, **body, "status": after}
    return {**obj, **body}
