"""Reference tool adapters for the bundled fake providers (and the real services they mimic).

Each adapter speaks the provider's own wire format through an httpx client that the harness
hands out per authority (``client_for(authority)``: base URL, API key, crash transport), sends
the idempotency key where the provider takes one, names the logical effect the way real
integrations do (the key in Stripe ``metadata``, SendGrid ``custom_args``, a GitHub label, and
an ``X-Correlation-Id`` header), and looks effects up the careful way. Whether what the
provider holds is what the attempt asked for is decided from the provider's own object
(its amount, recipient, title...), never from a hash the adapter planted in the payload:

==========  ============  ====================================================================
tool        provider      confirmation and lookup
==========  ============  ====================================================================
charge      payments      the created charge is a durable receipt; lookup by charge id
                          (consistent) or by metadata search (lags; zero hits count as absent
                          only because a retry with the same key is replayed, not repeated)
refund      payments      the created refund is a durable receipt; lookup by refund id or in
                          the charge's list of refunds (consistent) by the key in its metadata
send_email  email         202 is no proof: lookup by message id (consistent) or by correlation
                          id (a search that lags: zero hits are absent only once the send is
                          older than ``search_lag_bound``)
open_ticket tickets       the created issue is a durable receipt; lookup by number or by the
                          correlation label in the repository's issue list (consistent)
deploy      deploy        202 accepted is the receipt; no lookup at all
==========  ============  ====================================================================

Answers that prove nothing was applied (4xx validation, 429, 409 in flight) raise
:class:`ProviderRejected`; anything else that goes wrong (5xx, a lost connection, a timeout)
propagates, and the attempt stays UNKNOWN.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from .._ledger.args import JSONValue, args_hash
from .._ledger.authority import Authority
from .._ledger.records import Attempt
from ..errors import ProviderRejected
from .toolcall import ATTEMPT_CLOCK, Absent, Found, LookupResult, Receipt, Unavailable

__all__ = [
    "ChargeAdapter",
    "DeployAdapter",
    "EmailAdapter",
    "RefundAdapter",
    "TicketAdapter",
    "reference_adapters",
]

ClientFor = Callable[[Authority], httpx.Client]

#: The metadata / custom-args field that names the logical effect (the idempotency key).
CORRELATION = "idempotency_key"
#: Sent on every request too, so that even a refused request names its logical effect.
CORRELATION_HEADER = "X-Correlation-Id"


def _refuse_or_raise(response: httpx.Response, what: str) -> None:
    """Turn an answer into ProviderRejected when it proves nothing was applied."""
    status = response.status_code
    if status < 400:
        return
    if status == 429 or status == 409:
        retry_after = response.headers.get("Retry-After")
        raise ProviderRejected(
            f"{what}: {status} {response.text[:200]}",
            retryable=True,
            retry_after=float(retry_after) if retry_after else None,
        )
    if 400 <= status < 500:
        raise ProviderRejected(f"{what}: {status} {response.text[:200]}", retryable=False)
    # A 5xx does not prove that nothing happened: let the attempt be UNKNOWN.
    response.raise_for_status()


def _correlation_label(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def _fetch(
    client: httpx.Client, path: str, found: Callable[[Mapping[str, Any]], Found]
) -> LookupResult:
    """Look an effect up by the id the provider gave it: a 404 proves it absent."""
    response = client.get(path)
    if response.status_code == 404:
        return Absent()
    response.raise_for_status()
    return found(response.json())


class _HttpAdapter:
    """What every reference adapter shares: the client for an authority (``client_for``), and
    the one way its dispatch sends: a POST that names the logical effect in the correlation
    header, and whose refusal raises :class:`ProviderRejected`."""

    tool_name: str

    def __init__(self, client_for: ClientFor) -> None:
        self._client_for = client_for

    def _post(
        self,
        authority: Authority,
        path: str,
        *,
        idempotency_key: str,
        json: Any = None,
        data: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """POST ``json`` or the form ``data`` to ``path`` as ``authority``, with ``headers``
        and the correlation header. Raises :class:`ProviderRejected` for an answer that proves
        nothing was applied, ``httpx.HTTPStatusError`` for a 5xx."""
        response = self._client_for(authority).post(
            path,
            json=json,
            data=data,
            headers={**(headers or {}), CORRELATION_HEADER: idempotency_key},
        )
        _refuse_or_raise(response, self.tool_name)
        return response


class _PaymentsAdapter(_HttpAdapter):
    """What the charge and refund adapters share: a Stripe-like object created from a form
    under the idempotency key (the created object is a durable receipt), and looked up by its
    id when the attempt holds one."""

    has_lookup = True
    #: Where the provider creates and lists the objects, e.g. ``/v1/charges``.
    _path: str
    #: The tool's required arguments, sent as form fields and read back for the hash.
    _fields: tuple[str, ...]
    #: The one optional argument, sent and hashed when given and not empty.
    _optional: str

    def __init__(self, client_for: ClientFor, *, idempotent: bool = True) -> None:
        super().__init__(client_for)
        self.idempotent = idempotent

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        response = self._post(
            authority,
            self._path,
            idempotency_key=idempotency_key,
            data=self._form(args, idempotency_key),
            headers={"Idempotency-Key": idempotency_key},
        )
        created = response.json()
        return Receipt(
            request_id=response.headers.get("Request-Id", created["id"]),
            result_ref=created["id"],
            durable=True,
            payload_hash=self._payload_hash(created),
        )

    def lookup(self, attempt: Attempt) -> LookupResult:
        client = self._client_for(attempt.authority)
        if attempt.result_ref:
            return _fetch(client, f"{self._path}/{attempt.result_ref}", self._found)
        return self._lookup_by_key(client, attempt)

    def _found(self, created: Mapping[str, Any]) -> Found:
        return Found(
            payload_hash=self._payload_hash(created),
            result_ref=str(created["id"]),
            request_id=str(created["id"]),
        )

    def _form(self, args: Mapping[str, JSONValue], idempotency_key: str) -> dict[str, str]:
        form = {name: str(args[name]) for name in self._fields}
        form[f"metadata[{CORRELATION}]"] = idempotency_key
        if args.get(self._optional):
            form[self._optional] = str(args[self._optional])
        return form

    def _payload_hash(self, created: Mapping[str, Any]) -> str:
        """The arguments hash of what the provider created: the tool's arguments, read back."""
        args = {name: created.get(name) for name in self._fields}
        if created.get(self._optional):
            args[self._optional] = created[self._optional]
        return args_hash(args)

    def _lookup_by_key(self, client: httpx.Client, attempt: Attempt) -> LookupResult:
        raise NotImplementedError


class ChargeAdapter(_PaymentsAdapter):
    """``charge``: a Stripe-like charge. Args: ``amount`` (int, minor units), ``currency``,
    ``customer``, optional ``description``."""

    tool_name = "charge"
    _path = "/v1/charges"
    _fields = ("amount", "currency", "customer")
    _optional = "description"

    def _lookup_by_key(self, client: httpx.Client, attempt: Attempt) -> LookupResult:
        query = f"metadata['{CORRELATION}']:'{attempt.idempotency_key}'"
        response = client.get("/v1/charges/search", params={"query": query})
        response.raise_for_status()
        hits = response.json().get("data", [])
        if hits:
            return self._found(hits[0])
        if not self.idempotent:
            return Unavailable("zero search hits prove nothing: the search lags")
        # Safe only because a retry with the same key is replayed by the provider.
        return Absent()


class RefundAdapter(_PaymentsAdapter):
    """``refund``: a Stripe-like refund of a charge. Args: ``charge`` (its id), ``amount``
    (int, minor units), optional ``reason``."""

    tool_name = "refund"
    _path = "/v1/refunds"
    _fields = ("charge", "amount")
    _optional = "reason"

    def _lookup_by_key(self, client: httpx.Client, attempt: Attempt) -> LookupResult:
        # The charge's refunds are listed consistently: a refund made under the key is there.
        response = client.get(
            "/v1/refunds", params={"charge": str(attempt.args["charge"]), "limit": "100"}
        )
        response.raise_for_status()
        for refund in response.json().get("data", []):
            if (refund.get("metadata") or {}).get(CORRELATION) == attempt.idempotency_key:
                return self._found(refund)
        return Absent()


class EmailAdapter(_HttpAdapter):
    """``send_email``: a SendGrid-like mail send. Args: ``to``, ``subject``, ``body``,
    optional ``from``."""

    tool_name = "send_email"
    idempotent = False
    has_lookup = True

    def __init__(
        self, client_for: ClientFor, *, now: Callable[[], float], search_lag_bound: float = 60.0
    ) -> None:
        super().__init__(client_for)
        self._now = now
        self._search_lag_bound = search_lag_bound

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        mail = {
            "personalizations": [{"to": [{"email": args["to"]}]}],
            "from": {"email": args.get("from", "billing@example.com")},
            "subject": args["subject"],
            "content": [{"type": "text/plain", "value": args["body"]}],
            "custom_args": {CORRELATION: idempotency_key},
        }
        response = self._post(
            authority, "/v3/mail/send", idempotency_key=idempotency_key, json=mail
        )
        message_id = response.headers.get("X-Message-Id")
        return Receipt(
            request_id=response.headers.get("X-Request-Id") or message_id or "",
            result_ref=message_id,
        )

    def lookup(self, attempt: Attempt) -> LookupResult:
        client = self._client_for(attempt.authority)
        message_id = attempt.result_ref
        if not message_id:
            query = f"unique_args['{CORRELATION}']=\"{attempt.idempotency_key}\""
            response = client.get("/v3/messages", params={"query": query})
            response.raise_for_status()
            hits = response.json().get("messages", [])
            if hits:
                # Search answers summaries; the message itself holds the custom args.
                message_id = str(hits[0]["msg_id"])
        if message_id:
            return _fetch(
                client, f"/v3/messages/{message_id}", lambda m: _found_message(m, attempt)
            )
        sent_at = attempt.dispatched_at if attempt.dispatched_at is not None else attempt.created_at
        # The attempt's times are on its ledger's clock (harness seconds for ``ctx.ledger``,
        # the wall clock for an agent's own): its age is read on that clock.
        now = ATTEMPT_CLOCK.get() or self._now
        if now() - sent_at <= self._search_lag_bound:
            return Unavailable("no search hit yet, and the search may still lag behind the send")
        return Absent()


def _found_message(message: Mapping[str, Any], attempt: Attempt) -> Found:
    """The message the provider holds. The activity API shows its recipient, subject and
    custom args, not its body: it is the attempt's when those three are the attempt's."""
    seen = {
        "to": message.get("to_email"),
        "subject": message.get("subject"),
        "key": (message.get("unique_args") or {}).get(CORRELATION),
    }
    asked = {
        "to": attempt.args.get("to"),
        "subject": attempt.args.get("subject"),
        "key": attempt.idempotency_key,
    }
    return Found(
        payload_hash=attempt.args_hash if seen == asked else args_hash(seen),
        result_ref=str(message["msg_id"]),
        request_id=str(message["msg_id"]),
    )


class TicketAdapter(_HttpAdapter):
    """``open_ticket``: a GitHub-like issue. Args: ``repo`` (``owner/name``, owner = tenant),
    ``title``, ``body``, optional ``labels``."""

    tool_name = "open_ticket"
    idempotent = False
    has_lookup = True

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        labels = list(args.get("labels") or [])  # type: ignore[arg-type]
        issue = {
            "title": args["title"],
            "body": args["body"],
            "labels": [*labels, _correlation_label(idempotency_key)],
        }
        response = self._post(
            authority, f"/repos/{args['repo']}/issues", idempotency_key=idempotency_key, json=issue
        )
        created = response.json()
        return Receipt(
            request_id=response.headers.get("X-GitHub-Request-Id", ""),
            result_ref=f"{args['repo']}#{created['number']}",
            durable=True,
            payload_hash=_issue_hash(str(args["repo"]), created),
        )

    def lookup(self, attempt: Attempt) -> LookupResult:
        client = self._client_for(attempt.authority)
        repo = str(attempt.args["repo"])
        if attempt.result_ref:
            number = attempt.result_ref.rpartition("#")[2]
            return _fetch(
                client, f"/repos/{repo}/issues/{number}", lambda issue: _found_issue(repo, issue)
            )
        response = client.get(
            f"/repos/{repo}/issues",
            params={"labels": _correlation_label(attempt.idempotency_key), "state": "all"},
        )
        response.raise_for_status()
        issues = response.json()
        return _found_issue(repo, issues[0]) if issues else Absent()


def _issue_hash(repo: str, issue: Mapping[str, Any]) -> str:
    """The arguments hash of the issue the tracker holds: the tool's arguments, read back
    (without the label that names the logical effect)."""
    labels = [
        label["name"] if isinstance(label, Mapping) else label
        for label in issue.get("labels") or []
    ]
    args: dict[str, Any] = {"repo": repo, "title": issue.get("title"), "body": issue.get("body")}
    extra = [label for label in labels if not str(label).startswith("key-")]
    if extra:
        args["labels"] = extra
    return args_hash(args)


def _found_issue(repo: str, issue: Mapping[str, Any]) -> Found:
    # "owner/name#number" is how the tracker names an issue (and its journal, the effect).
    ref = f"{repo}#{issue['number']}"
    return Found(payload_hash=_issue_hash(repo, issue), result_ref=ref, request_id=ref)


class DeployAdapter(_HttpAdapter):
    """``deploy``: a deployment. Args: ``service``, ``version``, ``environment``. The
    provider has no idempotency and no lookup: a lost answer can only go to review."""

    tool_name = "deploy"
    idempotent = False
    has_lookup = False

    def dispatch(
        self, args: Mapping[str, JSONValue], *, idempotency_key: str, authority: Authority
    ) -> Receipt:
        body = {
            "service": args["service"],
            "version": args["version"],
            "environment": args["environment"],
            "metadata": {CORRELATION: idempotency_key},
        }
        response = self._post(
            authority, "/v1/deployments", idempotency_key=idempotency_key, json=body
        )
        request_id = response.headers.get("X-Request-Id", "")
        # "202 accepted" with the provider's request id is the only receipt there will be.
        return Receipt(request_id=request_id, result_ref=request_id, durable=True)

    def lookup(self, attempt: Attempt) -> LookupResult:
        return Unavailable("the deploy provider has no lookup")


def reference_adapters(
    clients: Mapping[str, ClientFor],
    *,
    now: Callable[[], float],
    payments_idempotent: bool = True,
    search_lag_bound: float = 60.0,
) -> dict[str, Any]:
    """The reference adapter of each provider in ``clients`` (provider name -> client_for),
    keyed by tool name."""
    adapters: dict[str, Any] = {}
    if "payments" in clients:
        adapters["charge"] = ChargeAdapter(clients["payments"], idempotent=payments_idempotent)
        adapters["refund"] = RefundAdapter(clients["payments"], idempotent=payments_idempotent)
    if "email" in clients:
        adapters["send_email"] = EmailAdapter(
            clients["email"], now=now, search_lag_bound=search_lag_bound
        )
    if "tickets" in clients:
        adapters["open_ticket"] = TicketAdapter(clients["tickets"])
    if "deploy" in clients:
        adapters["deploy"] = DeployAdapter(clients["deploy"])
    return adapters
