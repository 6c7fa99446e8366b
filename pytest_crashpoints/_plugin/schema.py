"""The JSON report's schema, shipped in the package, and the check that a document follows it.

The schema of format version N is ``pytest_crashpoints/schemas/report-vN.json`` (JSON Schema,
draft 2020-12). Reading a report must not need a third-party package, so :func:`problem`
implements the keywords that schema uses, and no others: ``type``, ``properties``,
``required``, ``additionalProperties``, ``items``, ``enum``, ``const``, ``minimum``,
``maximum``, ``anyOf`` and ``$ref`` into ``$defs``. A keyword it does not know is an error, so
a schema can never silently check less than it says. (The test suite checks the schema, and
real reports, with the ``jsonschema`` package too.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from importlib.resources import files
from typing import Any

__all__ = ["problem", "report_schema", "schema_path"]

_ANNOTATIONS = {"$schema", "$id", "$defs", "$comment", "title", "description"}
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_NAMED = {"object": "an object", "array": "an array", "integer": "an integer", "null": "null"}
#: The keywords :func:`problem` checks.
_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "anyOf",
    "$ref",
}


def schema_path(version: int) -> str:
    """Where the schema of report format ``version`` is, inside the package."""
    return f"schemas/report-v{version}.json"


def report_schema(version: int) -> dict[str, Any]:
    """The JSON Schema of report format ``version``, as shipped in the package."""
    text = files("pytest_crashpoints").joinpath(schema_path(version)).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def problem(document: object, schema: Mapping[str, Any]) -> str | None:
    """The first way ``document`` breaks ``schema``, in words naming where, or None."""
    return _check(document, schema, schema, "")


def _is(value: object, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[name])


def _where(path: str) -> str:
    return path or "the document"


def _check(
    value: object, schema: Mapping[str, Any], root: Mapping[str, Any], path: str
) -> str | None:
    unknown = set(schema) - _ANNOTATIONS - _KEYWORDS
    if unknown:
        raise ValueError(f"the report schema uses keywords this reader does not know: {unknown}")
    if "$ref" in schema:
        ref = str(schema["$ref"])
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"the report schema has a $ref this reader cannot follow: {ref!r}")
        found = _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path)
        if found:
            return found
    if "anyOf" in schema:
        found = _check_any_of(value, schema["anyOf"], root, path)
        if found:
            return found
    found = _check_value(value, schema, path)
    if found:
        return found
    if isinstance(value, dict):
        return _check_object(value, schema, root, path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found = _check(item, schema["items"], root, f"{path}[{index}]")
            if found:
                return found
    return None


def _check_any_of(
    value: object, options: Iterable[Mapping[str, Any]], root: Mapping[str, Any], path: str
) -> str | None:
    """How ``value`` breaks every one of ``options`` (``anyOf``), or None if one holds."""
    found_all = [_check(value, option, root, path) for option in options]
    if all(found_all):
        # The option of the value's own type says what is wrong inside it; if the type
        # matches none, say every type that would have done.
        head = f"{_where(path)} is {_short(value)}, not "
        inner = [f for f in found_all if f and not f.startswith(head)]
        if inner:
            return inner[0]
        return head + " or ".join(str(f).removeprefix(head) for f in found_all)
    return None


def _check_value(value: object, schema: Mapping[str, Any], path: str) -> str | None:
    """How ``value`` itself breaks ``schema``'s ``type``, ``const``, ``enum``, ``minimum``
    and ``maximum``, or None."""
    if "type" in schema:
        names = [schema["type"]] if isinstance(schema["type"], str) else list(schema["type"])
        if not any(_is(value, name) for name in names):
            wanted = " or ".join(_NAMED.get(name, f"a {name}") for name in names)
            return f"{_where(path)} is {_short(value)}, not {wanted}"
    const = schema.get("const", value)
    if value != const or type(value) is not type(const):
        return f"{_where(path)} is {_short(value)}, not {const!r}"
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        return f"{_where(path)} is {_short(value)}, not one of {allowed}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{_where(path)} is {value!r}, less than {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{_where(path)} is {value!r}, more than {schema['maximum']}"
    return None


def _check_object(
    value: Mapping[Any, Any], schema: Mapping[str, Any], root: Mapping[str, Any], path: str
) -> str | None:
    """How object ``value`` breaks ``schema``'s ``required``, ``properties`` and
    ``additionalProperties``, or None."""
    for name in schema.get("required", ()):
        if name not in value:
            return f"{_where(path)} has no {name!r}"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        where = f"{path}.{name}" if path else str(name)
        if name in properties:
            found = _check(item, properties[name], root, where)
        elif extra is False:
            found = f"{_where(path)} has a field {name!r} the format does not have"
        elif isinstance(extra, Mapping):
            found = _check(item, extra, root, f"{path}[{name!r}]")
        else:
            found = None
        if found:
            return found
    return None


def _short(value: object) -> str:
    """A value in a message: short, one line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = "null" if value is None else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
