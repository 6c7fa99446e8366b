"""B and C through the harness transport, against a tiny stand-in provider."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from pytest_crashpoints import CrashTransport, crashpoint, crashpoint_context
from pytest_crashpoints._inject.failpoints import Fault, Kill
from pytest_crashpoints._process.outcome import Completed, Killed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessUsageError


def provider(journal: Path) -> httpx.MockTransport:
    """A stand-in provider: applies every request by committing it to a SQLite journal."""

    def handle(request: httpx.Request) -> httpx.Response:
        with closing(sqlite3.connect(journal)) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT, body TEXT)")
            db.execute(
                "INSERT INTO effects VALUES (?, ?)",
                (request.headers.get("Idempotency-Key"), request.content.decode()),
            )
        return httpx.Response(200, json={"id": "msg_1"})

    return httpx.MockTransport(handle)


def effects(journal: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(journal)) as db:
        return db.execute("SELECT key, body FROM effects").fetchall()


def send_email(tmp: str) -> str:
    """A worker: send, note the response, then commit the outcome (a ledger write)."""
    base = Path(tmp)
    client = httpx.Client(transport=CrashTransport(provider(base / "journal.sqlite3")))
    with crashpoint_context(tool="send_email"):
        response = client.post(
            "https://mail.test/v3/send", json={"to": "a@b"}, headers={"Idempotency-Key": "k1"}
        )
    (base / "saw-response").write_text(response.text)
    crashpoint("ledger.write", op="confirm")
    (base / "outcome-committed").write_text("yes")
    return str(response.json()["id"])


def test_b_the_provider_has_the_effect_the_worker_never_saw_the_response(tmp_path: Path) -> None:
    outcome = run_worker(
        send_email, args=(str(tmp_path),), faults=[Fault("B", Kill(), when={"tool": "send_email"})]
    )
    assert isinstance(outcome, Killed)
    assert (outcome.point, outcome.fired_at) == ("B", "B")
    assert outcome.context["source"] == "transport"
    assert outcome.context["idempotency_key"] == "k1"
    assert effects(tmp_path / "journal.sqlite3") == [("k1", "{\"to\":\"a@b\"}")]
    assert not (tmp_path / "saw-response").exists()


def test_c_the_response_arrived_the_kill_comes_at_the_next_ledger_write(tmp_path: Path) -> None:
    outcome = run_worker(send_email, args=(str(tmp_path),), faults=[Fault("C", Kill())])
    assert isinstance(outcome, Killed)
    assert (outcome.point, outcome.fired_at) == ("C", "ledger.write")
    assert len(effects(tmp_path / "journal.sqlite3")) == 1
    assert (tmp_path / "saw-response").read_text() == '{"id":"msg_1"}'
    assert not (tmp_path / "outcome-committed").exists()


def test_unarmed_the_transport_only_passes_the_response_on(tmp_path: Path) -> None:
    assert send_email(str(tmp_path)) == "msg_1"
    outcome = run_worker(send_email, args=(str(tmp_path),))
    assert isinstance(outcome, Completed)
    assert outcome.value == "msg_1"
    assert [h.point for h in outcome.hits] == ["B", "C", "ledger.write"]
    assert len(effects(tmp_path / "journal.sqlite3")) == 2


def test_the_transport_fires_only_b_and_c() -> None:
    with pytest.raises(HarnessUsageError, match="only B and C"):
        CrashTransport(httpx.MockTransport(lambda r: httpx.Response(200)), points=("A",))
