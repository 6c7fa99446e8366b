"""The writes of a described provider: what each kind of write does to the world's objects.

A ``create`` makes a new object (its id as the service makes them); an ``update`` or
``replace`` writes a new version of one, unless nothing changes (an idempotent retry is no
second effect); a ``delete`` removes it (a second answers 404); an ``action`` changes it once
where the service's state machine says so (``actions_once``: Stripe's ``confirm``); any other
``write`` is an effect on what its path names, once for the same body, answered with the object
above it when the description says so. With ``idempotency_header``, every write honours it as
Stripe does (``_idempotency.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._idempotency import release, reserve, saver
from .._provider import CORRELATION_HEADER, Call, EffectDraft, Reply
from .objects import Refused, WorldObjects, doc_type, operations, public
from .operations import Operation

__all__ = ["Writes"]


class Writes(WorldObjects):
    """The write handlers of a described provider (see the module docstring)."""

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
