"""A provider still answering when its client's process has ended: the harness waits for it.

On a loaded machine a provider's server (a thread of the harness) can be slower than the
worker it answers: the worker dies or gives up, the request is still being journaled. The
harness must not copy, restore or read the journals meanwhile (a torn copy read as
``database disk image is malformed``; an effect journaled after its case's evidence was read,
or into another schedule's restored state). Here the provider is held up on purpose: the
worker holds the provider's journal lock while its request arrives, so the server can answer
only after the worker has ended.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

from pytest_crashpoints import Authority, Context, ProviderSpec
from pytest_crashpoints.harness import Deliver, Scenario, Schedule, StatesEngine, run_case

MAIL = {
    "personalizations": [{"to": [{"email": "ada@example.com"}]}],
    "from": {"email": "billing@example.com"},
    "subject": "Invoice 7",
    "content": [{"type": "text/plain", "value": "100 EUR"}],
}


def send_and_leave(message: dict[str, Any], ctx: Context) -> None:
    """Send one e-mail and end without waiting for the answer, while holding the provider's
    journal lock: the provider can journal the request only once this process is gone."""
    journal = sqlite3.connect(
        ctx.env.path / "journals" / "email.sqlite3", timeout=30, isolation_level=None
    )
    journal.execute("BEGIN IMMEDIATE")
    url = urllib.parse.urlsplit(ctx.base_url("email"))
    body = json.dumps(MAIL).encode()
    head = (
        f"POST /v3/mail/send HTTP/1.0\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {ctx.api_key('email', message['task_id'])}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    assert url.hostname is not None and url.port is not None
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(head.encode() + body)
    # The provider's thread now waits for the lock, backing off; the longer it has waited,
    # the later it looks again after this process ends. (Not a wait for anything: the
    # harness must give the same verdict however long this is.)
    time.sleep(0.5)


def scenario() -> Scenario:
    return Scenario(
        worker=send_and_leave,
        recover=None,
        messages=({"task_id": "t-1"},),
        providers=(ProviderSpec("email"),),
        authorities={
            "t-1": Authority.of(
                tenant_id="tenant-1", credential_scope="email:read email:write",
                policy_version="p1",
            )
        },
    )


def sent(result: Any) -> list[str]:
    return [line for line in result.state if line.startswith("effect email")]


#: Without the harness waiting for its servers, a case misses the late request about half the
#: time: five runs make a missing wait show.
RUNS = 5


def test_a_request_answered_after_its_process_ended_is_in_the_case(tmp_path: Path) -> None:
    for n in range(RUNS):
        result = run_case(scenario(), Schedule((Deliver(0),)), base_dir=tmp_path, name=f"c{n}")
        assert result.errors == () and result.passed
        assert len(sent(result)) == 1


def test_the_states_engine_copies_and_restores_only_settled_journals(tmp_path: Path) -> None:
    """The engine records the delivery (a copy at every fail point and after it), then puts
    the saved state back for the next schedule: with a provider still writing, the copy is
    torn or the restore lands under a live connection."""
    with StatesEngine(scenario(), base_dir=tmp_path) as engine:
        for _ in range(RUNS):
            engine.results.clear()  # run it again from the saved states, not the memo
            result = engine.run(Schedule((Deliver(0),)), None)
            assert result.errors == () and result.passed
            assert len(sent(result)) == 1
