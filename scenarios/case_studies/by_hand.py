"""What the hand confirmations share, with nothing of pytest-crashpoints: a child Python
process that runs a script, killed with a real SIGKILL once the outside world shows its
side effect (a line in a file the "provider" appends to), and the lines of that file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: How long a child may take to reach its side effect on a loaded machine.
DEADLINE = 60.0


def effects(outbox: Path) -> list[str]:
    """The side effects the world has seen: one line each."""
    return outbox.read_text().splitlines() if outbox.exists() else []


def kill_after_effect(script: str, folder: Path, outbox: Path, *args: str) -> None:
    """Run ``script`` in a child process and SIGKILL it as soon as ``outbox`` has one more
    line than before: the effect happened, the child has not recorded it."""
    before = len(effects(outbox))
    child = subprocess.Popen([sys.executable, "-c", script, str(folder), *args])
    try:
        deadline = time.monotonic() + DEADLINE
        while len(effects(outbox)) == before:
            if child.poll() is not None:
                raise SystemExit(f"the child ended ({child.returncode}) before its effect")
            if time.monotonic() > deadline:
                raise SystemExit("the child never reached its effect")
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=DEADLINE)
    print(f"child {child.pid} killed with SIGKILL after its effect ({child.returncode})")


def run(script: str, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` to its end in a child process; its output and exit status, printed."""
    done = subprocess.run([sys.executable, "-c", script, str(folder), *args],
                          capture_output=True, text=True, timeout=DEADLINE)
    last = (done.stdout + done.stderr).strip().splitlines()[-1:] or [""]
    print(f"child exited {done.returncode}: {last[0]}")
    return done
