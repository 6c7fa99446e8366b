"""The real SDKs, unchanged, pointed at the fakes only by their base URL / API host setting.

stripe-python: with its httpx client in-process (respx routes) and with its default client
(requests) over loopback. PyGithub and sendgrid use requests/urllib, so they go over loopback.
Each SDK also authenticates with a derived key, and the journal names the process by its label.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import stripe
from github import Auth, BadCredentialsException, Github, GithubException, UnknownObjectException
from python_http_client.exceptions import BadRequestsError, UnauthorizedError
from sendgrid import SendGridAPIClient
from sendgrid.helpers.mail import CustomArg, Mail

from fake_providers import Provider, mock, serve
from tests.conftest import ManualClock

from .conftest import issue_derived

# stripe-python's HTTPXClient passes the encoded form as ``data=<str>``, which httpx 0.28
# deprecates; it is stripe's call, not ours.
STRIPE_HTTPX_WARNING = "ignore:Use 'content=<...>' to upload raw bytes/text content"


@pytest.fixture(params=["httpx-inprocess", "requests-loopback"])
def stripe_client(
    request: pytest.FixtureRequest, payments: Provider
) -> Iterator[stripe.StripeClient]:
    if request.param == "httpx-inprocess":
        http_client = stripe.HTTPXClient(allow_sync_methods=True)
        with mock(payments):
            yield stripe.StripeClient(
                "payments-writer-a", base_addresses={"api": payments.base_url},
                http_client=http_client, max_network_retries=0,
            )
        http_client.close()
    else:
        http_client = stripe.RequestsClient()
        with serve(payments) as url:
            yield stripe.StripeClient(
                "payments-writer-a", base_addresses={"api": url}, http_client=http_client,
                max_network_retries=0,
            )
        http_client.close()


@pytest.mark.filterwarnings(STRIPE_HTTPX_WARNING)
def test_stripe_python(stripe_client: stripe.StripeClient, payments: Provider) -> None:
    charges = stripe_client.v1.charges
    params: stripe.ChargeService.CreateParams = {
        "amount": 2500, "currency": "usd", "metadata": {"invoice": "inv-7"}}
    charge = charges.create(params=params, options={"idempotency_key": "inv-7:charge"})
    assert (charge.amount, charge.status) == (2500, "succeeded")
    assert charge.metadata["invoice"] == "inv-7"
    assert charge.last_response is not None and charge.last_response.request_id
    again = charges.create(params=params, options={"idempotency_key": "inv-7:charge"})
    assert again.id == charge.id
    assert again.last_response is not None
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    with pytest.raises(stripe.IdempotencyError):
        charges.create(params={**params, "amount": 2600},
                       options={"idempotency_key": "inv-7:charge"})
    assert charges.retrieve(charge.id).id == charge.id
    with pytest.raises(stripe.InvalidRequestError) as missing:
        charges.retrieve("ch_missing")
    assert missing.value.code == "resource_missing"
    found = charges.search(params={"query": "metadata['invoice']:'inv-7'"})
    assert [c.id for c in found.data] == [charge.id]
    intent = stripe_client.v1.payment_intents.create(params={
        "amount": 900, "currency": "eur", "confirm": True, "payment_method": "pm_card_visa"})
    assert intent.status == "succeeded"
    assert stripe_client.v1.payment_intents.retrieve(intent.id).amount == 900
    with pytest.raises(stripe.CardError):
        charges.create(params={"amount": 5, "currency": "usd", "source": "tok_chargeDeclined"})
    # One charge (replays and the decline applied nothing) and one payment intent.
    assert [e.object_id for e in payments.journal.effects()] == [charge.id, intent.id]
    assert len(payments.journal.effects(operation_key="inv-7:charge")) == 1


def test_stripe_python_authentication(payments: Provider) -> None:
    with serve(payments) as url:
        http_client = stripe.RequestsClient()
        client = stripe.StripeClient("sk_wrong", base_addresses={"api": url},
                                     http_client=http_client, max_network_retries=0)
        with pytest.raises(stripe.AuthenticationError):
            client.v1.charges.create(params={"amount": 5, "currency": "usd"})
        reader = stripe.StripeClient("payments-reader-a", base_addresses={"api": url},
                                     http_client=http_client, max_network_retries=0)
        with pytest.raises(stripe.PermissionError):
            reader.v1.charges.create(params={"amount": 5, "currency": "usd"})
        http_client.close()
    assert payments.journal.effects() == []


def test_pygithub(tickets: Provider, clock: ManualClock) -> None:
    tickets.settings.update(search_lag=5.0)
    with serve(tickets) as url:
        gh = Github(auth=Auth.Token("tickets-writer-a"), base_url=url, retry=None,
                    seconds_between_requests=None, seconds_between_writes=None)
        try:
            repo = gh.get_repo("tenant-a/ops")
            assert repo.full_name == "tenant-a/ops"
            issue = repo.create_issue(title="Refund failed", body="crashpoints_correlation_id: r1",
                                      labels=["crashpoints", "refund"])
            second = repo.create_issue(title="Another")
            assert (issue.number, second.number) == (1, 2)
            assert [label.name for label in issue.labels] == ["crashpoints", "refund"]
            assert repo.get_issue(1).title == "Refund failed"
            with pytest.raises(UnknownObjectException):
                repo.get_issue(99)
            assert gh.search_issues("label:crashpoints repo:tenant-a/ops").totalCount == 0
            assert [i.number for i in repo.get_issues(labels=["crashpoints"], state="all")] == [1]
            clock.advance(5)
            found = gh.search_issues("label:crashpoints repo:tenant-a/ops")
            assert [i.number for i in found] == [1]
        finally:
            gh.close()
        bad = Github(auth=Auth.Token("nope"), base_url=url, retry=None,
                     seconds_between_requests=None, seconds_between_writes=None)
        try:
            with pytest.raises(BadCredentialsException):
                bad.get_repo("tenant-a/ops")
        finally:
            bad.close()
    assert tickets.journal.effect_counts()["r1"] == 1


def test_sendgrid(email: Provider, clock: ManualClock) -> None:
    email.settings.update(search_lag=30.0)
    with serve(email) as url:
        sg = SendGridAPIClient(api_key="email-writer-a", host=url)
        message = Mail(from_email="agent@example.com", to_emails="ops@example.com",
                       subject="Invoice 7", html_content="<p>Your invoice</p>")
        message.custom_arg = CustomArg("crashpoints_correlation_id", "inv-7:email")
        sent = sg.send(message)
        assert sent.status_code == 202
        msg_id = sent.headers["X-Message-Id"]
        details = sg.client.messages._(msg_id).get()
        assert json.loads(details.body)["unique_args"] == {
            "crashpoints_correlation_id": "inv-7:email"}
        query = {"query": "unique_args['crashpoints_correlation_id']=\"inv-7:email\"",
                 "limit": 10}
        assert json.loads(sg.client.messages.get(query_params=query).body) == {"messages": []}
        clock.advance(30)
        hits = json.loads(sg.client.messages.get(query_params=query).body)["messages"]
        assert [m["msg_id"] for m in hits] == [msg_id]
        with pytest.raises(BadRequestsError):
            sg.client.mail.send.post(request_body={"subject": "no recipients"})
        with pytest.raises(UnauthorizedError):
            SendGridAPIClient(api_key="SG.wrong", host=url).send(message)
    assert email.journal.effect_counts() == {"inv-7:email": 1}


# -- derived keys: each process's own credential, through the unchanged SDKs -------------------


def test_stripe_python_with_a_derived_key(payments: Provider) -> None:
    secret = issue_derived(payments, "worker-1")
    with serve(payments) as url:
        http_client = stripe.RequestsClient()
        client = stripe.StripeClient(secret, base_addresses={"api": url},
                                     http_client=http_client, max_network_retries=0)
        charge = client.v1.charges.create(params={"amount": 800, "currency": "usd"},
                                          options={"idempotency_key": "w1:charge"})
        assert client.v1.charges.retrieve(charge.id).amount == 800
        forged = stripe.StripeClient(secret.replace("worker-1", "worker-2"),
                                     base_addresses={"api": url}, http_client=http_client,
                                     max_network_retries=0)
        with pytest.raises(stripe.AuthenticationError):
            forged.v1.charges.create(params={"amount": 800, "currency": "usd"})
        http_client.close()
    [effect] = payments.journal.effects(label="worker-1")
    assert (effect.object_id, effect.tenant_id, effect.aliases) == (
        charge.id, "tenant-a", (charge.id,))
    assert [r.operation for r in payments.journal.requests(label="worker-1")] == [
        "charges.create", "charges.retrieve"]


def test_pygithub_with_a_derived_key(tickets: Provider) -> None:
    secret = issue_derived(tickets, "worker-2")
    with serve(tickets) as url:
        gh = Github(auth=Auth.Token(secret), base_url=url, retry=None,
                    seconds_between_requests=None, seconds_between_writes=None)
        try:
            issue = gh.get_repo("tenant-a/ops").create_issue(title="Opened by worker 2")
            assert issue.number == 1
        finally:
            gh.close()
    [effect] = tickets.journal.effects(label="worker-2")
    assert effect.tenant_id == "tenant-a"
    assert {issue.url, issue.html_url, "tenant-a/ops#1"} <= set(effect.aliases)
    assert [r.operation for r in tickets.journal.requests(label="worker-2")] == [
        "repos.get", "issues.create"]


def test_sendgrid_with_a_derived_key(email: Provider) -> None:
    secret = issue_derived(email, "recovery.1")
    with serve(email) as url:
        sg = SendGridAPIClient(api_key=secret, host=url)
        sent = sg.send(Mail(from_email="agent@example.com", to_emails="ops@example.com",
                            subject="No marker at all", html_content="<p>hi</p>"))
        assert sent.status_code == 202
        email.keys.revoke("email-writer-a")
        with pytest.raises(UnauthorizedError):
            sg.send(Mail(from_email="agent@example.com", to_emails="ops@example.com",
                         subject="Refused", html_content="<p>hi</p>"))
    [effect] = email.journal.effects(label="recovery.1")
    assert effect.aliases == (sent.headers["X-Message-Id"],)
    assert effect.correlation_id is None and effect.operation_key == effect.payload_hash
    assert [(r.status, r.tenant_id) for r in email.journal.requests(label="recovery.1")] == [
        (202, "tenant-a"), (401, "tenant-a")]


def test_pygithub_labels_an_issue_and_the_issue_keeps_them(tickets: Provider) -> None:
    """Adding, setting and removing an issue's labels (PyGithub's own calls) change the issue
    itself: its labels, the list filtered by label and a retry that adds what is there."""
    with serve(tickets) as url:
        gh = Github(auth=Auth.Token("tickets-writer-a"), base_url=url, retry=None,
                    seconds_between_requests=None, seconds_between_writes=None)
        try:
            repo = gh.get_repo("tenant-a/ops")
            issue = repo.create_issue(title="Outage", labels=["incident"])
            issue.add_to_labels("sev-1")
            issue.add_to_labels("sev-1")  # there already: nothing changes
            assert [label.name for label in issue.get_labels()] == ["incident", "sev-1"]
            assert [i.number for i in repo.get_issues(labels=["sev-1"])] == [issue.number]
            issue.remove_from_labels("incident")
            assert [label.name for label in repo.get_issue(issue.number).labels] == ["sev-1"]
            with pytest.raises(GithubException) as missing:  # as GitHub answers it
                issue.remove_from_labels("incident")
            assert missing.value.status == 404
            issue.set_labels("resolved")
            assert [label.name for label in repo.get_issue(issue.number).labels] == ["resolved"]
        finally:
            gh.close()
    ops = [e.operation for e in tickets.journal.effects()]
    # The issue, then one new version of it per change that changed something.
    assert ops == ["issues.create", "issues.labels.add", "issues.labels.remove",
                   "issues.labels.set"]
