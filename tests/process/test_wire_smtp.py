"""The wire hooks on an SMTP connection: the write is the transaction's MAIL FROM, never the
other commands nor the message after DATA's 354, and B and C fire at the data's reply."""

from __future__ import annotations

import smtplib
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_providers import ApiKey, Provider, Smtp, smtp_loopback
from fake_providers._smtp_server import SmtpServer
from pytest_crashpoints._inject.failpoints import Fault, Kill
from pytest_crashpoints._inject.wire import encode_preamble, install_wire_hooks
from pytest_crashpoints._process.outcome import Completed, Killed
from pytest_crashpoints._process.worker import run_worker

pytest.importorskip("aiosmtpd", reason="the SMTP relay needs aiosmtpd (pytest-crashpoints[smtp])")

KEY = "smtp-writer"
MESSAGE = b"From: billing@example.com\r\nSubject: 7\r\n\r\n120 EUR\r\n"
# A message that begins like a command: only DATA's 354 says it is not one (the relay then
# finds no From in it and refuses it, which does not matter here).
LOOKS_LIKE_MAIL = b"MAIL FROM:<not@a.command>\r\n" + MESSAGE


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[Provider, SmtpServer]]:
    provider = Smtp(tmp_path / "smtp.sqlite3",
                    keys=[ApiKey(KEY, "tenant-a", frozenset({"smtp:write"}))])

    def preamble(request: object, response: object) -> bytes:
        return encode_preamble(["B", "C"], {"source": "server", "provider": "smtp"})

    with smtp_loopback(provider, preamble=preamble) as server:
        yield provider, server
    provider.close()


def two_transactions(address: tuple[str, int], message: bytes = MESSAGE) -> list[object]:
    install_wire_hooks([], smtp=[address])
    replies: list[object] = []
    with smtplib.SMTP(*address, timeout=10) as client:
        client.login("apikey", KEY)
        for _ in range(2):
            try:
                replies.append(client.sendmail("billing@example.com", ["ada@example.com"],
                                               message))
            except smtplib.SMTPDataError as refused:  # the relay reads no From in it
                replies.append(refused.smtp_code)
    return replies


def test_each_transaction_is_one_write_and_one_answer(
    relay: tuple[Provider, SmtpServer],
) -> None:
    _, server = relay
    outcome = run_worker(two_transactions, args=((server.host, server.port),))
    assert isinstance(outcome, Completed), outcome
    points = [(h.point, h.context.get("method")) for h in outcome.hits]
    assert points == [("http.write", "MAIL"), ("B", None), ("C", None)] * 2
    assert outcome.value == [{}, {}]  # the client saw the replies, not the preambles


def test_a_message_that_begins_like_a_command_is_not_one(
    relay: tuple[Provider, SmtpServer],
) -> None:
    _, server = relay
    outcome = run_worker(two_transactions, args=((server.host, server.port), LOOKS_LIKE_MAIL))
    assert isinstance(outcome, Completed), outcome
    assert [h.point for h in outcome.hits].count("http.write") == 2
    assert outcome.value == [554, 554]


def test_a_kill_at_b_leaves_the_mail_taken_and_the_client_without_its_reply(
    relay: tuple[Provider, SmtpServer],
) -> None:
    provider, server = relay
    outcome = run_worker(two_transactions, args=((server.host, server.port),),
                         faults=[Fault("B", Kill())])
    assert isinstance(outcome, Killed) and outcome.point == "B", outcome
    assert len(provider.journal.effects()) == 1
