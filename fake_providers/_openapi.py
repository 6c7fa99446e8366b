"""A provider generated from an OpenAPI 3 document: point the harness at the spec of the
service your tool calls.

Every operation of the document becomes a route of an :class:`~fake_providers.HttpApi`:

- ``post``, ``put``, ``patch``, ``delete``: an :class:`~fake_providers.Effect` (create,
  replace, update, delete), with the request body's ``required`` properties required and the
  first 2xx response's status;
- ``get`` of a path that ends with a parameter (``/pets/{petId}``): a
  :class:`~fake_providers.Lookup` by that id;
- any other ``get`` (``/pets``): a :class:`~fake_providers.Search` that lags behind writes
  when the operation says ``x-eventually-consistent: true`` (or its path has ``search`` in
  it), a consistent list otherwise.

The object type of a path is its last segment that is not a parameter (``/stores/{id}/orders``:
``orders``); the operation's name is its ``operationId``. An object's id field is the id
parameter's name when the object's schema has that property, else ``id``; ids are generated
as integers when that parameter is an integer. A header parameter whose name has
``idempotency`` in it (``Idempotency-Key``) makes effects honour it, Stripe's way. Scopes are
``<name>:read`` and ``<name>:write`` whatever the document's security says, so that a crash
test's authority changes (E) narrow them. ``$ref`` within the document is followed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from ._http_api import Effect, HttpApi, Lookup, RouteSpec, Search

__all__ = ["openapi"]

_WRITES = ("post", "put", "patch", "delete")


def _load(document: Mapping[str, Any] | str | PathLike[str]) -> dict[str, Any]:
    if isinstance(document, Mapping):
        return dict(document)
    path = Path(document)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise ValueError(
                f"{path} is YAML, and reading YAML needs PyYAML: pip install pyyaml (or pass "
                "the document as JSON, or as a dict)."
            ) from None
        loaded = yaml.safe_load(text)
    else:
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); pass JSON or YAML.") from None
        except RecursionError:
            raise ValueError(f"{path} is nested too deep to be an OpenAPI document.") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} does not hold an OpenAPI document (an object at the top).")
    return loaded


class _Document:
    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def resolve(self, node: Any, seen: frozenset[str] = frozenset()) -> Any:
        """``node`` with a ``$ref`` followed (within the document)."""
        while isinstance(node, Mapping) and "$ref" in node:
            ref = node["$ref"]
            if not isinstance(ref, str) or not ref.startswith("#/") or ref in seen:
                raise ValueError(
                    f"OpenAPI $ref {ref!r} cannot be followed: only references within the "
                    "document (#/components/...) are, without cycles."
                )
            seen = seen | {ref}
            target: Any = self.data
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise ValueError(f"OpenAPI $ref {ref!r} points at nothing in the document.")
                target = target[part]
            node = target
        return node

    def parameters(self, *levels: Any) -> list[dict[str, Any]]:
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for level in levels:
            for raw in self.resolve(level) or ():
                param = self.resolve(raw)
                if isinstance(param, Mapping) and "name" in param:
                    found[(str(param.get("in")), str(param["name"]))] = dict(param)
        return list(found.values())

    def schema_of(self, operation: Mapping[str, Any]) -> dict[str, Any]:
        body = self.resolve(operation.get("requestBody") or {})
        content = body.get("content") if isinstance(body, Mapping) else None
        if not isinstance(content, Mapping):
            return {}
        for kind in ("application/json", "application/x-www-form-urlencoded", *content):
            if kind in content:
                schema = self.resolve((content[kind] or {}).get("schema") or {})
                return dict(schema) if isinstance(schema, Mapping) else {}
        return {}

    def response_schema(self, operation: Mapping[str, Any]) -> dict[str, Any]:
        for code, raw in sorted((operation.get("responses") or {}).items()):
            if str(code).startswith("2"):
                response = self.resolve(raw)
                content = response.get("content") if isinstance(response, Mapping) else None
                if isinstance(content, Mapping):
                    for media in content.values():
                        schema = self.resolve((media or {}).get("schema") or {})
                        if isinstance(schema, Mapping):
                            return dict(schema)
        return {}


def _object_type(path: str) -> str:
    static = [part for part in path.strip("/").split("/") if part and not part.startswith("{")]
    return static[-1] if static else "object"


def _success(operation: Mapping[str, Any]) -> int | None:
    codes = [int(c) for c in (operation.get("responses") or {}) if re.fullmatch(r"2\d\d", str(c))]
    return min(codes) if codes else None


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug if slug and slug[0].isalpha() else f"api-{slug}".rstrip("-")


def integer_ids(n: int, now: float) -> int:
    """Generated ids of an API whose id parameter is an integer: 1, 2, 3..."""
    return n


def openapi(
    document: Mapping[str, Any] | str | PathLike[str],
    *,
    name: str | None = None,
    tenant_param: str | None = None,
    tenant_header: str | None = None,
    request_id_header: str = "X-Request-Id",
) -> HttpApi:
    """The :class:`HttpApi` of an OpenAPI 3 document (a dict, or a ``.json``/``.yaml`` file).

    ``name`` names the provider (default: the document's title, in lower case with dashes);
    ``tenant_param`` / ``tenant_header`` say how a request names its tenant, as for
    :class:`HttpApi`. Raises ``ValueError`` for a document that is not OpenAPI 3, or that
    describes no operation it can serve.
    """
    try:
        return _openapi(
            document, name=name, tenant_param=tenant_param, tenant_header=tenant_header,
            request_id_header=request_id_header,
        )
    except (TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        # A document that is not shaped as OpenAPI says (a list where an object goes, a
        # path item that is a string, nesting without end): the documented error, in words.
        what = "nested too deep" if isinstance(exc, RecursionError) else f"{exc!r}"
        raise ValueError(
            f"the OpenAPI document is malformed ({what}): each of paths, path items, "
            "operations, parameters and schemas must be an object as OpenAPI 3 describes."
        ) from None


def _item_ids(doc: _Document, paths: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """Which parameter names the object of each item path (one that ends with a parameter),
    by object type, and whether that parameter is an integer."""
    ids: dict[str, tuple[str, bool]] = {}
    for path, item in paths.items():
        params = re.findall(r"\{([^}]+)\}", path)
        if params and path.rstrip("/").endswith("}"):
            declared = doc.parameters(*(
                [item.get("parameters")]
                + [op.get("parameters") for m, op in item.items() if m in (*_WRITES, "get")]
            ))
            param = params[-1]
            schema: Any = next((doc.resolve(p.get("schema") or {}) for p in declared
                           if p.get("in") == "path" and p["name"] == param), {})
            ids[_object_type(path)] = (param, schema.get("type") == "integer")
    return ids


def _operation(
    doc: _Document,
    path: str,
    item: Mapping[str, Any],
    method: str,
    op: Mapping[str, Any],
    ids: Mapping[str, tuple[str, bool]],
) -> tuple[RouteSpec, str | None]:
    """The route of one operation (``method`` of ``path``), and the idempotency header it
    declares, if any (the last one)."""
    object_type = _object_type(path)
    param, integer = ids.get(object_type, ("id", False))
    fields = doc.response_schema(op).get("properties") or doc.schema_of(op).get(
        "properties") or {}
    id_field = param if param in fields else "id"
    operation = op.get("operationId")
    idempotency_header: str | None = None
    for parameter in doc.parameters(item.get("parameters"), op.get("parameters")):
        if parameter.get("in") == "header" and "idempotency" in str(
            parameter["name"]
        ).lower():
            idempotency_header = str(parameter["name"])
    route: RouteSpec
    if method in _WRITES:
        schema = doc.schema_of(op)
        route = Effect(
            method.upper(), path, object_type,
            id_field=id_field,
            required=tuple(str(r) for r in schema.get("required") or ()),
            status=_success(op),
            new_id=integer_ids if integer else None,
            name=operation,
        )
    elif path.rstrip("/").endswith("}"):
        route = Lookup("GET", path, object_type, id_field=param, name=operation)
    else:
        lags = bool(op.get("x-eventually-consistent", "search" in path.lower()))
        route = Search("GET", path, object_type, lags=lags, name=operation)
    return route, idempotency_header


def _openapi(
    document: Mapping[str, Any] | str | PathLike[str],
    *,
    name: str | None,
    tenant_param: str | None,
    tenant_header: str | None,
    request_id_header: str,
) -> HttpApi:
    data = _load(document)
    version = str(data.get("openapi", ""))
    if not version.startswith("3."):
        raise ValueError(
            f"not an OpenAPI 3 document (openapi: {data.get('openapi', data.get('swagger'))!r});"
            " convert a Swagger 2 document with a converter first."
        )
    doc = _Document(data)
    paths = data.get("paths") or {}
    title = str((data.get("info") or {}).get("title", "api"))
    ids = _item_ids(doc, paths)
    routes: list[RouteSpec] = []
    idempotency_header: str | None = None
    for path, raw_item in paths.items():
        item = doc.resolve(raw_item)
        for method, raw_op in item.items():
            if method not in (*_WRITES, "get"):
                continue
            route, header = _operation(doc, path, item, method, doc.resolve(raw_op), ids)
            if header is not None:
                idempotency_header = header
            routes.append(route)
    if not routes:
        raise ValueError(
            f"the OpenAPI document {title!r} describes no get, post, put, patch or delete "
            "operation: there is nothing to serve."
        )
    return HttpApi(
        name or _slug(title),
        *routes,
        idempotency_header=idempotency_header,
        tenant_param=tenant_param,
        tenant_header=tenant_header,
        request_id_header=request_id_header,
    )
