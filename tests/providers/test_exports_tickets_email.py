"""tickets and email start from what GitHub and SendGrid held: their own export JSON, seeded.

A seeded issue or message must answer every lookup, list and search of the fake exactly as one
the fake made itself; numbering must go on past it; the journal must count it as an effect of
the key that seeded it; and a bad export must say what is wrong.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_providers import EXPORT_FORMAT, ApiKey, Email, ExportError, Provider, Tickets, read_export
from tests.conftest import ManualClock

from .conftest import Connect, auth

WRITER = "acme-writer"
REPO = "acme/payments-api"
#: Who seeds: the production agent whose incident is reproduced.
SEEDER = ApiKey("acme-prod-key", "acme", frozenset({"tickets:write", "email:write"}),
                label="prod-agent-7")


def _github_issue(number: int, title: str, body: str, *, created: str, closed: str | None = None,
                  labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """An issue as ``GET /repos/acme/payments-api/issues`` returns it (trimmed of nothing the
    fake reads, and keeping some fields it ignores)."""
    api = f"https://api.github.com/repos/{REPO}"
    return {
        "url": f"{api}/issues/{number}",
        "repository_url": api,
        "labels_url": f"{api}/issues/{number}/labels{{/name}}",
        "comments_url": f"{api}/issues/{number}/comments",
        "events_url": f"{api}/issues/{number}/events",
        "html_url": f"https://github.com/{REPO}/issues/{number}",
        "id": 2_204_000_000 + number,
        "node_id": f"I_kwDOLq3xZs5{number:05d}",
        "number": number,
        "title": title,
        "user": {"login": "mira-oncall", "id": 5_120_311, "node_id": "MDQ6VXNlcjUxMjAzMTE=",
                 "type": "User", "site_admin": False,
                 "url": "https://api.github.com/users/mira-oncall"},
        "labels": [
            {"id": 6_650_000_000 + i, "node_id": f"LA_kwDOLq3xZs8AAAABjL{i}", "url":
             f"{api}/labels/{name}", "name": name, "color": "d73a4a", "default": False,
             "description": None}
            for i, name in enumerate(labels)
        ],
        "state": "open" if closed is None else "closed",
        "locked": False,
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "comments": 0 if closed is None else 3,
        "created_at": created,
        "updated_at": closed or created,
        "closed_at": closed,
        "author_association": "MEMBER",
        "active_lock_reason": None,
        "body": body,
        "reactions": {"url": f"{api}/issues/{number}/reactions", "total_count": 0},
        "timeline_url": f"{api}/issues/{number}/timeline",
        "performed_via_github_app": None,
        "state_reason": None if closed is None else "completed",
    }


#: Newest first, as GitHub lists them.
GITHUB_ISSUES = [
    _github_issue(57, "Duplicate refund for order 7",
                  "Order 7 was refunded twice.\n\ncrashpoints_correlation_id: refund-7",
                  created="2025-11-30T08:12:45Z", labels=("billing", "incident")),
    _github_issue(41, "Webhook retries exhausted", "Deliveries to /hooks/stripe stopped.",
                  created="2025-11-12T16:40:09Z", closed="2025-11-13T10:02:55Z",
                  labels=("billing",)),
]

#: Newest first, as SendGrid lists them.
SENDGRID_ACTIVITY = {
    "messages": [
        {
            "from_email": "billing@acme.example",
            "msg_id": "Xk2Rf0sDT1WZ8h5pQm9aYg.filterdrecv-p3las1-5bf99c48d-ww2f6-20-5F5FC77B-3.0",
            "subject": "Your refund for order 7",
            "to_email": "customer@example.org",
            "status": "processed",
            "opens_count": 0,
            "clicks_count": 0,
            "last_event_time": "2025-11-30T08:13:05.000+00:00",
        },
        {
            "from_email": "billing@acme.example",
            "msg_id": "LW4LDPzwQ3i8IqY7tLwNXA.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",
            "subject": "Your refund for order 7",
            "to_email": "customer@example.org",
            "status": "delivered",
            "opens_count": 2,
            "clicks_count": 1,
            "last_event_time": "2025-11-30T08:13:02Z",
        },
    ]
}
PROCESSED, DELIVERED = SENDGRID_ACTIVITY["messages"]
FIRST_MSG = DELIVERED["msg_id"]


def _keys(name: str) -> list[ApiKey]:
    return [ApiKey(WRITER, "acme", frozenset({f"{name}:write"}))]


@pytest.fixture
def tickets(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    with Tickets(tmp_path / "tickets.sqlite3", clock=clock, keys=_keys("tickets")) as provider:
        yield provider


@pytest.fixture
def email(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    with Email(tmp_path / "email.sqlite3", clock=clock, keys=_keys("email")) as provider:
        yield provider


def _export_file(tmp_path: Path, name: str, data: Any) -> Any:
    """``data`` written as the file a user would give, and read back as the harness does."""
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return read_export(path)


Seeded = Callable[[Provider, str, Any], httpx.Client]


@pytest.fixture
def seeded(tmp_path: Path, clock: ManualClock, connect: Connect) -> Seeded:
    """``seeded(provider, name, data)``: ``provider`` seeded from ``data`` exported to the file
    ``name``, by :data:`SEEDER`; a client to it that sends :data:`WRITER`'s key."""

    def seed(provider: Provider, name: str, data: Any) -> httpx.Client:
        objects = provider.exported_objects(_export_file(tmp_path, name, data), where=name)
        provider.seed(objects, key=SEEDER, at=clock())
        client = connect(provider)
        client.headers.update(auth(WRITER))
        return client

    return seed


def _refused(provider: Provider, data: Any, where: str, message: str) -> None:
    """``data``, read from the file ``where``, is refused as an export of ``provider`` with an
    error that names the file first and matches ``message``."""
    with pytest.raises(ExportError, match=message) as raised:
        provider.exported_objects(data, where=where)
    assert str(raised.value).startswith(where)


# -- tickets -------------------------------------------------------------------------------------


def test_a_seeded_issue_answers_like_one_the_fake_opened(tickets: Provider, seeded: Seeded) -> None:
    client = seeded(tickets, "issues.json", GITHUB_ISSUES)

    got = client.get(f"/repos/{REPO}/issues/57")
    assert got.status_code == 200
    issue = got.json()
    assert (issue["number"], issue["title"], issue["state"]) == (
        57, "Duplicate refund for order 7", "open")
    assert [label["name"] for label in issue["labels"]] == ["billing", "incident"]
    assert issue["user"]["login"] == "mira-oncall"
    assert issue["created_at"] == "2025-11-30T08:12:45Z"
    # Absolute URLs point at the fake, wherever the client reached it, as for its own issues.
    assert issue["url"] == str(client.base_url.join(f"/repos/{REPO}/issues/57"))
    closed = client.get(f"/repos/{REPO}/issues/41").json()
    assert (closed["state"], closed["closed_at"], closed["comments"]) == (
        "closed", "2025-11-13T10:02:55Z", 3)

    created = client.post(f"/repos/{REPO}/issues", json={
        "title": "Duplicate refund for order 9", "labels": ["billing", "incident"]})
    assert created.status_code == 201
    assert created.json()["number"] == 58  # past every seeded number, never one of them
    assert set(created.json()) == set(issue)  # the same shape, field for field

    def listed(**params: str) -> list[int]:
        reply = client.get(f"/repos/{REPO}/issues", params=params)
        assert reply.status_code == 200
        return [i["number"] for i in reply.json()]

    def searched(q: str) -> list[int]:
        reply = client.get("/search/issues", params={"q": q})
        assert reply.status_code == 200
        return [i["number"] for i in reply.json()["items"]]

    assert listed(labels="incident") == [58, 57]
    assert listed(state="all", labels="billing") == [58, 57, 41]
    assert listed(state="closed") == [41]
    assert searched(f"label:incident repo:{REPO} is:open") == [58, 57]
    assert searched("refund is:issue") == [58, 57]
    assert searched("webhook is:closed") == [41]

    # A client that kept the issue's number links to the seeded object in the journal.
    lookup = next(r for r in tickets.journal.requests() if r.operation == "issues.get")
    assert {f"{REPO}#57", "57", "#57", f"/repos/{REPO}/issues/57"} <= set(lookup.aliases)


def test_seeded_issues_are_effects_of_the_seeding_key(
    tickets: Provider, clock: ManualClock
) -> None:
    objects = tickets.exported_objects(GITHUB_ISSUES, where="issues.json")
    # Oldest first, as the fake would have opened them.
    assert [(o.object_type, o.object_id, o.operation) for o in objects] == [
        ("issue", f"{REPO}#41", "issues.create"), ("issue", f"{REPO}#57", "issues.create")]
    assert objects[1].created == 1764490365.0  # 2025-11-30T08:12:45Z
    # The fake's own names, then the URLs production's clients saw (a ledger may hold one).
    assert objects[1].aliases == (
        f"{REPO}#57", "57", "#57", f"/repos/{REPO}/issues/57", f"/{REPO}/issues/57",
        f"https://api.github.com/repos/{REPO}/issues/57",
        f"https://github.com/{REPO}/issues/57")
    request_ids = tickets.seed(objects, key=SEEDER, at=clock())

    effects = tickets.journal.effects(label="prod-agent-7")
    assert [e.object_id for e in effects] == [f"{REPO}#41", f"{REPO}#57"]
    assert [e.request_id for e in effects] == request_ids
    assert {(e.tenant_id, e.key_id, e.operation) for e in effects} == {
        ("acme", SEEDER.key_id, "issues.create")}
    assert effects[0].body["author"] == "mira-oncall"
    assert tickets.journal.effects(label="someone-else") == []


def test_numbering_goes_on_past_seeded_issues_whatever_came_before(
    tickets: Provider, clock: ManualClock
) -> None:
    client = httpx.Client(transport=httpx.MockTransport(tickets.handle),
                          base_url=tickets.base_url)

    def create(repo: str) -> int:
        reply = client.post(f"/repos/{repo}/issues", headers=auth(WRITER), json={"title": "t"})
        assert reply.status_code == 201
        return int(reply.json()["number"])

    assert (create(REPO), create(REPO)) == (1, 2)
    tickets.seed(tickets.exported_objects(GITHUB_ISSUES, where="issues.json"),
                 key=SEEDER, at=clock())
    assert create(REPO) == 58
    assert create("acme/web") == 1  # other repositories keep their own numbers
    old = _github_issue(3, "Old", "", created="2025-01-02T03:04:05Z")
    tickets.seed(tickets.exported_objects([old], where="old.json"), key=SEEDER, at=clock())
    assert create(REPO) == 59  # a smaller seeded number moves nothing back


def test_a_seeded_issue_with_a_key_of_another_tenant_is_refused(
    tickets: Provider, clock: ManualClock
) -> None:
    objects = tickets.exported_objects(GITHUB_ISSUES, where="issues.json")
    other = ApiKey("globex-key", "globex", frozenset({"tickets:write"}))
    with pytest.raises(ExportError, match=r"belongs to 'acme'.*key of tenant 'acme'"):
        tickets.seed(objects, key=other, at=clock())
    assert tickets.journal.effects() == []  # nothing half-seeded


def test_search_results_and_single_issues_are_read_too(tickets: Provider) -> None:
    search = {"total_count": 2, "incomplete_results": False,
              "items": [{**issue, "score": 1.0} for issue in GITHUB_ISSUES]}
    from_search = tickets.exported_objects(search, where="search.json")
    from_list = tickets.exported_objects(GITHUB_ISSUES, where="issues.json")
    assert from_search == from_list
    assert tickets.exported_objects(GITHUB_ISSUES[1], where="41.json") == [from_list[0]]
    # Without repository_url, the repository comes from html_url.
    bare = {k: v for k, v in GITHUB_ISSUES[0].items() if k != "repository_url"}
    assert tickets.exported_objects([bare], where="issues.json") == [from_list[1]]


def _broken_issue(**changes: Any) -> list[dict[str, Any]]:
    issue = copy.deepcopy(GITHUB_ISSUES[0])
    for name, value in changes.items():
        if value is _DROP:
            del issue[name]
        else:
            issue[name] = value
    return [issue]


_DROP = object()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_broken_issue(pull_request={"url": "https://api.github.com/repos/acme/p/pulls/57"}),
         r"issue 0 \(#57\) is a pull request.*filter them out"),
        (_broken_issue(number=_DROP), r"issue 0 has no issue number.*gh api"),
        (_broken_issue(repository_url=_DROP, html_url=_DROP), r"names no repository"),
        (_broken_issue(repository_url="https://api.github.com/users/acme"),
         r"repository_url 'https://api.github.com/users/acme' names no repository"),
        (_broken_issue(created_at="30/11/2025"), r"created_at must be an ISO 8601 time"),
        (_broken_issue(created_at="2025-11-30T08:12:45"), r"with its UTC offset"),
        (_broken_issue(labels="billing"), r"labels must be a list"),
        (_broken_issue(user=None), r"user must be an object with the author's login"),
        (_broken_issue(state="merged"), r"state must be 'open' or 'closed'"),
        (_broken_issue(title=""), r"title must be a non-empty string"),
        ("acme/payments-api#57", r"holds str JSON, not a list or an object"),
        ([42], r"issue 0 is int JSON, not a GitHub issue"),
        ({"format": EXPORT_FORMAT, "provider": "email", "objects": []},
         r"export of provider 'email', not 'tickets'"),
    ],
    ids=["pull-request", "no-number", "no-repository", "bad-repository-url", "bad-time",
         "naive-time", "labels", "no-user", "state", "title", "string", "not-an-object",
         "other-provider"],
)
def test_a_bad_github_export_says_what_is_wrong(
    tickets: Provider, data: Any, message: str
) -> None:
    _refused(tickets, data, "issues.json", message)


# -- email ---------------------------------------------------------------------------------------


def test_a_seeded_message_answers_like_one_the_fake_sent(email: Provider, seeded: Seeded) -> None:
    client = seeded(email, "activity.json", SENDGRID_ACTIVITY)

    got = client.get(f"/v3/messages/{FIRST_MSG}")
    assert got.status_code == 200
    assert {k: got.json()[k] for k in DELIVERED} == DELIVERED

    sent = client.post("/v3/mail/send", json={
        "personalizations": [{"to": [{"email": "customer@example.org"}]}],
        "from": {"email": "billing@acme.example"}, "subject": "Your refund for order 7",
        "content": [{"type": "text/plain", "value": "Refunded."}]})
    assert sent.status_code == 202
    own_id = sent.headers["X-Message-Id"]
    own = client.get(f"/v3/messages/{own_id}").json()
    assert set(own) == set(got.json())  # the same shape, field for field

    def search(query: str) -> list[str]:
        reply = client.get("/v3/messages", params={"query": query, "limit": "100"})
        assert reply.status_code == 200
        return [m["msg_id"] for m in reply.json()["messages"]]

    second = PROCESSED["msg_id"]
    assert search(f'msg_id="{FIRST_MSG}"') == [FIRST_MSG]
    assert search('to_email="customer@example.org" AND subject="Your refund for order 7"') == [
        FIRST_MSG, second, own_id]
    assert search('(from_email="billing@acme.example") AND (status="processed")') == [second]

    lookup = next(r for r in email.journal.requests() if r.operation == "messages.get")
    assert lookup.aliases == (FIRST_MSG,)


def test_seeded_messages_are_effects_of_the_seeding_key(
    email: Provider, clock: ManualClock
) -> None:
    objects = email.exported_objects(SENDGRID_ACTIVITY, where="activity.json")
    # Oldest first, as the fake would have sent them.
    assert [(o.object_type, o.object_id, o.operation, o.aliases) for o in objects] == [
        ("message", FIRST_MSG, "mail.send", (FIRST_MSG,)),
        ("message", PROCESSED["msg_id"], "mail.send", (PROCESSED["msg_id"],))]
    assert objects[0].created == 1764490382.0  # 2025-11-30T08:13:02Z
    # What the activity JSON does not carry: as a send to one recipient with nothing extra.
    assert {k: objects[1].body[k] for k in (
        "recipients", "unique_args", "headers", "correlation_id", "last_event_time")} == {
        "recipients": ["customer@example.org"], "unique_args": {}, "headers": {},
        "correlation_id": None, "last_event_time": "2025-11-30T08:13:05Z"}
    email.seed(objects, key=SEEDER, at=clock())
    effects = email.journal.effects(label="prod-agent-7")
    assert [(e.object_id, e.operation, e.tenant_id) for e in effects] == [
        (o.object_id, "mail.send", "acme") for o in objects]


def test_a_message_that_carries_unique_args_is_found_by_them(
    email: Provider, clock: ManualClock
) -> None:
    detail = {**DELIVERED,
              "unique_args": {"crashpoints_correlation_id": "refund-7"}}
    email.seed(email.exported_objects(detail, where="message.json"), key=SEEDER, at=clock())
    client = httpx.Client(transport=httpx.MockTransport(email.handle), base_url=email.base_url)
    reply = client.get("/v3/messages", headers=auth(WRITER),
                       params={"query": "unique_args['crashpoints_correlation_id']=\"refund-7\""})
    assert [m["msg_id"] for m in reply.json()["messages"]] == [FIRST_MSG]


def _broken_message(**changes: Any) -> dict[str, Any]:
    message = dict(DELIVERED)
    for name, value in changes.items():
        if value is _DROP:
            del message[name]
        else:
            message[name] = value
    return {"messages": [message]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_broken_message(msg_id=_DROP), r"message 0 has no msg_id.*GET /v3/messages"),
        (_broken_message(to_email="customer"), r"to_email must be an email address"),
        (_broken_message(last_event_time=_DROP), r"has no last_event_time"),
        (_broken_message(last_event_time="2025-11-30 08:13:02"), r"with its UTC offset"),
        (_broken_message(opens_count="2"), r"opens_count must be a count"),
        (_broken_message(status=None), r"status must be SendGrid's status"),
        ({"messages": ["msg_1"]}, r"message 0 is str JSON, not a SendGrid message"),
        ({"format": EXPORT_FORMAT, "provider": "email", "objects": {}},
         r"'objects' must be a list"),
    ],
    ids=["no-msg-id", "bad-address", "no-time", "naive-time", "count", "status",
         "not-an-object", "own-format"],
)
def test_a_bad_sendgrid_export_says_what_is_wrong(
    email: Provider, data: Any, message: str
) -> None:
    _refused(email, data, "activity.json", message)


# -- round trip ----------------------------------------------------------------------------------


def _same_objects(provider: Provider) -> list[tuple[Any, ...]]:
    return [(e.object_type, e.object_id, e.operation, e.body, e.aliases, e.tenant_id)
            for e in provider.journal.effects()]


@pytest.mark.parametrize("cls", [Tickets, Email])
def test_an_export_of_the_fakes_own_journal_seeds_the_same_objects(
    cls: type[Provider], tmp_path: Path, clock: ManualClock
) -> None:
    original = cls(tmp_path / "original.sqlite3", clock=clock, keys=_keys(cls.name))
    client = httpx.Client(transport=httpx.MockTransport(original.handle),
                          base_url=original.base_url)
    for n in range(3):
        if cls is Tickets:
            reply = client.post(f"/repos/{REPO}/issues", headers=auth(WRITER), json={
                "title": f"Refund {n}", "body": "crashpoints_correlation_id: r", "labels": ["a"]})
            assert reply.status_code == 201
        else:
            reply = client.post("/v3/mail/send", headers=auth(WRITER), json={
                "personalizations": [{"to": [{"email": f"c{n}@example.org"}],
                                      "custom_args": {"order": str(n)}}],
                "from": {"email": "billing@acme.example"}, "subject": f"Refund {n}",
                "content": [{"type": "text/plain", "value": "Refunded."}]})
            assert reply.status_code == 202
        clock.advance(1)

    data = _export_file(tmp_path, "export.json", original.export())
    fresh = cls(tmp_path / "fresh.sqlite3", clock=clock, keys=_keys(cls.name))
    objects = fresh.exported_objects(data, where="export.json")
    fresh.seed(objects, key=SEEDER, at=clock())
    assert _same_objects(fresh) == _same_objects(original)

    again = httpx.Client(transport=httpx.MockTransport(fresh.handle), base_url=fresh.base_url)
    if cls is Tickets:
        path = f"/repos/{REPO}/issues/2"
        assert again.get(path, headers=auth(WRITER)).json() == client.get(
            path, headers=auth(WRITER)).json()
        reply = again.post(f"/repos/{REPO}/issues", headers=auth(WRITER), json={"title": "t"})
        assert reply.json()["number"] == 4
    else:
        msg_id = objects[1].object_id
        path = f"/v3/messages/{msg_id}"
        assert again.get(path, headers=auth(WRITER)).json() == client.get(
            path, headers=auth(WRITER)).json()
    original.close()
    fresh.close()
