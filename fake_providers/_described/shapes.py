"""Answers in the shape a description documents: every required field, of its type.

:func:`shaped` renders what the world holds of an object (the fields its requests gave and the
semantics filled in) through the schema of the answer: a field the schema has is rendered in
the type it says (form strings become the integers and booleans Stripe returns); a field the
schema requires and the world does not hold gets its schema's simplest value (``None`` where
it may be null, an enum's first value, an empty list, a nested object's own required fields);
fields the schema does not know are left out. :func:`instance` is that simplest value. Both
read OpenAPI 3.0 (``nullable``) and 3.1 (``type: [..., "null"]``) schemas.
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from collections.abc import Mapping
from typing import Any

from .operations import Document

__all__ = ["coerce", "instance", "shaped"]

#: Past this depth an optional nested object is left out and a nullable one is null.
_DEEP = 6
_MISSING = object()


def _types(schema: Mapping[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, list):
        return [str(k) for k in kind]
    if isinstance(kind, str):
        return [kind]
    if "properties" in schema or "additionalProperties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return []


def _nullable(schema: Mapping[str, Any], doc: Document) -> bool:
    """Whether ``schema`` allows null: OpenAPI 3.0's ``nullable``, 3.1's ``"null"`` type. (A
    3.1 document that still writes ``nullable``, as SendGrid's does, means it too: the
    service answers null there.)"""
    if isinstance(schema.get("enum"), list):
        return None in schema["enum"]  # a validator holds an enum to its values, null too
    return bool(schema.get("nullable")) or "null" in _types(schema)


#: Strings that often match a pattern a description gives (tried in order).
_CANDIDATES = ("a", "a1", "A", "0", "2026-01-01 00:00:00", "2026-01-01T00:00:00Z", "2026-01-01",
               "user@example.com", "https://example.invalid/")


@functools.lru_cache(maxsize=256)
def _matching(pattern: str, minimum: int) -> str:
    """A short string ``pattern`` matches (searched, as JSON Schema does): its literal
    start, a common shape, or the simplest one Hypothesis finds."""
    literal = re.match(r"\^((?:[^\\\[\](){}.*+?|^$]|\\[./-])*)", pattern)
    tried = ([literal.group(1).replace("\\", "")] if literal else []) + list(_CANDIDATES)
    for text in tried:
        text = text.ljust(minimum, "x")
        if re.search(pattern, text):
            return text
    from hypothesis import find, settings
    from hypothesis import strategies as st

    found: str = find(st.from_regex(pattern), lambda s: len(s) >= minimum,
                      settings=settings(database=None, max_examples=200))
    return found


def _string(schema: Mapping[str, Any]) -> str:
    if isinstance(schema.get("pattern"), str):
        return _matching(schema["pattern"], int(schema.get("minLength") or 0))
    fmt = schema.get("format")
    if fmt == "date-time":
        return "2026-01-01T00:00:00Z"
    if fmt == "date":
        return "2026-01-01"
    if fmt in ("uri", "url"):
        return "https://example.invalid/"
    if fmt == "email":
        return "user@example.com"
    if fmt == "uuid":
        return "00000000-0000-4000-8000-000000000000"
    return "x" * int(schema.get("minLength") or 0)


def instance(doc: Document, schema: Any, *, depth: int = 0, stack: frozenset[str] = frozenset()
             ) -> Any:
    """The simplest value ``schema`` allows: null where it may be null, else its enum's first
    value, its ``const``, an object of its required fields, an empty list, ``0``, ``False``, a
    string of the format it asks for."""
    name = doc.component(schema)
    node = doc.resolve(schema)
    if not isinstance(node, Mapping):
        return None
    if name is not None:
        stack = stack | {name}
    if "const" in node:
        return node["const"]
    if _nullable(node, doc) and depth > 0:
        return None
    if node.get("enum"):
        return node["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and node[key]:
            branches = node[key]
            if any(_nullable(doc.resolve(b), doc) for b in branches) and depth > 0:
                return None
            simple = [b for b in branches if doc.component(b) is None] or branches
            return instance(doc, simple[0], depth=depth, stack=stack)
    if isinstance(node.get("allOf"), list):
        merged: dict[str, Any] = {}
        for part in node["allOf"]:
            value = instance(doc, part, depth=depth, stack=stack)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    types = [t for t in _types(node) if t != "null"]
    kind = types[0] if types else "object"
    if kind == "object":
        properties = node.get("properties") or {}
        return {
            field: instance(doc, properties.get(field, {}), depth=depth + 1, stack=stack)
            for field in node.get("required") or ()
        }
    if kind == "array":
        return [instance(doc, node.get("items", {}), depth=depth + 1, stack=stack)
                for _ in range(int(node.get("minItems") or 0))]
    if kind == "integer":
        return int(node.get("minimum") or 0)
    if kind == "number":
        return float(node.get("minimum") or 0)
    if kind == "boolean":
        return False
    return _string(node)


def coerce(doc: Document, schema: Any, value: Any) -> Any:
    """``value`` (as a request gave it: form fields are strings) in the type ``schema`` says,
    where it converts; else as it is."""
    node = doc.resolve(schema)
    if not isinstance(node, Mapping) or value is None:
        return value
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            for branch in node[key]:
                converted = coerce(doc, branch, value)
                if _fits(doc, branch, converted):
                    return converted
            return value
    types = _types(node)
    if isinstance(value, str):
        if "integer" in types and value.lstrip("-").isdigit():
            return int(value)
        if "number" in types:
            try:
                return float(value)
            except ValueError:
                return value
        if "boolean" in types and value in ("true", "false"):
            return value == "true"
    if isinstance(value, dict) and "array" in types and all(k.isdigit() for k in value):
        value = [value[k] for k in sorted(value, key=int)]
    if isinstance(value, list) and "array" in types:
        return [coerce(doc, node.get("items", {}), item) for item in value]
    if isinstance(value, dict) and "object" in types:
        properties = node.get("properties") or {}
        extra = node.get("additionalProperties")
        return {
            k: coerce(doc, properties.get(k, extra if isinstance(extra, Mapping) else {}), v)
            for k, v in value.items()
        }
    return value


def _fits(doc: Document, schema: Any, value: Any) -> bool:
    """Whether ``value`` is of a type ``schema`` allows (not a full validation: its type)."""
    node = doc.resolve(schema)
    if not isinstance(node, Mapping):
        return True
    if value is None:
        return _nullable(node, doc)
    if "enum" in node:
        return value in node["enum"]
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return any(_fits(doc, branch, value) for branch in node[key])
    if isinstance(node.get("allOf"), list):
        return all(_fits(doc, part, value) for part in node["allOf"])
    types = _types(node)
    if not types:
        return True
    checks = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
        "null": value is None,
    }
    return any(checks.get(t, False) for t in types)


def shaped(doc: Document, schema: Any, value: Any = _MISSING, *, depth: int = 0,
           stack: frozenset[str] = frozenset()) -> Any:
    """``value`` rendered as ``schema`` documents it (see the module docstring)."""
    if value is _MISSING:
        return instance(doc, schema, depth=depth, stack=stack)
    name = doc.component(schema)
    node = doc.resolve(schema)
    if not isinstance(node, Mapping) or not node:
        return value
    if name is not None:
        stack = stack | {name}
    if value is None:
        return None if _nullable(node, doc) else instance(doc, schema, depth=depth, stack=stack)
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list) and node[key]:
            return _one_of(doc, node[key], value, depth, stack)
    if isinstance(node.get("allOf"), list):
        rendered: dict[str, Any] = {}
        for part in node["allOf"]:
            piece = shaped(doc, part, value, depth=depth, stack=stack)
            if isinstance(piece, dict):
                rendered.update(piece)
        return rendered
    types = [t for t in _types(node) if t != "null"]
    value = coerce(doc, node, value)
    if "object" in types and isinstance(value, Mapping):
        return _object(doc, node, value, depth, stack)
    if "array" in types and isinstance(value, list):
        return [shaped(doc, node.get("items", {}), item, depth=depth + 1, stack=stack)
                for item in value]
    if _fits(doc, node, value):
        return value
    return instance(doc, schema, depth=depth, stack=stack)


def _one_of(doc: Document, branches: list[Any], value: Any, depth: int,
            stack: frozenset[str]) -> Any:
    """``value`` through the first branch of its type: an id string stays an id (Stripe's
    expandable fields), an object is rendered through the first object branch."""
    for branch in branches:
        node = doc.resolve(branch)
        if isinstance(value, Mapping) and "object" in set(_types(node)) | _composed(doc, node):
            return shaped(doc, branch, value, depth=depth, stack=stack)
        if not isinstance(value, Mapping) and _fits(doc, branch, coerce(doc, branch, value)):
            return shaped(doc, branch, value, depth=depth, stack=stack)
    return shaped(doc, branches[0], _MISSING, depth=depth, stack=stack)


def _composed(doc: Document, node: Mapping[str, Any]) -> set[str]:
    return {"object"} if isinstance(node.get("allOf"), list) else set()


def _object(doc: Document, node: Mapping[str, Any], value: Mapping[str, Any], depth: int,
            stack: frozenset[str]) -> dict[str, Any]:
    properties = node.get("properties") or {}
    required = list(node.get("required") or ())
    out: dict[str, Any] = {}
    for field, schema in properties.items():
        if field in value:
            out[field] = shaped(doc, schema, value[field], depth=depth + 1, stack=stack)
        elif field in required:
            out[field] = instance(doc, schema, depth=depth + 1, stack=stack)
    extra = node.get("additionalProperties")
    if not properties and (extra is True or isinstance(extra, Mapping) or extra is None):
        # A map (metadata, custom args): its entries as given, each in its schema's type.
        item = extra if isinstance(extra, Mapping) else {}
        out = {k: shaped(doc, item, v, depth=depth + 1, stack=stack) for k, v in value.items()}
    return out


def unix_time(seconds: float) -> int:
    """Harness seconds as the integer Unix time Stripe's ``created`` shows."""
    return int(seconds)


def iso(seconds: float, epoch: _dt.datetime) -> str:
    """Harness seconds as an ISO 8601 time (GitHub's ``created_at``), from ``epoch``."""
    moment = epoch + _dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
