"""tickets: GitHub-like, not idempotent; consistent issue lookups, eventually consistent search."""

from __future__ import annotations

import pytest

from fake_providers import Provider
from pytest_crashpoints import args_hash
from tests.conftest import ManualClock

from .conftest import Connect, auth, post_bad_input

WRITER = "tickets-writer-a"
ISSUE = {
    "title": "Payment failed",
    "body": "crashpoints_correlation_id: t-1\ncrashpoints_args_hash: h",
    "labels": ["crashpoints", "billing"],
}


def test_repository_and_issue_creation(tickets: Provider, connect: Connect) -> None:
    client = connect(tickets)
    repo = client.get("/repos/tenant-a/ops", headers=auth("tickets-reader-a"))
    assert repo.status_code == 200
    assert repo.json()["full_name"] == "tenant-a/ops"
    assert repo.json()["url"] == str(client.base_url.join("/repos/tenant-a/ops"))
    first = client.post("/repos/tenant-a/ops/issues", json=ISSUE, headers=auth(WRITER))
    second = client.post("/repos/tenant-a/ops/issues", json=ISSUE, headers=auth(WRITER))
    other_repo = client.post("/repos/tenant-a/web/issues", json=ISSUE, headers=auth(WRITER))
    assert first.status_code == 201 and first.headers["X-GitHub-Request-Id"]
    assert (first.json()["number"], second.json()["number"]) == (1, 2)
    assert other_repo.json()["number"] == 1
    assert [label["name"] for label in first.json()["labels"]] == ["crashpoints", "billing"]
    effects = tickets.journal.effects(operation_key="t-1")
    assert len(effects) == 3  # not idempotent: every create opens an issue
    assert effects[0].payload_hash == args_hash({"repo": "tenant-a/ops", **ISSUE})
    assert effects[0].args_hash == "h"
    got = client.get("/repos/tenant-a/ops/issues/2", headers=auth(WRITER))
    assert got.json() == second.json()
    assert client.get("/repos/tenant-a/ops/issues/9", headers=auth(WRITER)).status_code == 404


def test_search_lags_and_misses_but_lists_are_consistent(
    tickets: Provider, connect: Connect, clock: ManualClock
) -> None:
    tickets.settings.update(search_lag=10.0)
    client = connect(tickets)
    number = client.post("/repos/tenant-a/ops/issues", json=ISSUE, headers=auth(WRITER)).json()[
        "number"]

    def search() -> list[int]:
        reply = client.get("/search/issues", headers=auth(WRITER),
                           params={"q": 'label:crashpoints label:"billing" repo:tenant-a/ops'})
        assert reply.status_code == 200
        assert reply.json()["total_count"] == len(reply.json()["items"])
        return [i["number"] for i in reply.json()["items"]]

    def listed() -> list[int]:
        reply = client.get("/repos/tenant-a/ops/issues", headers=auth(WRITER),
                           params={"labels": "crashpoints", "state": "all"})
        return [i["number"] for i in reply.json()]

    assert search() == [] and listed() == [number]  # zero hits is not absence
    clock.advance(10)
    assert search() == [number]
    tickets.faults.search_misses(1)
    assert search() == [] and listed() == [number]
    assert search() == [number]
    tickets.faults.search_misses()
    assert search() == [] and search() == []
    tickets.faults.lift("search_miss")
    assert search() == [number]
    other = client.get("/search/issues", params={"q": "label:crashpoints"},
                       headers=auth("tickets-writer-b"))
    assert other.json()["items"] == []


def test_search_by_text(tickets: Provider, connect: Connect) -> None:
    client = connect(tickets)
    client.post("/repos/tenant-a/ops/issues", json=ISSUE, headers=auth(WRITER))
    client.post("/repos/tenant-a/ops/issues", json={"title": "Other"}, headers=auth(WRITER))
    reply = client.get("/search/issues", params={"q": "crashpoints_args_hash is:issue is:open"},
                       headers=auth(WRITER))
    assert [i["title"] for i in reply.json()["items"]] == ["Payment failed"]
    bad = client.get("/search/issues", params={"q": "author:me"}, headers=auth(WRITER))
    assert bad.status_code == 400 and bad.json()["message"].startswith("Validation Failed")


@pytest.mark.parametrize(
    ("secret", "path", "status"),
    [(None, "/repos/tenant-a/ops/issues", 401), ("x", "/repos/tenant-a/ops/issues", 401),
     ("tickets-reader-a", "/repos/tenant-a/ops/issues", 403),
     (WRITER, "/repos/tenant-b/ops/issues", 403)],
    ids=["no-key", "unknown-key", "read-scope", "other-tenant"],
)
def test_refused_creates_apply_nothing(
    tickets: Provider, connect: Connect, secret: str | None, path: str, status: int
) -> None:
    client = connect(tickets)
    reply = client.post(path, json=ISSUE, headers=auth(secret) if secret else {})
    assert reply.status_code == status
    assert reply.json()["message"] and reply.json()["documentation_url"]
    assert tickets.journal.effects() == []


@pytest.mark.parametrize(
    ("content", "content_type"),
    [(b"{", "application/json"), (b'{"body": "no title"}', "application/json"),
     (b'{"title": "t", "labels": "bug"}', "application/json"),
     (b'{"title": "t", "nonsense": 1}', "application/json"),
     (b'{"title": "t"}', "text/plain")],
    ids=["malformed", "no-title", "labels-not-list", "unknown-field", "content-type"],
)
def test_bad_input_is_a_400_in_github_format(
    tickets: Provider, connect: Connect, content: bytes, content_type: str
) -> None:
    client = connect(tickets)
    reply = post_bad_input(tickets, client, "/repos/tenant-a/ops/issues", content, content_type)
    assert reply.json()["message"]
    ok = client.post("/repos/tenant-a/ops/issues", json={"title": "t"}, headers=auth(WRITER))
    assert ok.json()["number"] == 1  # a refused create used no number
