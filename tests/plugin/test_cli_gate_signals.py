"""``crashpoints gate`` under signals: nothing it started outlives it, and Ctrl-C is one line.

The gate runs as a real process, tagged with an environment variable that every process it
starts inherits; leftovers are counted by that tag in ``/proc``, never by name.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SUITE = """
import os
import threading
from pathlib import Path

import pytest
from pytest_crashpoints import reference_recovery, reference_worker

MESSAGE = {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "inv-7:send",
           "args": {"to": "a@example.com", "subject": "Invoice", "body": "100 EUR"}}]}


def slow_worker(message, ctx):
    # Says it has started (a file named for its xdist worker and pid), then stays in flight
    # until the signal to the gate ends it: the behaviour under test, not a wait.
    xdist = os.environ.get("PYTEST_XDIST_WORKER", "main")
    (Path(os.environ["CRASHPOINTS_TEST_STARTED"]) / f"{xdist}-{os.getpid()}").touch()
    threading.Event().wait()
    return reference_worker(message, ctx)


@pytest.mark.crashpoints(points="A", providers=["email"], mode="exhaustive")
def test_a_fast(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])


@pytest.mark.crashpoints(points="AB", providers=["email"], max_examples=500, timeout=600)
@pytest.mark.parametrize("n", range(4))
def test_b_slow(crashpoints, n):
    crashpoints.run(worker=slow_worker, recover=reference_recovery, messages=[MESSAGE])
"""

#: How long a loaded machine may take to start the gate, or to end what a signal ends: a
#: deadline for something the test observes, reached only when something is wrong.
SLOW = 300.0


OLD_REPORT = b'{"version": 1, "seed": 1, "tests": [], "old": true}\n'


def tagged(tag: str) -> list[int]:
    """The live processes whose environment carries ``tag``."""
    needle = f"CRASHPOINTS_TEST_TAG={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                if needle in file.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:  # gone, or a zombie
            continue
    return found


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "crash").mkdir()
    (tmp_path / "crash" / "test_suite.py").write_text(SUITE)
    (tmp_path / "crashpoints-report.json").write_bytes(OLD_REPORT)
    (tmp_path / "started").mkdir()
    return tmp_path


def start_gate(workdir: Path, tag: str, *pytest_args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CRASHPOINTS_TEST_TAG": tag,
        "CRASHPOINTS_TEST_STARTED": str(workdir / "started"),
        "PYTHONUNBUFFERED": "1",
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_crashpoints.cli",
            "gate",
            "crash",
            "--",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            *pytest_args,
        ],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def read_until(
    proc: subprocess.Popen[bytes], text: bytes, seen: bytearray, *, timeout: float
) -> None:
    """Read the gate's output into ``seen`` until ``text`` is in it."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while text not in seen and (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([proc.stdout], [], [], remaining)
        chunk = os.read(proc.stdout.fileno(), 65536) if readable else b""
        if not chunk:
            break
        seen += chunk
    assert text in seen, seen.decode()


def slow_workers(workdir: Path) -> dict[int, str]:
    """The slow workers that have started: the name of each one's xdist worker, by pid."""
    return {
        int(pid): name
        for name, _, pid in (p.name.rpartition("-") for p in (workdir / "started").iterdir())
    }


def leftovers(folder: Path) -> list[str]:
    """Temporary files of the gate's left in ``folder`` (their names begin with a dot)."""
    return [p.name for p in folder.iterdir() if p.name.endswith((".new", ".partial"))]


def finish(proc: subprocess.Popen[bytes], tag: str) -> bytes:
    """Reap the gate, read the rest of its output; whatever is left is killed (by tag)."""
    try:
        proc.wait(timeout=SLOW)
        assert proc.stdout is not None
        return proc.stdout.read()
    finally:
        for pid in tagged(tag):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def signal_and_wait_for_the_end(
    gate: subprocess.Popen[bytes], tag: str, workdir: Path, signum: int, *, running: int
) -> None:
    """With at least ``running`` processes of the gate's (the slow workers among them), send
    ``signum`` to the gate; wait for it, and for every process it started, to end."""
    alive = tagged(tag)
    assert slow_workers(workdir).keys() <= set(alive), alive
    assert len(alive) >= running, alive
    gate.send_signal(signum)
    gate.wait(timeout=SLOW)
    # Everything it started ends with it (the guardian kills what pytest leaves).
    wait_until(
        lambda: tagged(tag) == [],
        timeout=SLOW,
        what=lambda: f"every process the gate started to end (left: {tagged(tag)})",
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL, signal.SIGHUP])
def test_a_signal_to_the_gate_leaves_no_process(workdir: Path, signum: signal.Signals) -> None:
    tag = uuid.uuid4().hex
    gate = start_gate(workdir, tag, "-n", "2", "-v")
    try:
        # Both xdist workers are inside a slow crash test, each with a worker in flight: gate,
        # guardian, pytest, two xdist workers, their two fork servers and two workers.
        wait_until(
            lambda: set(slow_workers(workdir).values()) == {"gw0", "gw1"},
            timeout=SLOW,
            what=lambda: f"a slow worker in each xdist worker (started: {slow_workers(workdir)})",
        )
        signal_and_wait_for_the_end(gate, tag, workdir, signum, running=9)
    finally:
        out = finish(gate, tag)
    if signum == signal.SIGKILL:
        assert gate.returncode == -signal.SIGKILL
    else:
        assert gate.returncode == 128 + signum
        assert f"crashpoints gate: stopped by {signum.name}".encode() in out
        assert b"Traceback" not in out
    # The previous run's report stays until a new one is complete.
    assert (workdir / "crashpoints-report.json").read_bytes() == OLD_REPORT
    assert not leftovers(workdir) or signum == signal.SIGKILL


def test_ctrl_c_is_one_line_pytests_status_and_a_report_of_what_finished(
    workdir: Path,
) -> None:
    import json

    tag = uuid.uuid4().hex
    gate = start_gate(workdir, tag, "-v")
    try:
        seen = bytearray()
        read_until(gate, b"test_a_fast PASSED", seen, timeout=SLOW)
        read_until(gate, b"test_b_slow[0]", seen, timeout=SLOW)
        # Inside the slow test's first crash case: gate, guardian, pytest, its fork server
        # and a worker (in flight in the slow worker) are running.
        wait_until(
            lambda: slow_workers(workdir),
            timeout=SLOW,
            what="the slow worker to start",
        )
        signal_and_wait_for_the_end(gate, tag, workdir, signal.SIGINT, running=5)
    finally:
        out = finish(gate, tag)
    assert gate.returncode == 2, out.decode()
    assert b"Traceback" not in out, out.decode()
    lines = [line for line in out.decode().splitlines() if line.startswith("crashpoints gate:")]
    assert lines == [
        "crashpoints gate: interrupted (pytest exit 2); the reports hold the 1 crash test(s) "
        "that finished."
    ]
    document = json.loads((workdir / "crashpoints-report.json").read_text())
    assert document["interrupted"] is True
    assert [t["nodeid"] for t in document["tests"]] == ["crash/test_suite.py::test_a_fast"]
    markdown = (workdir / "crashpoints-summary.md").read_text()
    assert markdown.startswith("## crashpoints gate: interrupted")
    assert not leftovers(workdir)
