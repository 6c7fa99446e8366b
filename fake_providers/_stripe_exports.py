"""Stripe's own JSON of charges, payment intents and refunds, as the payments fake stores them
(an incident's export: ``Payments.exported_objects``)."""

from __future__ import annotations

import re
from typing import Any

from ._exports import Exported, ExportError

__all__ = ["OWN_ID", "stripe_object"]


#: An id the fake made itself (its prefix, ``ch_``, ``cus_``..., and the request's number).
OWN_ID = re.compile(r"[a-z]+_(\d{24})")
_STRIPE_OPERATIONS = {
    "charge": "charges.create",
    "payment_intent": "payment_intents.create",
    "refund": "refunds.create",
}


def stripe_object(item: Any, where: str) -> Exported:
    """One object of a Stripe export, as the fake stores it; raises ExportError."""
    if not isinstance(item, dict):
        raise ExportError(f"{where} is {type(item).__name__} JSON, not a Stripe object.")
    kind, object_id = item.get("object"), item.get("id")
    if kind not in _STRIPE_OPERATIONS or not isinstance(object_id, str) or not object_id:
        raise ExportError(
            f"{where} is not a charge, payment intent or refund (object={kind!r}, "
            f"id={object_id!r}); export them as Stripe's API returns them, e.g. "
            "`stripe charges list --limit 100 > charges.json`."
        )
    body = {k: v for k, v in item.items() if k != "idempotency_key"}
    for name in ("amount", "currency"):
        if name not in body:
            raise ExportError(f"{where} ({object_id}) has no {name!r}.")
    if not isinstance(body["amount"], int) or isinstance(body["amount"], bool):
        raise ExportError(f"{where} ({object_id}): amount must be an integer, not "
                          f"{body['amount']!r}.")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ExportError(f"{where} ({object_id}): metadata must be an object.")
    body["metadata"] = {str(k): str(v) for k, v in metadata.items()}
    if kind == "refund":  # the charge refunded, by id (an expanded charge names its id)
        charge = body.get("charge")
        body["charge"] = charge.get("id") if isinstance(charge, dict) else charge
        if not isinstance(body["charge"], str):
            raise ExportError(f"{where} ({object_id}): a refund names its charge.")
    created = body.get("created")
    key = item.get("idempotency_key")
    return Exported(
        object_type=str(kind),
        object_id=object_id,
        operation=_STRIPE_OPERATIONS[str(kind)],
        body=body,
        created=float(created) if isinstance(created, (int, float)) else None,
        idempotency_key=str(key) if key else None,
        aliases=(object_id,),
    )
