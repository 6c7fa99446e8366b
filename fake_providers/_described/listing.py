"""Lists as the real APIs page them, and the filters their query parameters are.

Three styles, each its service's own:

- ``stripe``: newest first; ``limit`` (1 to 100, default 10), ``starting_after`` and
  ``ending_before`` (object ids) page; the answer is ``{"object": "list", "data": [...],
  "has_more": ..., "url": path}``; ``created`` filters by Unix time (a number, or
  ``created[gt|gte|lt|lte]``);
- ``github``: ``sort`` (``created``, ``updated``) and ``direction`` (``desc`` by default)
  order; ``per_page`` (default 30, at most 100) and ``page`` (from 1) page, with a ``Link``
  header (``rel="next"``, ``"prev"``, ``"first"``, ``"last"``) as GitHub sends it; ``since``
  keeps what was updated at or after a time;
- ``plain`` (SendGrid): oldest first; ``limit``/``offset`` or ``page_size``/``page_token``.

Any other query parameter filters: an object is listed when its field of that name equals the
value, where an object field matches by its ``id``, ``number``, ``name``, ``login`` or
``email``, a list field when any of its items matches, and a comma-separated value when all of
its parts do (GitHub's ``labels=bug,ui``). A parameter the objects have no field for cannot be
honoured: :func:`filters` names it, and the engine reports the world's limit.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = ["PAGING", "Page", "Style", "filters", "matches", "paged"]

Style = Literal["stripe", "github", "plain"]
#: Query parameters that page or order a list, by style: never filters.
PAGING: dict[str, frozenset[str]] = {
    "stripe": frozenset({"limit", "starting_after", "ending_before", "expand", "page"}),
    "github": frozenset({"page", "per_page", "sort", "direction", "order"}),
    "plain": frozenset({"limit", "offset", "page_size", "page_token", "sort_by", "order"}),
}
_KEYS = ("id", "number", "name", "login", "email")


class ListError(ValueError):
    """A list request the API refuses (a bad ``limit``, an unknown cursor): its parameter."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclasses.dataclass
class Page:
    """One page of a list: its objects, whether more follow, and the headers it carries."""

    items: list[dict[str, Any]]
    has_more: bool
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    #: A cursor for the next page, where the style has one (``page_token``).
    next_token: str | None = None


def _one(field: Any, wanted: str) -> bool:
    if isinstance(field, Mapping):
        return any(str(field.get(key)) == wanted for key in _KEYS if field.get(key) is not None)
    if isinstance(field, bool):
        return str(field).lower() == wanted.lower()
    return str(field) == wanted


def _field(obj: Mapping[str, Any], name: str) -> Any:
    node: Any = obj
    for part in name.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def matches(obj: Mapping[str, Any], name: str, wanted: str) -> bool:
    """Whether ``obj`` passes the filter ``name=wanted`` (see the module docstring)."""
    field = _field(obj, name)
    if field is None:
        return False
    parts = [p.strip() for p in wanted.split(",")] if isinstance(field, list) else [wanted]
    for part in parts:
        if isinstance(field, list):
            if not any(_one(item, part) for item in field):
                return False
        elif not _one(field, part):
            return False
    return True


def filters(
    query: Sequence[tuple[str, str]], style: Style, known: Mapping[str, Any],
    objects: Sequence[Mapping[str, Any]], *, defaults: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], list[str]]:
    """The filters of a list request (``query``: its parameters in order), with a known
    parameter's documented default where the request leaves it out and the objects have that
    field; and the parameters no object has a field for (a filter the fake cannot honour)."""
    out: dict[str, str] = {}
    unknown: list[str] = []
    for name, value in query:
        base = name.split("[", 1)[0]
        if base in PAGING[style] or base == "created" or (style == "github" and base == "since"):
            continue
        out[base] = value
    for name, value in (defaults or {}).items():
        out.setdefault(name, value)
    for name in list(out):
        if not any(_field(obj, name) is not None for obj in objects):
            if name in (defaults or {}) and name not in dict(query):
                del out[name]  # a default for a field these objects do not have
            elif objects and name in known:
                unknown.append(name)
    return out, unknown


def _created(query: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
    bounds = []
    for name, value in query:
        if name == "created" and value.lstrip("-").isdigit():
            bounds.append(("eq", int(value)))
        elif name.startswith("created[") and value.lstrip("-").isdigit():
            bounds.append((name[len("created[") : -1], int(value)))
    return bounds


def _within(created: int, bounds: list[tuple[str, int]]) -> bool:
    for op, value in bounds:
        passed = {"eq": created == value, "gt": created > value, "gte": created >= value,
                  "lt": created < value, "lte": created <= value}.get(op, True)
        if not passed:
            return False
    return True


def _int(value: str | None, default: int, *, name: str, low: int, high: int) -> int:
    if value is None:
        return default
    if not value.isdigit() or not low <= int(value) <= high:
        raise ListError(f"{name} must be an integer from {low} to {high}, not {value!r}.", name)
    return int(value)


def paged(
    style: Style,
    objects: list[dict[str, Any]],
    query: Sequence[tuple[str, str]],
    *,
    url: str,
    id_of: Any,
    created_of: Any,
    updated_of: Any,
) -> Page:
    """One page of ``objects`` (oldest first) as ``style`` pages them for ``query``;
    ``url``: the request's own URL (for GitHub's ``Link``); ``id_of``, ``created_of``,
    ``updated_of``: an object's id, Unix creation and update times. Raises
    :class:`ListError`."""
    given = dict(query)
    if style == "stripe":
        return _stripe(objects, query, given, id_of, created_of)
    if style == "github":
        return _github(objects, given, url, created_of, updated_of)
    return _plain(objects, given)


def _stripe(objects: list[dict[str, Any]], query: Sequence[tuple[str, str]],
            given: dict[str, str], id_of: Any, created_of: Any) -> Page:
    bounds = _created(query)
    found = [o for o in reversed(objects) if _within(int(created_of(o)), bounds)]
    limit = _int(given.get("limit"), 10, name="limit", low=1, high=100)
    ids = [str(id_of(o)) for o in found]
    if given.get("starting_after"):
        after = given["starting_after"]
        if after not in ids:
            raise ListError(f"No such object: '{after}'", "starting_after")
        found = found[ids.index(after) + 1 :]
    elif given.get("ending_before"):
        before = given["ending_before"]
        if before not in ids:
            raise ListError(f"No such object: '{before}'", "ending_before")
        found = found[: ids.index(before)]
        return Page(found[-limit:], has_more=len(found) > limit)
    return Page(found[:limit], has_more=len(found) > limit)


def _github(objects: list[dict[str, Any]], given: dict[str, str], url: str,
            created_of: Any, updated_of: Any) -> Page:
    sort = given.get("sort", "created")
    key = updated_of if sort == "updated" else created_of
    found = sorted(objects, key=key, reverse=given.get("direction", "desc") != "asc")
    if given.get("since"):
        since = _unix(given["since"])
        found = [o for o in found if updated_of(o) >= since]
    per_page = _int(given.get("per_page"), 30, name="per_page", low=1, high=100)
    page = _int(given.get("page"), 1, name="page", low=1, high=10**6)
    last = max(1, -(-len(found) // per_page))
    items = found[(page - 1) * per_page : page * per_page]
    links = []

    def to(n: int) -> str:
        parts = urllib.parse.urlsplit(url)
        params = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "page"]
        params.append(("page", str(n)))
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(params)))

    if page < last:
        links += [f'<{to(page + 1)}>; rel="next"', f'<{to(last)}>; rel="last"']
    if page > 1:
        links += [f'<{to(page - 1)}>; rel="prev"', f'<{to(1)}>; rel="first"']
    headers = {"Link": ", ".join(links)} if links else {}
    return Page(items, has_more=page < last, headers=headers)


def _plain(objects: list[dict[str, Any]], given: dict[str, str]) -> Page:
    if "page_size" in given or "page_token" in given:
        size = _int(given.get("page_size"), 100, name="page_size", low=1, high=1000)
        start = _int(given.get("page_token") or None, 0, name="page_token", low=0, high=10**9)
        more = start + size < len(objects)
        return Page(objects[start : start + size], has_more=more,
                    next_token=str(start + size) if more else None)
    limit = _int(given.get("limit"), 500, name="limit", low=1, high=10**6)
    offset = _int(given.get("offset"), 0, name="offset", low=0, high=10**9)
    return Page(objects[offset : offset + limit], has_more=offset + limit < len(objects))


def _unix(text: str) -> float:
    """An ISO 8601 time (GitHub's ``since``) as Unix seconds; raises :class:`ListError`."""
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ListError(f"since must be an ISO 8601 time, not {text!r}.", "since") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.timestamp()
