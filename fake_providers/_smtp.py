"""smtp: a non-idempotent mail relay reached over SMTP (as SendGrid's, Mailgun's or a company's
own relay is), with no lookup at all.

The wire is SMTP (``_smtp_server.py``: a real SMTP server, aiosmtpd's, in front of this class):
``EHLO``, ``AUTH PLAIN`` or ``AUTH LOGIN`` with the API key as the password (any user name:
SendGrid's relay takes ``apikey``), ``MAIL FROM``, ``RCPT TO``, ``DATA``. Each transaction
whose data ends is one request of the shared pipeline (keys, tenants, scopes, fault switches,
journal), made by :func:`transaction_request`::

    DATA /    {"mail_from": str, "rcpt_tos": [str], "content": <base64 of the message>}
              250 Ok: queued as <queue id>                            smtp:write

Every accepted message is an effect, the same mail twice is two mails: a relay has no
idempotency, and nothing to ask whether a message went out (``has_lookup`` is false: recovery
of an unanswered send must go to review).

What names the logical effect is the relay's own view of the message, never what a client adds
for a test: the payload hash is ``args_hash`` of the envelope (sender, recipients in order of
address), the header ``From``, the decoded ``Subject`` and every leaf part of the body (its
content type, file name and a SHA-256 of its decoded bytes). ``Message-ID``, ``Date``, the
MIME boundaries and every other header are left out: a resend of the same mail gets a new
``Message-ID`` and ``Date`` (``email.utils.make_msgid``) and new boundaries, and is still the
same mail sent twice. ``X-Correlation-Id`` (a mail header), when present, is recorded as the
correlation id and names the operation; else the payload hash does.

The effect (a ``message``) records the queue id, the ``Message-ID``, the envelope, the ``From``,
``To``, ``Cc`` and ``Bcc`` recipients (``Bcc``: the envelope's recipients that no header
names), the subject, the date, the first text part (up to 2,000 characters), every leaf part
and every header as sent. Aliases: the queue id, and the ``Message-ID`` with and without its
angle brackets, which is what a client can store to name the mail.

Answers are SMTP replies (the response body is the reply line, the status its code):
``250 2.0.0`` when queued; refusals before anything is applied as a relay gives them:
``535 5.7.8`` (an unknown or revoked key), ``550 5.7.1`` (a key of another tenant or without
the ``smtp:write`` scope), ``554 5.6.0`` (a message that cannot be read or has no ``From``),
``421 4.7.0`` (too many messages: the connection is closed after it), ``451 4.3.0`` (a local
error: try again later).
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import email.utils
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any, ClassVar

import httpx

from ._provider import (
    CORRELATION_HEADER,
    Call,
    EffectDraft,
    Provider,
    Reply,
    Route,
    json_document,
    payload_hash,
)

__all__ = ["Smtp", "reply_code", "transaction_request"]

#: The pipeline's refusals, as the SMTP reply a relay gives for each (code, enhanced status).
_REPLIES: dict[int, tuple[int, str]] = {
    400: (554, "5.6.0"),
    401: (535, "5.7.8"),
    403: (550, "5.7.1"),
    404: (500, "5.5.1"),
    413: (552, "5.3.4"),
    429: (421, "4.7.0"),
}
#: Any other refusal (5xx faults, a lost answer's gateway): a local error, try again later.
_TRANSIENT = (451, "4.3.0")
#: How much of the first text part the effect keeps (for a timeline; the hash covers it all).
_TEXT_LIMIT = 2000
_MEDIA_TYPE = "application/vnd.crashpoints.smtp+json"


def reply_code(status: int) -> tuple[int, str]:
    """The SMTP reply code and enhanced status code a relay answers for a refusal the
    pipeline gives as ``status`` (its HTTP-like status: 401, 403, 429, 500, ...)."""
    return _REPLIES.get(status, _TRANSIENT)


def transaction_request(
    base_url: str,
    *,
    mail_from: str,
    rcpt_tos: Sequence[str],
    content: bytes,
    key: str | None,
) -> httpx.Request:
    """The pipeline request of one SMTP transaction whose data ended: its envelope
    (``mail_from``, ``rcpt_tos``), the message as received (``content``, dot-stuffing
    undone) and the API key the session authenticated with (``None``: it did not)."""
    body = {
        "mail_from": mail_from,
        "rcpt_tos": list(rcpt_tos),
        "content": base64.b64encode(content).decode("ascii"),
    }
    headers = {"Content-Type": _MEDIA_TYPE}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Request("DATA", f"{base_url}/", headers=headers, content=json.dumps(body))


class _Unreadable(Exception):
    """A transaction the relay cannot take (554 5.6.0, nothing applied)."""


class Smtp(Provider):
    """The SMTP relay: not idempotent, no lookup. See the module docstring."""

    name = "smtp"
    default_base_url = "smtp://smtp.crashpoints.test"
    request_id_prefix = "smtp_req_"
    has_lookup = False
    has_search = False
    #: The wire this provider speaks: the harness serves it with an SMTP server, not HTTP.
    protocol: ClassVar[str] = "smtp"

    def routes(self) -> list[Route]:
        return [Route("DATA", re.compile(r"/"), "mail.send", "write", "smtp:write", self._accept)]

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        """A refusal as the SMTP reply line a relay sends (its code is the answer's status)."""
        smtp, enhanced = reply_code(status)
        line = " ".join(message.split())  # one line: a reply has no line breaks of its own
        return Reply(smtp, f"{smtp} {enhanced} {line}".encode())

    def unauthorized(self, request: httpx.Request) -> Reply:
        if not request.headers.get("Authorization"):
            return self.error(401, "Authentication required: AUTH with the API key first.")
        return self.error(401, "Authentication credentials invalid: the key is unknown or "
                               "was revoked.")

    def rate_limited(self, retry_after: float) -> Reply:
        return self.error(429, "Too many messages: closing the connection, try again later.")

    def _accept(self, call: Call) -> Reply:
        try:
            envelope = json_document(call.request.content)
            mail_from, rcpt_tos, content = _envelope(envelope)
            message = _parse(content)
        except (ValueError, _Unreadable) as exc:
            return self.error(400, f"Message rejected: {exc}")
        queue_id = f"smtp_msg_{call.seq:014d}"
        stored = _stored(message, queue_id, mail_from, rcpt_tos, content)
        phash = payload_hash(_logical(message, mail_from, rcpt_tos))
        if phash is None:  # every value is a string: it always hashes
            return self.error(400, "Message rejected: it cannot be read.")
        correlation = message.get(CORRELATION_HEADER)
        correlation = str(correlation) if correlation else None
        message_id = stored["message_id"]
        aliases = (queue_id,) + (() if message_id is None else _id_forms(message_id))
        return Reply(
            250,
            f"250 2.0.0 Ok: queued as {queue_id}".encode(),
            effect=EffectDraft("message", queue_id, stored),
            correlation_id=correlation,
            operation_key=correlation or phash,
            payload_hash=phash,
            object_id=queue_id,
            aliases=aliases,
        )


def _envelope(data: Any) -> tuple[str, list[str], bytes]:
    if not isinstance(data, dict):
        raise _Unreadable("the transaction is not an envelope and a message")
    mail_from, rcpt_tos = data.get("mail_from"), data.get("rcpt_tos")
    if not isinstance(mail_from, str) or not isinstance(rcpt_tos, list) or not rcpt_tos or not (
        all(isinstance(rcpt, str) and rcpt for rcpt in rcpt_tos)
    ):
        raise _Unreadable("the envelope needs a sender and at least one recipient")
    try:
        content = base64.b64decode(str(data.get("content", "")), validate=True)
    except binascii.Error as exc:
        raise _Unreadable("the message is not base64") from exc
    return mail_from, rcpt_tos, content


def _parse(content: bytes) -> EmailMessage:
    try:
        message = BytesParser(policy=email.policy.default).parsebytes(content)
        sender = message.get("From")
    except (ValueError, TypeError, IndexError) as exc:  # headers the parser cannot take
        raise _Unreadable(f"its headers cannot be read ({exc})") from exc
    if not isinstance(message, EmailMessage) or not sender:
        raise _Unreadable("it has no From header")
    return message


def _header(message: EmailMessage, name: str) -> str | None:
    value = message.get(name)
    return None if value is None else str(value)


def _addresses(message: EmailMessage, name: str) -> list[str]:
    values = [str(value) for value in message.get_all(name, ())]
    return [address for _, address in email.utils.getaddresses(values) if address]


def _parts(message: EmailMessage) -> list[dict[str, Any]]:
    """Every leaf part of the body, in order: its type, file name, size and digest."""
    parts = []
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        parts.append({
            "content_type": part.get_content_type(),
            "filename": part.get_filename(),
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        })
    return parts


def _first_text(message: EmailMessage) -> str | None:
    for part in message.walk():
        if part.get_content_type() == "text/plain" and not part.is_multipart():
            try:
                text = part.get_content()
            except (LookupError, ValueError):  # an unknown charset: the digest still covers it
                return None
            return str(text)[:_TEXT_LIMIT]
    return None


def _logical(message: EmailMessage, mail_from: str, rcpt_tos: Iterable[str]) -> dict[str, Any]:
    """What names the mail: envelope, From, Subject and body, without per-send values."""
    return {
        "mail_from": mail_from.lower(),
        "rcpt_tos": sorted({rcpt.lower() for rcpt in rcpt_tos}),
        "from": [address.lower() for address in _addresses(message, "From")],
        "subject": _header(message, "Subject") or "",
        "parts": [
            [part["content_type"], part["filename"] or "", part["sha256"]]
            for part in _parts(message)
        ],
    }


def _stored(
    message: EmailMessage, queue_id: str, mail_from: str, rcpt_tos: list[str], content: bytes
) -> dict[str, Any]:
    to, cc = _addresses(message, "To"), _addresses(message, "Cc")
    named = {address.lower() for address in (*to, *cc)}
    return {
        "queue_id": queue_id,
        "message_id": _header(message, "Message-ID"),
        "mail_from": mail_from,
        "rcpt_tos": rcpt_tos,
        "from": _addresses(message, "From"),
        "to": to,
        "cc": cc,
        "bcc": [rcpt for rcpt in rcpt_tos if rcpt.lower() not in named],
        "subject": _header(message, "Subject"),
        "date": _header(message, "Date"),
        "text": _first_text(message),
        "parts": _parts(message),
        "size": len(content),
        "headers": [[name, str(value)] for name, value in message.items()],
    }


def _id_forms(message_id: str) -> tuple[str, ...]:
    """A ``Message-ID`` as a client may store it: as sent, and without its brackets."""
    bare = message_id.strip()
    return tuple(dict.fromkeys((bare, bare.strip("<>"))))
