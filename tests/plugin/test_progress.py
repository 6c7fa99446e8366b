"""Live progress on a terminal, its absence elsewhere, and the schedules ``-v`` lists.

pytest runs in a pseudo-terminal; what it writes is replayed on a small screen model (the
cursor moves and erasures the progress lines use), so a test sees both what was shown while
the test ran and what is left on the screen at the end.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import NOT_OURS

SUITE = """
import pytest
from pytest_crashpoints import reference_recovery, reference_worker

MESSAGE = {"task_id": "t-1", "calls": [{"tool": "send_email", "key": "inv-7:send",
           "args": {"to": "a@example.com", "subject": "Invoice", "body": "100 EUR"}}]}


@pytest.mark.crashpoints(points="A", providers=["email"], mode="exhaustive")
def test_good(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[MESSAGE])


def test_plain():
    pass
"""

PROGRESS = re.compile(r"crashpoints test_good: (\d+)/(\d+) cases, reached ([A-F ]+|none yet)")


def on_a_terminal(folder: Path, *args: str, width: int = 120) -> str:
    """pytest's output, as written to a terminal ``width`` columns wide."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    env = {**os.environ, "TERM": "xterm", "COLUMNS": str(width)}
    env["PYTEST_ADDOPTS"] = NOT_OURS  # none of the options of the pytest running this
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "crashpoints", "-p", "no:randomly",
         "-p", "no:cacheprovider", *args],
        cwd=folder, stdin=subprocess.DEVNULL, stdout=child, stderr=child, env=env,
    )
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 1 << 16)
        except OSError as exc:  # EIO: the terminal's other side is closed
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    process.wait(timeout=60)
    return b"".join(chunks).decode("utf-8", "replace")


def screen(output: str) -> list[str]:
    """What is left on the screen after ``output``: lines, as a terminal would show them."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)  # colours
    lines = [""]
    row = col = 0
    for token in re.findall(r"\x1b\[\d*[A-Za-z]|\r|\n|[^\x1b\r\n]+", output):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif token == "\x1b[K":
            lines[row] = lines[row][:col]
        elif token == "\x1b[A":
            row = max(0, row - 1)
        elif token.startswith("\x1b[") and token.endswith("C"):
            col += int(token[2:-1] or 1)
        elif token.startswith("\x1b"):
            raise AssertionError(f"unexpected escape {token!r}")
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return lines


@pytest.fixture
def suite(pytester: pytest.Pytester) -> Path:
    pytester.makepyfile(test_suite=SUITE)
    return pytester.path


def test_a_terminal_shows_each_case_and_the_lines_leave_no_trace(suite: Path) -> None:
    output = on_a_terminal(suite)
    shown = [m.groups() for m in PROGRESS.finditer(output)]
    assert len(shown) >= 3, output
    done = [int(d) for d, _, _ in shown]
    assert done == sorted(done) and done[-1] == int(shown[-1][1])  # every planned case ran
    assert "A B" in shown[-1][2]
    assert "crashpoints test_good: the fault-free run" in output
    left = screen(output)
    assert not any("crashpoints test_good:" in line for line in left), left
    # pytest's own line is whole: both tests' results on it, where pytest put them.
    assert any(re.fullmatch(r"test_suite\.py \.\. +\[100%\]", line) for line in left), left
    assert any("2 passed" in line for line in left)


def test_quiet_runs_and_xdist_workers(suite: Path) -> None:
    quiet = on_a_terminal(suite, "-q")
    assert "crashpoints test_good:" not in quiet and "2 passed" in quiet
    # Under xdist the controller draws what the workers report.
    parallel = on_a_terminal(suite, "-n", "2")
    assert re.search(r"\[gw[01]\] " + PROGRESS.pattern, parallel), parallel
    left = screen(parallel)
    assert not any("crashpoints test_good:" in line for line in left), left
    assert any("2 passed" in line for line in left)


def test_no_progress_into_a_file_and_verbose_lists_the_schedules(
    pytester: pytest.Pytester, suite: Path
) -> None:
    result = pytester.runpytest_subprocess("-p", "crashpoints", "-p", "no:randomly", "-v")
    result.assert_outcomes(passed=2)
    assert "crashpoints test_good:" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*test_suite.py::test_good PASSED*",
            "    1  passed  *s  fault-free  deliver message 0",
            "    2  passed  *s  exhaustive  deliver message 0, kill at A (hit 1)",
            "*test_suite.py::test_plain PASSED*",
        ]
    )
