"""The fail-point protocol from programs that are not Python: continue, kill and pause.

Each test runs a small bridge in a real worker process: it serves the protocol and runs a
client program (a Node.js script, or a shell script with curl) that calls two fail points,
printing before and after each. The worker is armed as the harness arms a command's bridge:
nothing, a Kill, or a Pause at the client's second point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from pytest_crashpoints._inject.failpoints import Fault, Kill, Pause
from pytest_crashpoints._process.outcome import Completed, Killed
from pytest_crashpoints._process.worker import run_worker, start_worker
from pytest_crashpoints.harness import FailpointServer

from .test_worker import wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")

NODE_CLIENT = """
const { failpoint, now } = require(process.env.HELPER);
(async () => {
  console.log(`pid ${process.pid} now ${await now()}`);
  console.log(`one ${await failpoint("step.one", { n: 1 })}`);
  console.log(`two ${await failpoint("step.two", { n: 2, who: "node" })}`);
})().catch((error) => { console.error(error.stack); process.exit(1); });
"""

CURL_CLIENT = """#!/bin/sh
set -e
echo "pid $$"
echo "one $(curl -sf -X POST "$CRASHPOINTS_URL/failpoint/step.one" -d '{"n": 1}')"
echo "two $(curl -sf -X POST "$CRASHPOINTS_URL/failpoint/step.two" -d '{"n": 2, "who": "curl"}')"
"""

HELPER = Path(__file__).resolve().parents[2] / "scenarios" / "node" / "crashpoints.js"


def _client(kind: str, tmp_path: Path) -> list[str]:
    if shutil.which(kind) is None:
        pytest.skip(f"{kind} is not installed")
    if kind == "node":
        script = tmp_path / "client.js"
        script.write_text(NODE_CLIENT)
        return ["node", str(script)]
    script = tmp_path / "client.sh"
    script.write_text(CURL_CLIENT)
    script.chmod(0o755)
    return [str(script)]


def bridge(argv: list[str], out: str) -> int:
    """A bridge in small: serve the protocol, run the client (in this worker's process group,
    which a kill takes with it), return its exit status."""
    with FailpointServer(now=lambda: 7.0) as server, open(out, "wb") as stdout:
        env = {**os.environ, "CRASHPOINTS_URL": server.url, "HELPER": str(HELPER)}
        client = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=stdout)
        server.start()
        return client.wait()


def _lines(out: Path) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def _pid(out: Path) -> int:
    return int(_lines(out)[0].split()[1])


@pytest.fixture(params=["node", "curl"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    return _client(request.param, tmp_path)


def test_continue_answers_at_once_with_the_harness_time(client: list[str], tmp_path: Path):
    out = tmp_path / "out"
    outcome = run_worker(bridge, args=(client, str(out)), timeout=30)
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == 0
    assert [(hit.point, hit.context.get("n")) for hit in outcome.hits] == [
        ("step.one", 1),
        ("step.two", 2),
    ]
    first, one, two = _lines(out)
    if "now" in first:
        assert first.endswith("now 7")  # the helper's now(): GET /now
    assert one.startswith("one ") and two.startswith("two ")
    assert "7" in two  # node prints the answer's harness time, curl the whole answer


def test_a_kill_kills_the_caller_while_it_waits(client: list[str], tmp_path: Path):
    out = tmp_path / "out"
    outcome = run_worker(
        bridge, args=(client, str(out)), faults=[Fault("step.two", Kill())], timeout=30
    )
    assert isinstance(outcome, Killed), outcome
    assert (outcome.point, outcome.context["n"]) == ("step.two", 2)
    assert [line.split()[0] for line in _lines(out)] == ["pid", "one"]  # never "two"
    assert wait_gone(_pid(out), timeout=10)  # killed with the bridge, not orphaned


def test_a_pause_holds_the_answer_until_the_harness_releases_it(client: list[str], tmp_path: Path):
    out = tmp_path / "out"
    worker = start_worker(
        bridge, args=(client, str(out)), faults=[Fault("step.two", Pause("gate"))], timeout=30
    )
    with worker:
        worker.wait_paused("gate")
        # The client is inside its second call, waiting for the answer.
        assert [line.split()[0] for line in _lines(out)] == ["pid", "one"]
        worker.release("gate")
        outcome = worker.wait()
    assert isinstance(outcome, Completed), outcome
    assert [line.split()[0] for line in _lines(out)] == ["pid", "one", "two"]


def _post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_bad_requests_are_answered_with_what_is_wrong():
    with FailpointServer(now=lambda: 3.5, epoch=100.0) as server:
        server.start()
        assert _post(server.url + "/failpoint/A", b"") == (
            200,
            {"action": "continue", "now": 3.5},
        )
        status, answer = _post(server.url + "/failpoint/A", b"[1, 2]")
        assert status == 400 and "send a JSON object" in str(answer["error"])
        status, answer = _post(server.url + "/failpoint/A", b'{"nested": {"no": 1}}')
        assert status == 400 and "JSON scalars" in str(answer["error"])
        status, answer = _post(server.url + "/failpoint/", b"")
        assert status == 400
        status, answer = _post(server.url + "/elsewhere", b"")
        assert status == 404 and "POST /failpoint/{name}" in str(answer["error"])
        with urllib.request.urlopen(server.url + "/now", timeout=10) as response:
            assert json.loads(response.read()) == {"now": 3.5, "time": 103.5}


def _raw(url: str, request: bytes) -> bytes:
    """Send ``request`` as it is to the server at ``url``; its whole answer."""
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_what_a_strict_reader_refuses_is_answered_400_never_a_traceback() -> None:
    with FailpointServer(now=lambda: 3.5) as server:
        server.start()
        path = urllib.parse.urlsplit(server.url).path
        superscript_two = _raw(
            server.url,
            f"POST {path}/failpoint/A HTTP/1.0\r\nContent-Length: \u00b2\r\n\r\n{{}}".encode(),
        )
        assert superscript_two.startswith(b"HTTP/1.0 400 ")
        two_lengths = _raw(
            server.url,
            f"POST {path}/failpoint/A HTTP/1.0\r\nContent-Length: 2\r\n"
            f"Content-Length: 3\r\n\r\n{{}}x".encode(),
        )
        assert two_lengths.startswith(b"HTTP/1.0 400 ")
        deep = b"[" * 100_000 + b"]" * 100_000
        status, answer = _post(server.url + "/failpoint/A", deep)
        assert status == 400 and "nested too deep" in str(answer["error"])
        # Still serving.
        assert _post(server.url + "/failpoint/A", b"")[0] == 200


def test_without_its_credential_nothing_is_answered_but_401() -> None:
    with FailpointServer(now=lambda: 3.5, credential="s3cret") as server:
        server.start()
        bare = server.url.removesuffix("/s3cret")
        for probe in ("/now", "/tasks/t-1", "/failpoint/A", "/s3cre", "/s3cretX/now"):
            assert _raw(bare, f"GET {probe} HTTP/1.0\r\n\r\n".encode()).startswith(
                b"HTTP/1.0 401 "
            ), probe
        assert _post(bare + "/failpoint/A", b"")[0] == 401
        assert [method for method, _ in server.refused] == ["GET"] * 5 + ["POST"]
        with urllib.request.urlopen(server.url + "/now", timeout=10) as response:
            assert json.loads(response.read())["now"] == 3.5
