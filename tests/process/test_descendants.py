"""Processes a worker starts outside its process group never outlive it, nor fake a timeout.

A helper in a session of its own (``start_new_session=True``) and a daemon made by a double
fork and ``setsid`` both leave the worker's process group, which the harness kills. The
worker is a child subreaper: what it leaves is killed when it ends and named in its outcome;
what a killed worker leaves goes to the fork server, which kills it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Kill
from pytest_crashpoints._process.forkserver import serving
from pytest_crashpoints._process.outcome import Completed, Killed, Raised
from pytest_crashpoints._process.worker import run_worker

from .test_worker import wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl")


def helper_in_its_own_session() -> int:
    # Still running when the worker ends, for the harness to kill: not a wait.
    helper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    return helper.pid


def daemon_by_double_fork(pid_file: str) -> str:
    """Fork, setsid, fork again: the daemon holds every descriptor the worker had."""
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file, "w") as file:
                file.write(str(os.getpid()))
            time.sleep(30)  # outlives the worker, for the harness to kill: not a wait
        os._exit(0)
    os.waitpid(first, 0)
    deadline = time.monotonic() + 5
    while not Path(pid_file).exists() or not Path(pid_file).read_text():
        if time.monotonic() > deadline:
            raise AssertionError("the daemon never started")
        time.sleep(0.01)
    return "started"


def raises_after_a_helper() -> None:
    helper_in_its_own_session()
    raise RuntimeError("boom")


def killed_after_a_helper(pid_file: str) -> None:
    Path(pid_file).write_text(str(helper_in_its_own_session()))
    crashpoint("A")


@pytest.fixture(params=["direct", "served"])
def how(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "served":
        with serving():
            yield "served"
    else:
        yield "direct"


def test_a_helper_in_its_own_session_is_killed_and_named(how: str) -> None:
    outcome = run_worker(helper_in_its_own_session, timeout=10)
    assert isinstance(outcome, Completed), outcome
    helper = outcome.value
    assert outcome.left_running == (f"pid {helper} (sleep 30)",)
    assert wait_gone(helper, timeout=1)


def test_a_worker_that_raises_still_ends_what_it_started(how: str) -> None:
    outcome = run_worker(raises_after_a_helper, timeout=10)
    assert isinstance(outcome, Raised), outcome
    assert len(outcome.left_running) == 1 and "(sleep 30)" in outcome.left_running[0]


def test_a_double_forked_daemon_is_no_fake_timeout(how: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    started = time.monotonic()
    outcome = run_worker(daemon_by_double_fork, args=(str(pid_file),), timeout=3)
    assert isinstance(outcome, Completed), outcome  # not TimedOut after 3 s
    assert time.monotonic() - started < 2
    daemon = int(pid_file.read_text())
    assert len(outcome.left_running) == 1
    assert outcome.left_running[0].startswith(f"pid {daemon} (")
    assert wait_gone(daemon, timeout=1)


def test_what_a_killed_worker_left_dies_with_it_under_the_fork_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    with serving():
        outcome = run_worker(
            killed_after_a_helper, args=(str(pid_file),), faults=[Fault("A", Kill())], timeout=10
        )
        assert isinstance(outcome, Killed), outcome
        assert wait_gone(int(pid_file.read_text()), timeout=1)


def test_a_worker_that_waits_for_its_helpers_leaves_nothing(how: str) -> None:
    def tidy() -> int:
        return subprocess.run(["true"], start_new_session=True, check=True).returncode

    outcome = run_worker(tidy, timeout=10)
    assert isinstance(outcome, Completed) and outcome.left_running == ()
