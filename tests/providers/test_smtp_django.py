"""Django's mail over the SMTP relay, unchanged: ``send_mail`` and ``EmailMessage.send()`` with
the SMTP backend, and the mail queues built on it (django-mailer, django-post-office).

Django runs in a worker process, never in the test process: settings are read once per
process, and each test configures its own."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_providers import ApiKey, Provider, Smtp, smtp_loopback
from fake_providers._smtp_server import SmtpServer
from pytest_crashpoints._process.outcome import Completed
from pytest_crashpoints._process.worker import run_worker
from tests.conftest import ManualClock

pytest.importorskip("aiosmtpd", reason="the SMTP relay needs aiosmtpd (pytest-crashpoints[smtp])")
pytest.importorskip("django", reason="Django is not installed (a dev dependency)")

KEY = "smtp-writer-a"


@pytest.fixture
def smtp(tmp_path: Path, clock: ManualClock) -> Iterator[Provider]:
    provider = Smtp(tmp_path / "smtp.sqlite3", clock=clock,
                    keys=[ApiKey(KEY, "tenant-a", frozenset({"smtp:write"}))])
    yield provider
    provider.close()


@pytest.fixture
def relay(smtp: Provider) -> Iterator[SmtpServer]:
    with smtp_loopback(smtp) as server:
        yield server


def needs(module: str, package: str) -> None:
    # Looked for, not imported: importing a Django app reads the settings, which only a
    # worker process configures.
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed (a dev dependency)")


def start_django(relay: tuple[str, int], database: str, apps: list[str], **extra: Any) -> None:
    """Django in this (worker) process, its mail on the relay as a project's settings put it."""
    import django
    from django.conf import settings

    host, port = relay
    settings.configure(
        INSTALLED_APPS=apps,
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": database}},
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST=host, EMAIL_PORT=port, EMAIL_HOST_USER="apikey", EMAIL_HOST_PASSWORD=KEY,
        EMAIL_TIMEOUT=10, DEFAULT_FROM_EMAIL="billing@example.com", USE_TZ=True, **extra,
    )
    django.setup()
    if apps:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def in_worker(fn: Any, *args: Any) -> object:
    outcome = run_worker(fn, args=args, timeout=120)
    assert isinstance(outcome, Completed), outcome
    return outcome.value


def django_mail(relay: tuple[str, int], database: str) -> int:
    start_django(relay, database, [])
    from django.core.mail import EmailMultiAlternatives, send_mail

    sent = send_mail("Invoice 7", "120 EUR", None, ["ada@example.com"])
    mail = EmailMultiAlternatives("Invoice 8", "130 EUR", None, ["ada@example.com"],
                                  cc=["books@example.com"], bcc=["audit@example.com"])
    mail.attach_alternative("<p>130 EUR</p>", "text/html")
    mail.attach("invoice-8.pdf", b"%PDF-1.4", "application/pdf")
    sent += mail.send()
    sent += mail.send()  # the same message again: a new Message-ID, the same mail
    return sent


def test_djangos_send_mail_and_email_message_reach_the_relay(
    smtp: Provider, relay: SmtpServer, tmp_path: Path
) -> None:
    assert in_worker(django_mail, (relay.host, relay.port), str(tmp_path / "app.db")) == 3
    first, invoice, again = (effect.body for effect in smtp.journal.effects())
    assert first["subject"] == "Invoice 7" and first["to"] == ["ada@example.com"]
    assert invoice["cc"] == ["books@example.com"] and invoice["bcc"] == ["audit@example.com"]
    assert [p["content_type"] for p in invoice["parts"]] == [
        "text/plain", "text/html", "application/pdf"]
    assert invoice["message_id"] != again["message_id"]
    hashes = [effect.payload_hash for effect in smtp.journal.effects()]
    assert hashes[1] == hashes[2] != hashes[0]  # the resend is the same mail twice


def django_mailer_queue(relay: tuple[str, int], database: str) -> list[int]:
    # django-mailer: send_mail puts the mail in its queue (a table); send_all, what its
    # send_mail management command runs, sends the queue through MAILER_EMAIL_BACKEND.
    start_django(relay, database, ["mailer"], MAILER_EMAIL_BACKEND=(
        "django.core.mail.backends.smtp.EmailBackend"))
    from django.conf import settings
    from django.core.mail import send_mail

    settings.EMAIL_BACKEND = "mailer.backend.DbBackend"
    from mailer import engine
    from mailer.models import Message

    send_mail("Invoice 7", "120 EUR", None, ["ada@example.com"])
    queued = Message.objects.count()
    engine.send_all()
    engine.send_all()  # nothing left to send
    return [queued, Message.objects.count()]


def test_django_mailer_sends_its_queue_once(
    smtp: Provider, relay: SmtpServer, tmp_path: Path
) -> None:
    needs("mailer", "django-mailer")
    value = in_worker(django_mailer_queue, (relay.host, relay.port), str(tmp_path / "app.db"))
    assert value == [1, 0]
    [effect] = smtp.journal.effects()
    assert effect.body["subject"] == "Invoice 7" and effect.label is None


def post_office_queue(relay: tuple[str, int], database: str) -> list[str]:
    # django-post-office: mail.send queues the mail (status queued); send_queued sends it
    # through the backend its settings name.
    start_django(relay, database, ["post_office"], POST_OFFICE={
        "BACKENDS": {"default": "django.core.mail.backends.smtp.EmailBackend"},
        "CELERY_ENABLED": False},
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates"}])
    from post_office import mail
    from post_office.models import Email

    mail.send(["ada@example.com"], "billing@example.com", subject="Invoice 7",
              message="120 EUR")
    mail.send_queued(processes=1)
    mail.send_queued(processes=1)
    return [str(status) for status in Email.objects.values_list("status", flat=True)]


def test_django_post_office_sends_its_queue_once(
    smtp: Provider, relay: SmtpServer, tmp_path: Path
) -> None:
    needs("post_office", "django-post-office")
    value = in_worker(post_office_queue, (relay.host, relay.port), str(tmp_path / "app.db"))
    assert value == ["0"]  # post_office's STATUS.sent
    [effect] = smtp.journal.effects()
    assert effect.body["subject"] == "Invoice 7"
