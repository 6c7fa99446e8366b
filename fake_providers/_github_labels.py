"""An issue's labels as GitHub keeps them: a set of names on the issue itself.

``POST /repos/{owner}/{repo}/issues/{n}/labels`` adds labels, ``PUT`` sets them, ``DELETE
.../labels/{name}`` removes one (404 when the issue has no such label), ``DELETE .../labels``
removes all, ``GET`` lists them. A change is a new version of the issue (an effect); a change
that changes nothing (the labels were there already) is none, so a retry after a lost answer
costs nothing. The issue's own ``labels``, its list filtered by label and its search all see
the change.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import Any, Literal, Protocol

from ._email import iso_time
from ._github_exports import BadLabel, label_names
from ._provider import Call, EffectDraft, Reply, json_body, json_document, payload_hash

__all__ = ["Change", "relabel"]

Change = Literal["list", "add", "set", "remove", "clear"]
_JSON = {"Content-Type": "application/json; charset=utf-8"}


def _asked(call: Call) -> list[str]:
    """The label names a request gives: a JSON list, or ``{"labels": [...]}``. Raises
    ``BadLabel`` or ``ValueError``."""
    data: Any = json_document(call.request.content) if call.request.content.strip() else []
    if isinstance(data, dict):
        data = data.get("labels", [])
    if not isinstance(data, list):
        raise ValueError("labels must be a list")
    return label_names(data)


class Issues(Protocol):
    """What of the tickets provider the labels need."""

    def current(self, call: Call, object_type: str, key: str) -> dict[str, Any] | None: ...

    def error(self, status: int, message: str, *, code: str | None = None,
              field: str | None = None) -> Reply: ...

    def label(self, origin: str, full: str, name: str) -> dict[str, Any]: ...


def relabel(tickets: Issues, call: Call, change: Change) -> Reply:
    """Answer one request on an issue's labels (``change``: what it does)."""
    full = f"{call.groups['owner']}/{call.groups['repo']}"
    key = f"{full}#{int(call.groups['number'])}"
    issue = tickets.current(call, "issue", key)
    if issue is None:
        return tickets.error(404, "Not Found")
    before: list[str] = list(issue.get("labels") or [])
    try:
        asked = _asked(call) if change in ("add", "set") else []
    except (BadLabel, ValueError):
        return tickets.error(422, "Validation Failed", code="invalid", field="labels")
    name = urllib.parse.unquote(call.groups.get("name", ""))
    if change == "remove" and name not in before:
        return tickets.error(404, "Label does not exist")
    after: dict[Change, Callable[[], list[str]]] = {
        "list": lambda: before,
        "add": lambda: before + [n for n in asked if n not in before],
        "set": lambda: asked,
        "remove": lambda: [n for n in before if n != name],
        "clear": lambda: [],
    }
    labels = after[change]()
    shown = [tickets.label(call.origin, full, n) for n in labels]
    reply = Reply(204 if change == "clear" else 200,
                  b"" if change == "clear" else json_body(shown),
                  {} if change == "clear" else dict(_JSON))
    if change == "list":
        return reply
    logical = {"path": call.request.url.path, "method": call.request.method, "labels": asked,
               "name": name}
    phash = payload_hash(logical) or json.dumps(logical)
    reply.operation_key = reply.payload_hash = phash
    reply.object_id = key
    if labels != before:
        changed = {**{k: v for k, v in issue.items() if k != "_key"}, "labels": labels,
                   "updated_at": iso_time(call.wall)}
        reply.effect = EffectDraft("issue", f"{key}~{call.seq}", changed)
    return reply
