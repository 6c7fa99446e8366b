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

import contextlib
import json
import socket
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

from pytest_crashpoints import Context
from pytest_crashpoints._harness.search.engine import StatesEngine
from pytest_crashpoints.harness import Deliver, Scenario, Schedule, run_case

from .conftest import INVOICE_EMAIL, email_task_scenario

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
    return email_task_scenario(send_and_leave, {"task_id": "t-1"})


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


def test_crash_states_are_consistent_while_a_thread_of_the_harness_writes(
    tmp_path: Path,
) -> None:
    """The providers' servers are threads of the harness: requests keep arriving (here, the
    harness's own, from another thread) while the states engine copies the run directory at
    every fail point and puts saved states back for each schedule. Every copy is a
    consistent SQLite file (``PRAGMA quick_check``), and every case reads its journals."""
    import threading

    import httpx

    from pytest_crashpoints import reference_worker
    from pytest_crashpoints.harness import KillAt

    scenario = email_task_scenario(reference_worker, INVOICE_EMAIL)
    stop = threading.Event()
    answered: list[int] = []
    with StatesEngine(scenario, base_dir=tmp_path) as engine:
        ctx = engine.world.ctx
        url, key = ctx.base_url("email"), ctx.api_key("email", "t-1")

        def hammer() -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                while not stop.is_set():
                    answer = client.get(
                        "/v3/messages", headers={"Authorization": f"Bearer {key}"}
                    )
                    answered.append(answer.status_code)

        thread = threading.Thread(target=hammer)
        thread.start()
        try:
            schedules = [
                Schedule((Deliver(0),)),
                Schedule((Deliver(0, KillAt("B")),)),
                Schedule((Deliver(0, KillAt("C")),)),
                Schedule((Deliver(0, KillAt("A")),)),
            ]
            for schedule in schedules * 2:
                engine.results.clear()
                result = engine.run(schedule, None)
                # The servers settle though requests never stop coming (nothing waits for
                # what arrives after it asks), and nothing is torn.
                assert result.errors == (), result.errors
                for database in engine.run_dir.path.rglob("*.sqlite3"):
                    with contextlib.closing(sqlite3.connect(database)) as check:
                        assert check.execute("PRAGMA quick_check").fetchone() == ("ok",)
        finally:
            stop.set()
            thread.join()
    assert answered and set(answered) <= {200, 404}
