"""Requests that are not the run's own never reach its ground truth.

On a shared machine another run's process can reach a case's server (a port reused after its
own case ended, a neighbour probing loopback ports): keyless requests, or keys signed for
another run. The case's servers refuse them unjournaled, and the timeline says so in a note;
the agent's own requests are journaled as before, and the verdict does not change.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import Context, reference_worker
from pytest_crashpoints.harness import Deliver, Schedule, run_case

from .conftest import INVOICE_EMAIL, email_task_scenario

OUTSIDER = textwrap.dedent(
    """
    import pathlib, socket, sys, time, urllib.parse
    folder = pathlib.Path(sys.argv[1])
    def send(url, raw):
        parts = urllib.parse.urlsplit(url)
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
                sock.sendall(raw)
                while sock.recv(65536):
                    pass
        except OSError:
            pass
    while True:
        for target in folder.glob("*.url"):
            url = target.read_text()
            body = b'{"personalizations": [{"to": [{"email": "x@example.com"}]}]}'
            send(url, b"GET /v3/messages HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
            key = b"sk_test_tenant-1_x~worker-1.abc~0123456789abcdef"  # another run's
            send(url, b"POST /v3/mail/send HTTP/1.0\\r\\nHost: x\\r\\n"
                      b"Authorization: Bearer " + key + b"\\r\\n"
                      b"Content-Length: %d\\r\\n\\r\\n" % len(body) + body)
            target.with_suffix(".fired").write_text("fired")
        time.sleep(0.01)  # fires again and again while the case runs: a pace, not a wait
    """
)

def wait_for_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


@pytest.fixture
def outsider(tmp_path: Path) -> Iterator[Path]:
    """A process outside the case that fires requests at every URL written to a folder."""
    folder = tmp_path / "targets"
    folder.mkdir()
    process = subprocess.Popen([sys.executable, "-c", OUTSIDER, str(folder)])
    try:
        yield folder
    finally:
        process.kill()
        process.wait(timeout=30)


def test_requests_from_outside_the_run_are_refused_unjournaled(
    tmp_path: Path, outsider: Path
) -> None:
    def worker(message: dict[str, Any], ctx: Context) -> object:
        # The outsider is told where this case's server is, and the worker goes on only once
        # it has fired at it: its requests arrive while the case runs.
        url_file = outsider / "email.url"
        url_file.write_text(ctx.base_url("email"))
        wait_for_file(url_file.with_suffix(".fired"), timeout=30)
        return reference_worker(message, ctx)

    scenario = email_task_scenario(worker, INVOICE_EMAIL)
    result = run_case(scenario, Schedule((Deliver(0),)), base_dir=tmp_path, keep=True)
    assert result.passed, result.errors
    refused = [e.text for e in result.history.entries if "unjournaled" in e.text]
    assert any("not signed for this run" in text for text in refused), refused
    assert result.run_dir is not None
    import fake_providers

    journal = fake_providers.Journal(
        result.run_dir / "journals" / "email.sqlite3", provider="email"
    )
    try:
        requests = journal.requests()
    finally:
        journal.close()
    # Only the worker's own requests: its send (and nothing of the outsider's).
    assert requests and all(r.label and r.label.startswith("worker-1.") for r in requests)
