"""tickets: a non-idempotent, GitHub-like provider (a subset of GitHub's REST API).

Endpoints (JSON; ``X-GitHub-Request-Id`` on every response; the repository owner is the tenant,
so a key may only touch repositories whose owner is its tenant; every repository name exists)::

    GET  /repos/{owner}/{repo}                  get a repository            tickets:read
    POST /repos/{owner}/{repo}/issues           create an issue             tickets:write
    GET  /repos/{owner}/{repo}/issues/{number}  get an issue (consistent)   tickets:read  lookup
    GET  /repos/{owner}/{repo}/issues           list issues (consistent;    tickets:read  lookup
                                                ``labels``, ``state``)
    GET  /search/issues?q=                      search (lags; can miss)     tickets:read  lookup

Issue numbers are per repository and monotonic. Creating the same issue twice opens two issues.
Search is eventually consistent: it sees issues ``search_lag`` harness seconds after they were
opened and nothing while ``search_misses`` is on, so zero hits do not prove absence; the
consistent answers are the issue itself and the repository's issue list.

Search qualifiers: ``label:name`` / ``label:"two words"`` (all must match), ``repo:owner/name``,
``is:issue``, ``is:open`` / ``is:closed`` / ``state:...``, ``in:title,body``; other terms must
appear in the title or body.

A body line ``crashpoints_args_hash: <hash>`` is recorded as the declared args hash;
``crashpoints_correlation_id: <id>`` (or the ``X-Correlation-Id`` header) as the correlation id.
Payload hash: ``args_hash`` of ``{"repo": "owner/name", **the JSON body}``. Logical operation:
the correlation id, or the payload hash when there is none.

Aliases (journal ``aliases``) of an issue created or fetched by number, as GitHub clients name
it: ``owner/repo#N``, ``N``, ``#N``, the API path ``/repos/owner/repo/issues/N``, the HTML path
``/owner/repo/issues/N``, and the absolute ``url`` and ``html_url`` exactly as that request's
answer shows them (their origin is the one the client used: the in-process base URL, or the
loopback server's address). A repository, a list and a search name no single issue: no aliases.

Issues opened elsewhere come in from GitHub's own issue JSON: see :meth:`Tickets.exported_objects`.

Bad input answers 400 (as the issue tracker's spec asks; GitHub itself uses 422 for validation).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sqlite3
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import httpx

from ._described.engine import DescribedProvider, Refused, public
from ._email import iso_time
from ._exports import Exported, ExportError, listed
from ._github_exports import BadLabel, exported_issue, label_names
from ._github_labels import Change, relabel
from ._journal import next_counter
from ._provider import (
    CORRELATION_HEADER,
    Call,
    EffectDraft,
    Reply,
    Route,
    json_body,
    json_document,
    payload_hash,
)

__all__ = ["Tickets"]

#: The schemas of GitHub's description that the hand-written answers are shaped by.
_ISSUE = {"$ref": "#/components/schemas/issue"}
_FOUND = {"$ref": "#/components/schemas/issue-search-result-item"}
_REPOSITORY = {"$ref": "#/components/schemas/full-repository"}

_DOCS = "https://docs.github.com/rest"
_MARKER = re.compile(r"^\s*(crashpoints_args_hash|crashpoints_correlation_id):\s*(\S+)\s*$", re.M)
_ALLOWED = frozenset({"title", "body", "labels", "assignees", "assignee", "milestone", "type"})


def _stable_id(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


class Tickets(DescribedProvider):
    """The tickets provider: not idempotent, GitHub. See the module docstring."""

    name = "tickets"
    default_base_url = "https://tickets.crashpoints.test"
    request_id_header = "X-GitHub-Request-Id"
    request_id_prefix = "gh_req_"
    description = "github"
    style = "github"
    invalid_status = 422
    searched: ClassVar[Mapping[str, str]] = {"issue-search-result-item": "issue"}

    def own_routes(self) -> list[Route]:
        repo = r"/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
        return [
            Route("GET", re.compile(repo + "/?"), "repos.get", "read", "tickets:read",
                  self._repo),
            Route("POST", re.compile(repo + "/issues/?"), "issues.create", "write",
                  "tickets:write", self._create),
            Route("GET", re.compile(repo + r"/issues/(?P<number>\d+)/?"), "issues.get",
                  "lookup", "tickets:read", self._get),
            Route("GET", re.compile(repo + "/issues/?"), "issues.list", "lookup",
                  "tickets:read", self._list),
            Route("GET", re.compile(r"/search/issues/?"), "issues.search", "lookup",
                  "tickets:read", self._search, search=True),
            *self._label_routes(repo + r"/issues/(?P<number>\d+)/labels"),
        ]

    def _label_routes(self, labels: str) -> list[Route]:
        """An issue's labels (``_github_labels.py``)."""
        def route(method: str, path: str, change: Change, kind: Any) -> Route:
            scope = "tickets:read" if kind == "lookup" else "tickets:write"
            return Route(method, re.compile(path + "/?"), f"issues.labels.{change}", kind, scope,
                         lambda call: relabel(self, call, change))

        return [
            route("GET", labels, "list", "lookup"),
            route("POST", labels, "add", "write"),
            route("PUT", labels, "set", "write"),
            route("DELETE", labels, "clear", "write"),
            route("DELETE", labels + "/(?P<name>[^/]+)", "remove", "write"),
        ]

    def placement(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """An issue is placed in its repository (its ``repo``: ``owner/name``)."""
        if isinstance(obj.get("repo"), str) and "/" in obj["repo"]:
            owner, _, name = obj["repo"].partition("/")
            return {"owner": owner, "repo": name}
        return super().placement(obj)

    def present(self, call: Call, object_type: str, obj: dict[str, Any]) -> dict[str, Any]:
        """An issue with its links, labels, author and count of comments, as GitHub shows
        it."""
        if object_type != "issue" or "repo" not in obj:
            return obj
        rendered = self._render(call.origin, obj)
        place = self.placement(obj)
        # The comments it came with (an issue exported from production), and those made here.
        rendered["comments"] = int(obj.get("comments") or 0) + sum(
            1 for c in self.objects(call, "issue-comment")
            if dict(self.placement(c)) == {**place, "issue_number": str(obj["number"])}
        )
        return rendered

    def revise(self, call: Call, object_type: str, before: Mapping[str, Any],
               after: dict[str, Any]) -> dict[str, Any]:
        """An issue closed gets its ``closed_at`` (reopened: none); labels are kept by name;
        any change moves ``updated_at``."""
        if object_type != "issue":
            return after
        if "labels" in after and isinstance(after["labels"], list):
            try:
                after["labels"] = label_names(after["labels"])
            except BadLabel as exc:
                raise Refused(422, "Validation Failed", code="invalid") from exc
        if after.get("state") == "closed" and before.get("state") != "closed":
            after["closed_at"] = iso_time(call.wall)
        elif after.get("state") == "open":
            after["closed_at"] = None
        if public(after) != public(before):
            after["updated_at"] = iso_time(call.wall)
        return after

    def next_number(self, call: Call, values: Mapping[str, str]) -> int:
        """Issues and pull requests share a repository's numbers, as on GitHub."""
        full = f"{values.get('owner')}/{values.get('repo')}"
        with self.journal.transaction() as conn:
            return next_counter(conn, f"issues:{full}")

    def error(self, status: int, message: str, *, code: str | None = None,
              field: str | None = None) -> Reply:
        body: dict[str, Any] = {"message": message, "documentation_url": _DOCS}
        if field is not None:
            body["errors"] = [{"resource": "Issue", "code": code or "invalid", "field": field}]
        return Reply(status, json_body(body), {"Content-Type": "application/json; charset=utf-8"})

    def unauthorized(self, request: httpx.Request) -> Reply:
        if not request.headers.get("Authorization"):
            return self.error(401, "Requires authentication")
        return self.error(401, "Bad credentials")

    def named_tenant(self, request: httpx.Request, groups: Mapping[str, str]) -> str | None:
        return groups.get("owner") or super().named_tenant(request, groups)

    # -- objects from outside ------------------------------------------------------------------

    def exported_objects(self, data: Any, *, where: str) -> list[Exported]:
        """GitHub's own JSON of issues, as its REST API returns them: a list
        (``GET /repos/{owner}/{repo}/issues``), a search result (``GET /search/issues``,
        ``{"items": [...]}``) or one issue; or the fakes' own format.

        Each becomes the issue the fake stores when it opens one (author: the user's login;
        labels: their names; ``assignees`` as GitHub gives them), named as a client of the fake
        names an issue it opened: ``owner/repo#N``, ``N``, ``#N``, ``/repos/owner/repo/issues/N``
        and ``/owner/repo/issues/N``, and by the export's own absolute ``url`` and ``html_url``
        (what production's clients saw and a ledger may have stored; the fake's own absolute
        URLs depend on the origin each client uses, unknown before it asks). The repository owner
        is the fake's tenant: seed with a key of that tenant (:meth:`seed` refuses others).

        The issues come oldest first (by ``created_at``, then number), the order the fake
        would have opened them in: GitHub lists newest first, and the fake's lists and search
        put the last one seeded first. Pull requests are refused (GitHub lists them among
        issues; the fake has none). Raises :class:`ExportError` saying what is wrong."""
        if isinstance(data, Mapping) and data.get("format") is not None:
            return super().exported_objects(data, where=where)
        issues = [self._github_issue(item, f"{where}: issue {index}")
                  for index, item in enumerate(listed(data, where=where))]
        return sorted(issues, key=lambda issue: (issue.created or 0.0, issue.body["number"]))

    def _github_issue(self, item: Any, where: str) -> Exported:
        """One issue of GitHub's JSON, as :meth:`_create` stores it; raises ExportError."""
        issue, created = exported_issue(item, where)
        full, number = issue["repo"], issue["number"]
        origin = self.base_url
        rendered = self._render(origin, issue)
        aliases = tuple(a for a in _aliases(full, rendered) if not a.startswith(origin))
        # The URLs production's clients saw (api.github.com, github.com): a ledger that
        # stored one names the issue by it.
        aliases += tuple(
            url for url in (item.get("url"), item.get("html_url"))
            if isinstance(url, str) and url and url not in aliases
        )
        return Exported(object_type="issue", object_id=f"{full}#{number}",
                        operation="issues.create", body=issue, created=created,
                        aliases=aliases)

    def seeded(self, conn: sqlite3.Connection, objects: Sequence[Exported]) -> None:
        """Moves each repository's issue counter past the largest number seeded there, so a
        new issue never takes a seeded number. Refuses an issue seeded with a key of another
        tenant than its repository's owner (no key could reach it) or named otherwise than
        ``owner/repo#number``."""
        largest: dict[str, int] = {}
        for obj in objects:
            if obj.object_type != "issue":
                continue
            full, number = obj.body.get("repo"), obj.body.get("number")
            if (not isinstance(full, str) or isinstance(number, bool)
                    or not isinstance(number, int) or obj.object_id != f"{full}#{number}"):
                raise ExportError(
                    f"{self.name}: issue {obj.object_id!r} must be named 'owner/repo#number' "
                    f"after its body's repo and number (found {full!r}, {number!r})."
                )
            owner = full.partition("/")[0]
            tenant = conn.execute(
                "SELECT tenant_id FROM effects WHERE object_type='issue' AND object_id=?",
                (obj.object_id,),
            ).fetchone()[0]
            if tenant != owner:
                raise ExportError(
                    f"{self.name}: issue {obj.object_id} belongs to {owner!r}, but the key "
                    f"seeding it acts for tenant {tenant!r}; the repository owner is the "
                    f"tenant here: seed it with a key of tenant {owner!r}."
                )
            largest[full] = max(largest.get(full, 0), number)
        for full, number in largest.items():
            conn.execute(
                "INSERT INTO counters(name, value) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET value=max(value, excluded.value)",
                (f"issues:{full}", number),
            )

    # -- rendering -----------------------------------------------------------------------------

    def _repo_json(self, origin: str, owner: str, name: str) -> dict[str, Any]:
        full = f"{owner}/{name}"
        api = f"{origin}/repos/{full}"
        return {
            "id": _stable_id(full),
            "node_id": f"R_{_stable_id(full):x}",
            "name": name,
            "full_name": full,
            "private": True,
            "owner": self._user(origin, owner),
            "html_url": f"{origin}/{full}",
            "url": api,
            "issues_url": api + "/issues{/number}",
            "labels_url": api + "/labels{/name}",
            "has_issues": True,
            "open_issues_count": 0,
            "default_branch": "main",
            "archived": False,
            "disabled": False,
            "visibility": "private",
            "permissions": {"admin": False, "push": True, "pull": True},
        }

    @staticmethod
    def _user(origin: str, login: str) -> dict[str, Any]:
        return {
            "login": login,
            "id": _stable_id(login),
            "type": "Organization",
            "url": f"{origin}/users/{login}",
            "html_url": f"{origin}/{login}",
        }

    @staticmethod
    def label(origin: str, full: str, name: str) -> dict[str, Any]:
        """Label ``name`` of repository ``full`` as GitHub shows it."""
        return {
            "id": _stable_id(f"{full}:{name}"),
            "node_id": f"LA_{_stable_id(f'{full}:{name}'):x}",
            "name": name,
            "color": "ededed",
            "default": False,
            "description": None,
            "url": f"{origin}/repos/{full}/labels/{urllib.parse.quote(name)}",
        }

    def _render(self, origin: str, issue: dict[str, Any]) -> dict[str, Any]:
        full = issue["repo"]
        api = f"{origin}/repos/{full}"
        out = {k: v for k, v in issue.items() if k not in ("repo", "author")}
        out.update(
            url=f"{api}/issues/{issue['number']}",
            repository_url=api,
            html_url=f"{origin}/{full}/issues/{issue['number']}",
            labels=[self.label(origin, full, label) for label in issue["labels"]],
            user=self._user(origin, issue["author"]),
        )
        return out

    # -- handlers ------------------------------------------------------------------------------

    def _repo(self, call: Call) -> Reply:
        body = self.render(call, _REPOSITORY, "full-repository",
                           self._repo_json(call.origin, call.groups["owner"], call.groups["repo"]))
        return Reply(200, json_body(body), {"Content-Type": "application/json; charset=utf-8"})

    def _create(self, call: Call) -> Reply:
        request = call.request
        content_type = call.media_type
        if content_type not in ("application/json", ""):
            return self.error(400, f"Unsupported Content-Type {content_type!r}: send JSON.")
        try:
            data = json_document(request.content)
        except ValueError:
            return self.error(400, "Problems parsing JSON")
        if not isinstance(data, dict):
            return self.error(400, "Problems parsing JSON")
        unknown = sorted(set(data) - _ALLOWED)
        if unknown:
            return self.error(400, "Validation Failed", code="invalid", field=unknown[0])
        title = data.get("title")
        if not isinstance(title, str) or not title.strip():
            return self.error(400, "Validation Failed", code="missing_field", field="title")
        body = data.get("body")
        if body is not None and not isinstance(body, str):
            return self.error(400, "Validation Failed", code="invalid", field="body")
        labels = data.get("labels", [])
        if not isinstance(labels, list):
            return self.error(400, "Validation Failed", code="invalid", field="labels")
        try:
            names = label_names(labels)
        except BadLabel:
            return self.error(400, "Validation Failed", code="invalid", field="labels")
        full = f"{call.groups['owner']}/{call.groups['repo']}"
        phash = payload_hash({"repo": full, **data})
        if phash is None:
            return self.error(400, "Problems parsing JSON")
        markers = dict(_MARKER.findall(body or ""))
        correlation = markers.get("crashpoints_correlation_id") or request.headers.get(
            CORRELATION_HEADER
        )
        with self.journal.transaction() as conn:
            number = next_counter(conn, f"issues:{full}")
        issue = {
            "id": call.seq,
            "node_id": f"I_{call.seq:012d}",
            "number": number,
            "title": title,
            "body": body,
            "state": "open",
            "locked": False,
            "comments": 0,
            "assignees": [],
            "created_at": iso_time(call.wall),
            "updated_at": iso_time(call.wall),
            "closed_at": None,
            "repo": full,
            "author": call.tenant_id,
            "labels": names,
        }
        object_id = f"{full}#{number}"
        rendered = self.render(call, _ISSUE, "issue", issue)
        return Reply(
            201,
            json_body(rendered),
            {
                "Content-Type": "application/json; charset=utf-8",
                "Location": f"{call.origin}/repos/{full}/issues/{number}",
            },
            effect=EffectDraft("issue", object_id, issue),
            correlation_id=correlation,
            operation_key=correlation or phash,
            payload_hash=phash,
            args_hash=markers.get("crashpoints_args_hash"),
            object_id=object_id,
            aliases=_aliases(full, rendered),
        )

    def _get(self, call: Call) -> Reply:
        full = f"{call.groups['owner']}/{call.groups['repo']}"
        object_id = f"{full}#{int(call.groups['number'])}"
        issue = self.current(call, "issue", object_id)
        if issue is None:
            return self.error(404, "Not Found")
        rendered = self.render(call, _ISSUE, "issue", issue)
        reply = Reply(200, json_body(rendered),
                      {"Content-Type": "application/json; charset=utf-8"})
        reply.object_id = object_id
        reply.aliases = _aliases(full, rendered)
        return reply

    def _list(self, call: Call) -> Reply:
        full = f"{call.groups['owner']}/{call.groups['repo']}"
        state = call.query.get("state", "open")
        if state not in ("open", "closed", "all"):
            return self.error(400, "Validation Failed", code="invalid", field="state")
        wanted = [x for x in call.query.get("labels", "").split(",") if x]
        issues = [
            i for i in self.objects(call, "issue")
            if i.get("repo") == full
            and (state == "all" or i["state"] == state)
            and all(label in i["labels"] for label in wanted)
        ]
        issues.reverse()  # newest first, as GitHub lists them
        body = [self.render(call, _ISSUE, "issue", i) for i in issues[:100]]
        return Reply(200, json_body(body), {"Content-Type": "application/json; charset=utf-8"})

    def _search(self, call: Call) -> Reply:
        q = call.query.get("q", "")
        try:
            terms = shlex.split(q)
        except ValueError:
            terms = []
        if not terms:
            return self.error(400, "Validation Failed", code="missing", field="q")
        labels: list[str] = []
        repos: list[str] = []
        state: str | None = None
        words: list[str] = []
        for term in terms:
            qualifier, sep, value = term.partition(":")
            if not sep:
                words.append(term.lower())
            elif qualifier == "label":
                labels.append(value)
            elif qualifier == "repo":
                repos.append(value)
            elif qualifier in ("is", "state") and value in ("open", "closed"):
                state = value
            elif (qualifier == "is" and value == "issue") or qualifier == "in":
                continue
            else:
                return self.error(400, f"Validation Failed: unsupported qualifier {term!r}",
                                  code="invalid", field="q")
        hits = [
            i for i in self.objects(call, "issue", lags=True)
            if "repo" in i and all(label in i["labels"] for label in labels)
            and (not repos or i["repo"] in repos)
            and (state is None or i["state"] == state)
            and all(w in f"{i['title']}\n{i['body'] or ''}".lower() for w in words)
        ]
        hits.reverse()
        items = [self.render(call, _FOUND, "issue", {**i, "score": 1.0}) for i in hits[:100]]
        body = self.documented("GET", "/search/issues", {
            "total_count": len(hits), "incomplete_results": False, "items": items})
        return Reply(200, json_body(body), {"Content-Type": "application/json; charset=utf-8"})


def _aliases(full: str, rendered: dict[str, Any]) -> tuple[str, ...]:
    """Every name a GitHub client may keep for issue ``rendered`` of repository ``full``, as
    this request shows it: ``owner/repo#N``, ``N``, ``#N``, the API and HTML paths, and the
    absolute ``url`` and ``html_url`` (whose origin is the one this request used)."""
    number = rendered["number"]
    return (
        f"{full}#{number}",
        str(number),
        f"#{number}",
        f"/repos/{full}/issues/{number}",
        f"/{full}/issues/{number}",
        rendered["url"],
        rendered["html_url"],
    )
