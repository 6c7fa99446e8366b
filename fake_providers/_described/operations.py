"""The operations of a published API description, as the engine serves them.

An :class:`Operation` is one method of one path of an OpenAPI document, read for what a fake
needs: how to match a request (its path template), which parameters, body fields and media
types it knows (anything else is beyond the simulated world), and what it does to the world,
classified by its path and its answer's schema:

- ``create``: a write to a collection (its path ends with a static segment) that answers one
  object: a new object of that type;
- ``retrieve``: a read of one object by the parameter that ends its path;
- ``update`` / ``replace`` / ``delete``: a write (``POST``/``PATCH``, ``PUT``, ``DELETE``) of
  the object its path names;
- ``action``: a ``POST`` to a verb under an object (``/v1/payment_intents/{intent}/confirm``)
  that answers the same object: a state change made once;
- ``list``: a read of a collection that answers many (an array, or an object holding one);
  ``search``: one whose path ends with ``/search``, which lags behind writes;
- ``write``: any other write (adding labels to an issue, sending mail): an effect on what its
  path names; ``read``: any other read (a balance, a count), answered with the schema's shape.

The object type of an operation is the schema component its answer is (or lists) when it has a
name, else its collection's path template: operations that answer the same component share the
same objects, whatever their paths.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

__all__ = ["Document", "Kind", "Operation"]

Kind = Literal[
    "create", "retrieve", "update", "replace", "delete", "action", "list", "search", "write",
    "read",
]
_METHODS = ("get", "post", "put", "patch", "delete")
_PARAM = re.compile(r"\{([^}/]+)\}")
_JSON = "application/json"


class Document:
    """An OpenAPI 3.0 or 3.1 document, with ``$ref`` resolution inside it."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.version = str(data.get("openapi", ""))
        self.title = str((data.get("info") or {}).get("title", "api"))

    def resolve(self, node: Any) -> Any:
        """``node`` with its ``$ref`` (within the document) followed, repeatedly."""
        seen: set[str] = set()
        while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen or not ref.startswith("#/"):
                raise ValueError(f"OpenAPI $ref {ref!r} cannot be followed")
            seen.add(ref)
            target: Any = self.data
            for part in ref[2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    @staticmethod
    def component(node: Any) -> str | None:
        """The schema component ``node`` refers to by name (``#/components/schemas/X``: X)."""
        if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            ref: str = node["$ref"]
            if ref.startswith("#/components/schemas/"):
                return ref.rsplit("/", 1)[1]
        return None

    def schema(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.data["components"]["schemas"][name]
        return found

    def operations(self) -> Iterator[Operation]:
        """Every operation of the document, the static paths of a method before those with
        parameters in the same place (``/issues/comments`` before ``/issues/{number}``)."""
        found = []
        for path, raw in (self.data.get("paths") or {}).items():
            item = self.resolve(raw)
            for method in _METHODS:
                if method in item:
                    found.append(_read(self, path, method, item, self.resolve(item[method])))
        found.sort(key=lambda op: (op.method, op.specificity), reverse=False)
        # A delete answers a stub of what it deleted ("deleted_customer"): its objects are
        # those its path's read answers.
        reads = {op.template: op.object_type for op in found if op.kind == "retrieve"}
        found = [
            dataclasses.replace(op, object_type=reads[op.template])
            if op.kind == "delete" and reads.get(op.template) else op
            for op in found
        ]
        # What a collection's create makes is what its item paths read, update and delete,
        # whatever name each answer's schema has (SendGrid names one webhook three ways).
        made = {op.template: op.object_type for op in found
                if op.kind == "create" and op.object_type}
        return iter(
            dataclasses.replace(op, object_type=made[op.collection])
            if op.collection in made
            and (op.kind == "list" or (op.id_param and op.kind in (
                "retrieve", "update", "replace", "delete", "action")))
            else op
            for op in found
        )


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation of a description (see the module docstring for ``kind``)."""

    method: str
    template: str
    pattern: re.Pattern[str]
    operation_id: str
    kind: Kind
    #: The schema component (or collection path) of the objects it acts on, if any.
    object_type: str | None
    #: The path parameter that names the object (the one ending an item path), if any.
    id_param: str | None
    path_params: tuple[str, ...]
    #: Query parameters by name, with their (resolved) schemas, and the required ones.
    query: Mapping[str, Any]
    required_query: frozenset[str]
    #: The request body's schema (resolved), its media types, and whether it is required.
    body: Mapping[str, Any] | None
    media_types: tuple[str, ...]
    body_required: bool
    #: Header parameters it declares (lower case).
    headers: frozenset[str]
    #: The first 2xx status, and that answer's schema (unresolved: a ``$ref`` names a type).
    status: int
    response: Any
    #: The schemas of the error answers it documents, by status.
    errors: Mapping[int, Any] = dataclasses.field(default_factory=dict, compare=False)
    #: ``(segments, params)`` sort key: literal segments first.
    specificity: tuple[int, ...] = dataclasses.field(compare=False, default=())

    @property
    def collection(self) -> str:
        """The path of the collection the operation's objects live in (its template without
        the final parameter, for an item path)."""
        if self.id_param is not None:
            return self.template.rsplit("/", 1)[0]
        return self.template

    @property
    def writes(self) -> bool:
        return self.method != "GET"

    def path_values(self, path: str) -> dict[str, str] | None:
        """The path parameters of ``path`` by name, or ``None`` when it is not this
        operation's path."""
        found = self.pattern.fullmatch(path)
        if found is None:
            return None
        return {name: found.group(f"p{i}") for i, name in enumerate(self.path_params)}

    @property
    def parents(self) -> tuple[str, ...]:
        """The path parameters that place the object (all but the one that names it)."""
        return tuple(p for p in self.path_params if p != self.id_param)


def _read(
    doc: Document, path: str, method: str, item: Mapping[str, Any], op: Mapping[str, Any]
) -> Operation:
    params = _parameters(doc, item.get("parameters"), op.get("parameters"))
    query = {
        p["name"]: doc.resolve(p.get("schema") or {}) for p in params if p.get("in") == "query"
    }
    required = frozenset(
        p["name"] for p in params if p.get("in") == "query" and p.get("required")
    )
    headers = frozenset(str(p["name"]).lower() for p in params if p.get("in") == "header")
    body_node = doc.resolve(op.get("requestBody") or {})
    content = body_node.get("content") if isinstance(body_node, Mapping) else None
    media = tuple(content) if isinstance(content, Mapping) else ()
    body = None
    if media:
        first = _JSON if _JSON in media else media[0]
        body = doc.resolve((content[first] or {}).get("schema") or {})  # type: ignore[index]
    status, response = _success(doc, op)
    path_params = tuple(_PARAM.findall(path))
    item_path = path.rstrip("/").endswith("}")
    object_type = _object_type(doc, response, path, item_path)
    kind = _kind(doc, method.upper(), path, item_path, response, object_type)
    if kind in ("list", "search", "create", "write", "read") and not item_path:
        id_param = None
    else:
        id_param = path_params[-1] if item_path and path_params else None
    if kind == "action":
        id_param = path_params[-1] if path_params else None
    return Operation(
        method=method.upper(),
        template=path,
        pattern=_pattern(path),
        operation_id=str(op.get("operationId") or f"{method} {path}"),
        kind=kind,
        object_type=object_type,
        id_param=id_param,
        path_params=path_params,
        query=query,
        required_query=required,
        body=body if isinstance(body, Mapping) else None,
        media_types=media,
        body_required=bool(isinstance(body_node, Mapping) and body_node.get("required")),
        headers=headers,
        status=status,
        response=response,
        errors=_errors(doc, op),
        specificity=tuple(1 if part.startswith("{") else 0 for part in path.split("/")),
    )


def _parameters(doc: Document, *levels: Any) -> list[dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for level in levels:
        for raw in doc.resolve(level) or ():
            param = doc.resolve(raw)
            if isinstance(param, Mapping) and "name" in param:
                found[(str(param.get("in")), str(param["name"]))] = dict(param)
    return list(found.values())


def _success(doc: Document, op: Mapping[str, Any]) -> tuple[int, Any]:
    """The first 2xx status and its JSON answer's schema (``None``: no body)."""
    codes = sorted(str(c) for c in (op.get("responses") or {}) if re.fullmatch(r"2\d\d", str(c)))
    if not codes:
        return 200, None
    answer = doc.resolve(op["responses"][codes[0]] if codes[0] in op["responses"]
                         else op["responses"][int(codes[0])])
    content = answer.get("content") if isinstance(answer, Mapping) else None
    schema = None
    if isinstance(content, Mapping) and content:
        media = content.get(_JSON) or next(iter(content.values()))
        schema = (media or {}).get("schema")
    return int(codes[0]), schema


def _errors(doc: Document, op: Mapping[str, Any]) -> dict[int, Any]:
    """The schemas of the error answers ``op`` documents, by status."""
    found = {}
    for code, raw in (op.get("responses") or {}).items():
        if re.fullmatch(r"[45]\d\d", str(code)):
            content = doc.resolve(raw).get("content") or {}
            media = content.get(_JSON) or next(iter(content.values()), None)
            if isinstance(media, Mapping) and "schema" in media:
                found[int(code)] = media["schema"]
    return found


def listed_type(doc: Document, schema: Any) -> str | bool | None:
    """For an answer that lists objects: the component of its items (``None`` when they have
    no name); ``False`` when the answer is no list."""
    node = doc.resolve(schema)
    if not isinstance(node, Mapping):
        return False
    if node.get("type") == "array" or ("items" in node and "properties" not in node):
        return doc.component(node.get("items"))
    if node.get("type") not in (None, "object"):
        return False
    properties = node.get("properties") or {}
    if "id" in properties:
        return False  # one object that holds arrays, not a list
    for name in ("data", "result", "results", "messages", "items", "policies"):
        inner = doc.resolve(properties.get(name))
        if isinstance(inner, Mapping) and inner.get("type") == "array":
            return doc.component(inner.get("items"))
    return False


def _object_type(doc: Document, response: Any, path: str, item_path: bool) -> str | None:
    named = doc.component(response)
    if named is not None:
        inner = doc.resolve(response)
        if listed_type(doc, inner) is False:
            return named
    listed = listed_type(doc, response)
    if isinstance(listed, str):
        return listed
    node = doc.resolve(response)
    for key in ("allOf", "anyOf", "oneOf"):  # a customer, or the stub of a deleted one
        if isinstance(node, Mapping) and isinstance(node.get(key), list):
            for part in node[key]:
                if doc.component(part) is not None:
                    return doc.component(part)
    collection = path.rsplit("/", 1)[0] if item_path else path
    return collection if response is not None or item_path else None


def _kind(
    doc: Document, method: str, path: str, item_path: bool, response: Any, object_type: str | None
) -> Kind:
    listed = listed_type(doc, response) if response is not None else False
    if "search" in path.strip("/").split("/") and (method == "GET" or listed is not False):
        return "search"  # a search is a read, also where it is a POST (a query in the body)
    if method == "GET":
        if item_path:
            return "retrieve"
        return "list" if listed is not False else "read"
    if method == "DELETE":
        return "delete" if item_path else "write"
    if item_path:
        return "replace" if method == "PUT" else "update"
    parts = path.rstrip("/").split("/")
    if (
        method == "POST"
        and len(parts) >= 2
        and parts[-2].startswith("{")
        and object_type is not None
        and listed is False
        and object_type == _item_type(doc, "/".join(parts[:-1]))
    ):
        return "action"
    if (
        len(parts) >= 2
        and parts[-2].startswith("{")
        and object_type is not None
        and object_type == _item_type(doc, "/".join(parts[:-1]))
    ):
        return "write"  # a change to the object above (an issue's assignees): answers it
    if method in ("POST", "PUT") and response is not None and listed is False:
        node = doc.resolve(response)
        properties = (node.get("properties") or {}) if isinstance(node, Mapping) else {}
        if doc.component(response) is not None or "id" in properties:
            return "create"
    if method == "PATCH":
        return "update" if response is not None and listed is False else "write"
    return "write"


def _item_type(doc: Document, item_path: str) -> str | None:
    """The type of what ``GET item_path`` answers, if the document serves that."""
    item = (doc.data.get("paths") or {}).get(item_path)
    if not isinstance(item, Mapping) or "get" not in item:
        return None
    _, response = _success(doc, doc.resolve(item["get"]))
    return doc.component(response)


def _pattern(template: str) -> re.Pattern[str]:
    """The template as a regular expression; parameter ``i`` is the group ``p<i>`` (a
    parameter's name need not be a Python name: :meth:`Operation.path_values`)."""
    parts, last = [], 0
    for i, found in enumerate(_PARAM.finditer(template)):
        parts.append(re.escape(template[last : found.start()]))
        parts.append(f"(?P<p{i}>[^/]+)")
        last = found.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts) + "/?")
