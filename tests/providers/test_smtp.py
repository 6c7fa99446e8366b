"""smtp: a mail relay reached over SMTP. Every accepted message is an effect named by the
relay's own view of it; refusals apply nothing; faults reach the client at the SMTP wire.

In-process through the pipeline (``transaction_request``) and over loopback with the real
clients: ``smtplib``, aiosmtplib, Django's SMTP backend and the mail queues built on it."""

from __future__ import annotations

import asyncio
import smtplib
import socket
from collections.abc import Iterator
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path

import pytest

from fake_providers import ApiKey, Provider, Smtp, derive_key, smtp_loopback
from fake_providers._smtp import transaction_request
from fake_providers._smtp_server import SmtpServer
from tests.conftest import ManualClock, wait_until

pytest.importorskip("aiosmtpd", reason="the SMTP relay needs aiosmtpd (pytest-crashpoints[smtp])")

WRITER, READER, OTHER = "smtp-writer-a", "smtp-reader-a", "smtp-writer-b"


@pytest.fixture
def smtp(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    provider = Smtp(tmp_path / "smtp.sqlite3", clock=clock, keys=[
        ApiKey(WRITER, "tenant-a", frozenset({"smtp:write"})),
        ApiKey(READER, "tenant-a", frozenset({"smtp:read"})),
        ApiKey(OTHER, "tenant-b", frozenset({"smtp:write"})),
    ])
    yield provider
    provider.close()


@pytest.fixture
def relay(smtp: Provider) -> Iterator[SmtpServer]:
    with smtp_loopback(smtp) as server:
        yield server


def invoice(*, subject: str = "Invoice 7", body: str = "120 EUR", attach: bool = True,
            cc: str | None = "books@example.com") -> EmailMessage:
    """The same mail every call, but for what each send makes new: Message-ID, Date and
    (with an attachment) the MIME boundaries."""
    mail = EmailMessage()
    mail["From"] = "Billing <billing@example.com>"
    mail["To"] = "Ada <ada@example.com>"
    if cc:
        mail["Cc"] = cc
    mail["Subject"] = subject
    mail["Message-ID"] = make_msgid(domain="example.com")
    mail["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    mail.set_content(body)
    if attach:
        mail.add_attachment(b"%PDF-1.4 invoice", maintype="application", subtype="pdf",
                            filename="invoice-7.pdf")
    return mail


def accept(smtp: Provider, mail: EmailMessage, *, rcpt: tuple[str, ...] = (
        "ada@example.com", "books@example.com", "audit@example.com"), key: str = WRITER) -> int:
    request = transaction_request(smtp.base_url, mail_from="billing@example.com",
                                  rcpt_tos=rcpt, content=mail.as_bytes(), key=key)
    return smtp.handle(request).status_code


def send(relay: SmtpServer, mail: EmailMessage, *, key: str | None = WRITER,
         user: str = "apikey") -> dict[str, tuple[int, bytes]]:
    with smtplib.SMTP(relay.host, relay.port, timeout=10) as client:
        if key is not None:
            client.login(user, key)
        return client.send_message(mail)


# -- in-process: what names the effect ------------------------------------------------------


def test_a_resend_of_the_same_mail_is_a_second_effect_with_the_same_payload(
    smtp: Provider,
) -> None:
    first, again = invoice(), invoice()
    assert first["Message-ID"] != again["Message-ID"]
    assert accept(smtp, first) == accept(smtp, again) == 250
    effects = smtp.journal.effects()
    assert len(effects) == 2 and effects[0].payload_hash == effects[1].payload_hash
    # The operation is named by the payload (no correlation id): the same mail twice.
    assert smtp.journal.effect_counts() == {effects[0].payload_hash: 2}


@pytest.mark.parametrize("change", ["subject", "body", "recipient", "attachment"])
def test_another_mail_has_another_payload_hash(smtp: Provider, change: str) -> None:
    accept(smtp, invoice())
    other = {
        "subject": lambda: accept(smtp, invoice(subject="Invoice 8")),
        "body": lambda: accept(smtp, invoice(body="130 EUR")),
        "recipient": lambda: accept(smtp, invoice(), rcpt=("ada@example.com",)),
        "attachment": lambda: accept(smtp, invoice(attach=False)),
    }[change]
    assert other() == 250
    first, second = smtp.journal.effects()
    assert first.payload_hash != second.payload_hash


def test_the_effect_records_the_message_id_headers_and_recipients(smtp: Provider) -> None:
    mail = invoice()
    mail["X-Correlation-Id"] = "job-7"
    assert accept(smtp, mail) == 250
    [effect] = smtp.journal.effects()
    body = effect.body
    assert body["message_id"] == mail["Message-ID"]
    assert body["from"] == ["billing@example.com"] and body["to"] == ["ada@example.com"]
    assert body["cc"] == ["books@example.com"] and body["bcc"] == ["audit@example.com"]
    assert body["subject"] == "Invoice 7" and body["text"] == "120 EUR\n"
    assert [p["filename"] for p in body["parts"]] == [None, "invoice-7.pdf"]
    assert ["Subject", "Invoice 7"] in body["headers"]
    assert effect.correlation_id == effect.operation_key == "job-7"
    [request] = smtp.journal.requests()
    bare = mail["Message-ID"].strip("<>")
    assert request.aliases == (effect.object_id, mail["Message-ID"], bare)


@pytest.mark.parametrize(
    ("key", "code"),
    [(None, 535), ("nope", 535), (READER, 550)],
    ids=["no-key", "unknown-key", "read-scope"],
)
def test_a_refused_transaction_applies_nothing(
    smtp: Provider, key: str | None, code: int
) -> None:
    request = transaction_request(smtp.base_url, mail_from="b@example.com",
                                  rcpt_tos=["ada@example.com"], content=invoice().as_bytes(),
                                  key=key)
    response = smtp.handle(request)
    assert response.status_code == code and response.text.startswith(f"{code} ")
    assert smtp.journal.effects() == []


def test_a_message_without_from_is_rejected(smtp: Provider) -> None:
    request = transaction_request(smtp.base_url, mail_from="b@example.com",
                                  rcpt_tos=["ada@example.com"], content=b"Subject: x\r\n\r\nhi",
                                  key=WRITER)
    response = smtp.handle(request)
    assert response.text.startswith("554 5.6.0 Message rejected: it has no From header")
    assert smtp.journal.effects() == []


# -- over loopback: the SMTP wire -----------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_smtplib_logs_in_with_the_key_as_password_under_any_user(
    smtp: Provider, relay: SmtpServer, mechanism: str
) -> None:
    with smtplib.SMTP(relay.host, relay.port, timeout=10) as client:
        client.ehlo()
        assert "auth" in client.esmtp_features
        client.user, client.password = "whoever", WRITER
        code, _ = client.auth(mechanism, getattr(client, f"auth_{mechanism.lower()}"))
        assert code == 235
        assert client.send_message(invoice()) == {}
    [effect] = smtp.journal.effects()
    assert effect.tenant_id == "tenant-a"


def test_a_derived_key_names_the_process_that_sent_the_mail(
    smtp: Provider, relay: SmtpServer
) -> None:
    smtp.keys.set_signing_secret("s3cret")
    send(relay, invoice(), key=derive_key(WRITER, "worker-3", signing_secret="s3cret"))
    [effect] = smtp.journal.effects()
    assert (effect.label, effect.tenant_id) == ("worker-3", "tenant-a")
    with pytest.raises(smtplib.SMTPAuthenticationError):  # signed with another run's secret
        send(relay, invoice(), key=derive_key(WRITER, "worker-3", signing_secret="other"))


def test_without_auth_530_and_with_a_bad_key_535(smtp: Provider, relay: SmtpServer) -> None:
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        send(relay, invoice(), key=None)
    assert refused.value.smtp_code == 530
    with pytest.raises(smtplib.SMTPAuthenticationError) as bad:
        send(relay, invoice(), key="sk_not_a_key")
    assert bad.value.smtp_code == 535
    assert smtp.journal.effects() == [] and smtp.journal.requests() == []


def test_a_key_revoked_after_login_is_refused_at_the_data(
    smtp: Provider, relay: SmtpServer
) -> None:
    with smtplib.SMTP(relay.host, relay.port, timeout=10) as client:
        client.login("apikey", WRITER)
        smtp.keys.revoke(WRITER)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            client.send_message(invoice())
    assert refused.value.smtp_code == 535
    assert smtp.journal.effects() == []


@pytest.mark.parametrize(
    ("fault", "code"), [("server_errors", 451), ("rate_limits", 421)]
)
def test_a_refusal_is_a_reply_and_applies_nothing(
    smtp: Provider, relay: SmtpServer, fault: str, code: int
) -> None:
    getattr(smtp.faults, fault)(1)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(relay, invoice())
    assert refused.value.smtp_code == code
    assert smtp.journal.effects() == []
    assert send(relay, invoice()) == {}  # one refusal only
    assert len(smtp.journal.effects()) == 1


def test_a_421_closes_the_connection(smtp: Provider, relay: SmtpServer) -> None:
    smtp.faults.rate_limits(1)
    with dead_client_sends(relay, then=b"NOOP\r\n") as sock:
        received = b""
        while chunk := sock.recv(65536):  # until the server closes (a timeout fails)
            received += chunk
    assert received.rstrip().rsplit(b"\r\n", 1)[-1].startswith(b"421 4.7.0")  # no NOOP reply


def test_a_write_timeout_drops_the_connection_before_applying(
    smtp: Provider, relay: SmtpServer
) -> None:
    smtp.faults.write_timeouts(1)
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(relay, invoice())
    assert smtp.journal.effects() == []


@pytest.mark.parametrize("variant", ["reset", "timeout", "502"])
def test_a_lost_reply_is_a_dropped_connection_after_the_mail_was_taken(
    smtp: Provider, relay: SmtpServer, variant: str
) -> None:
    # A relay that took a message never refuses it: even the gateway's variant is no reply.
    smtp.faults.lose_responses(1, variant=variant)  # type: ignore[arg-type]
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(relay, invoice())
    assert len(smtp.journal.effects()) == 1


def test_aiosmtplib_sends_unchanged(smtp: Provider, relay: SmtpServer) -> None:
    aiosmtplib = pytest.importorskip("aiosmtplib")

    async def send_async() -> None:
        await aiosmtplib.send(invoice(), hostname=relay.host, port=relay.port,
                              username="apikey", password=WRITER, start_tls=False, timeout=10)

    asyncio.run(send_async())
    assert len(smtp.journal.effects()) == 1


# -- the harness's side of the server: preamble, admission, settle, hold ----------------------


def test_the_preamble_goes_before_the_reply_to_the_data_only(smtp: Provider) -> None:
    seen = []

    def preamble(request: object, response: object) -> bytes:
        seen.append(response)
        return b"\x00PREAMBLE\n"

    with smtp_loopback(smtp, preamble=preamble) as relay:
        with smtplib.SMTP(relay.host, relay.port, timeout=10) as client:
            client.login("apikey", WRITER)
            client.mail("billing@example.com")
            client.rcpt("ada@example.com")
            code, _ = client.docmd("DATA")
            assert code == 354
            client.send(invoice().as_bytes().replace(b"\n", b"\r\n") + b"\r\n.\r\n")
            raw = client.sock.recv(65536)
        assert raw.startswith(b"\x00PREAMBLE\n250 2.0.0 Ok: queued as smtp_msg_")
    assert len(seen) == 1


def test_admission_refuses_a_transaction_before_the_provider_sees_it(
    smtp: Provider,
) -> None:
    with smtp_loopback(smtp, admit=lambda request, peer: "not this run's") as relay:
        with pytest.raises(smtplib.SMTPDataError) as refused:
            send(relay, invoice())
        assert refused.value.smtp_code == 554
        assert relay.refused == [("DATA", "/", "not this run's")]
    assert smtp.journal.requests() == []


def dead_client_sends(relay: SmtpServer, *, then: bytes = b"") -> socket.socket:
    """A whole transaction written at once (and ``then``), its replies not read yet (a
    client that died, or reads them later)."""
    data = invoice().as_bytes().replace(b"\n", b"\r\n")
    script = [b"EHLO test", b"AUTH PLAIN " + __import__("base64").b64encode(
        b"\0apikey\0" + WRITER.encode()), b"MAIL FROM:<billing@example.com>",
        b"RCPT TO:<ada@example.com>", b"DATA"]
    sock = socket.create_connection((relay.host, relay.port), timeout=10)
    sock.sendall(b"\r\n".join(script) + b"\r\n" + data + b"\r\n.\r\n" + then)
    return sock


def test_settle_waits_for_what_reached_the_server(smtp: Provider, relay: SmtpServer) -> None:
    with dead_client_sends(relay):
        assert relay.settle(30)
        # Answered before settle returned: the journal holds the mail.
        assert len(smtp.journal.effects()) == 1


def test_held_keeps_a_transaction_from_the_provider_and_settle_says_so(
    smtp: Provider, relay: SmtpServer
) -> None:
    with relay.held():
        sock = dead_client_sends(relay)
        assert not relay.settle(0.3)  # the transaction waits at the gate
        assert smtp.journal.effects() == []
    with sock:
        assert relay.settle(30)
        assert len(smtp.journal.effects()) == 1


def test_an_idle_client_does_not_hold_settle(relay: SmtpServer) -> None:
    with socket.create_connection((relay.host, relay.port), timeout=10) as sock:
        wait_until(lambda: relay.settle(0.05), timeout=30, what="the greeting sent")
        assert sock.recv(1024).startswith(b"220 ")
