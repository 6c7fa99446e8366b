"""GitHub's own JSON of issues, as the tickets fake stores them (an incident's export:
``Tickets.exported_objects``), and the labels an issue is given."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._email import exported_time, iso_time
from ._exports import ExportError

__all__ = ["BadLabel", "exported_issue", "label_names"]

#: The repository in GitHub's ``repository_url`` (``https://api.github.com/repos/o/r``, or an
#: Enterprise server's ``.../api/v3/repos/o/r``) and in an issue's ``html_url``.
_API_REPO = re.compile(r"https?://[^/]+(?:/.*)?/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/?")
_HTML_REPO = re.compile(r"https?://[^/]+/(?P<owner>[^/]+)/(?P<repo>[^/]+)/issues/\d+/?")


class BadLabel(ValueError):
    """A label that is neither a name nor an object with a name."""

    def __init__(self, label: Any) -> None:
        super().__init__(f"a label must be a name or an object with a name, not {label!r}")


def label_names(labels: list[Any]) -> list[str]:
    """The names of ``labels`` (each a name or an object with a ``name``), each once, in
    order; raises :class:`BadLabel` for the first that is neither."""
    names: list[str] = []
    for label in labels:
        name = label.get("name") if isinstance(label, Mapping) else label
        if not isinstance(name, str) or not name:
            raise BadLabel(label)
        if name not in names:
            names.append(name)
    return names


def exported_issue(item: Any, where: str) -> tuple[dict[str, Any], float]:
    """The issue the fake stores for one issue of GitHub's JSON, and when it was opened;
    raises ExportError."""
    number, full, at = _exported_place(item, where)
    title = item.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ExportError(f"{at}: title must be a non-empty string, not {title!r}.")
    body = item.get("body")
    if body is not None and not isinstance(body, str):
        raise ExportError(f"{at}: body must be a string or null, not {body!r}.")
    state = item.get("state")
    if state not in ("open", "closed"):
        raise ExportError(f"{at}: state must be 'open' or 'closed', not {state!r}.")
    user = item.get("user")
    author = user.get("login") if isinstance(user, Mapping) else None
    if not isinstance(author, str) or not author:
        raise ExportError(f"{at}: user must be an object with the author's login, "
                          f"not {user!r}.")
    labels = item.get("labels", [])
    if not isinstance(labels, list):
        raise ExportError(f"{at}: labels must be a list, not {labels!r}.")
    try:
        names = label_names(labels)
    except BadLabel as exc:
        raise ExportError(f"{at}: {exc}.") from None
    assignees = item.get("assignees", [])
    if not isinstance(assignees, list) or not all(
        isinstance(a, Mapping) and isinstance(a.get("login"), str) for a in assignees
    ):
        raise ExportError(f"{at}: assignees must be a list of users with a login.")
    issue_id, node_id = item.get("id"), item.get("node_id")
    if isinstance(issue_id, bool) or not isinstance(issue_id, int):
        raise ExportError(f"{at}: id must be GitHub's integer id, not {issue_id!r}.")
    if not isinstance(node_id, str) or not node_id:
        raise ExportError(f"{at}: node_id must be GitHub's node id, not {node_id!r}.")
    comments, locked = item.get("comments", 0), item.get("locked", False)
    if isinstance(comments, bool) or not isinstance(comments, int) or comments < 0:
        raise ExportError(f"{at}: comments must be a count, not {comments!r}.")
    if not isinstance(locked, bool):
        raise ExportError(f"{at}: locked must be true or false, not {locked!r}.")
    created, updated, closed = _exported_times(item, at)
    issue = {
        "id": issue_id,
        "node_id": node_id,
        "number": number,
        "title": title,
        "body": body,
        "state": state,
        "locked": locked,
        "comments": comments,
        "assignees": [dict(a) for a in assignees],
        "created_at": iso_time(created),
        "updated_at": iso_time(updated),
        "closed_at": None if closed is None else iso_time(closed),
        "repo": full,
        "author": author,
        "labels": names,
    }
    return issue, created


def _exported_place(item: Any, where: str) -> tuple[int, str, str]:
    """The number and repository (``owner/name``) of an exported issue, and how its errors
    name it (``<where> (owner/name#N)``); raises ExportError for a pull request."""
    if not isinstance(item, Mapping):
        raise ExportError(f"{where} is {type(item).__name__} JSON, not a GitHub issue.")
    number = item.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ExportError(
            f"{where} has no issue number (found {number!r}); export issues as GitHub's "
            "REST API returns them, e.g. `gh api "
            "'/repos/OWNER/REPO/issues?state=all&per_page=100' > issues.json`."
        )
    at = f"{where} (#{number})"
    if "pull_request" in item:
        raise ExportError(
            f"{at} is a pull request: GitHub lists pull requests among issues, and the "
            "fake has none; filter them out, e.g. `gh api "
            "'/repos/OWNER/REPO/issues?state=all&per_page=100' "
            "--jq 'map(select(.pull_request == null))'`."
        )
    full = _exported_repo(item, at)
    return number, full, f"{where} ({full}#{number})"


def _exported_times(item: Mapping[str, Any], at: str) -> tuple[float, float, float | None]:
    """When an exported issue was opened, last updated (default: opened) and closed (None:
    open), in Unix seconds; raises ExportError."""
    if "created_at" not in item:
        raise ExportError(f"{at} has no created_at.")
    created = exported_time(item["created_at"], f"{at}: created_at")
    updated = exported_time(item.get("updated_at", item["created_at"]), f"{at}: updated_at")
    closed_at = item.get("closed_at")
    closed = None if closed_at is None else exported_time(closed_at, f"{at}: closed_at")
    return created, updated, closed


def _exported_repo(item: Mapping[str, Any], where: str) -> str:
    """``owner/name`` of an exported issue, from its ``repository_url`` or else its
    ``html_url``; raises ExportError."""
    for name, pattern in (("repository_url", _API_REPO), ("html_url", _HTML_REPO)):
        url = item.get(name)
        found = pattern.fullmatch(url) if isinstance(url, str) else None
        if found:
            return f"{found['owner']}/{found['repo']}"
        if url is not None:
            raise ExportError(f"{where}: {name} {url!r} names no repository.")
    raise ExportError(
        f"{where} names no repository: an issue of GitHub's API has a repository_url "
        "(https://api.github.com/repos/OWNER/REPO) and an html_url."
    )
