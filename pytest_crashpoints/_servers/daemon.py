"""A server process of a test's own: where it lives, started, waited for, stopped and reaped.

:func:`private_directory` is where it keeps its files and its socket; :func:`start` runs a
server's program with its output in a log file, killed with this process
(``PR_SET_PDEATHSIG`` on Linux: a test process killed outright leaves no server behind);
:func:`wait_until` waits until it is ready (its Unix socket made, its own word), or says
why not (it ended, or took too long) with the end of its log; :func:`stop` asks it to
stop and reaps it, killing it if it does not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .._process import prctl
from ..errors import ServerError

__all__ = ["FAST_SHUTDOWN", "log_tail", "private_directory", "start", "stop", "wait_until"]

#: Seconds between two looks at a server that is starting.
POLL = 0.01
#: PostgreSQL's fast shutdown: connections ended, no wait for clients to leave.
FAST_SHUTDOWN = signal.SIGINT


#: The longest path of a Unix socket a server makes in its directory (Linux allows 107 bytes),
#: with room for the socket's own name.
SOCKET_DIR_LIMIT = 80


@contextlib.contextmanager
def private_directory(prefix: str) -> Iterator[Path]:
    """A new directory of this user's alone, removed with what it holds after the block: in
    the temporary directory (``TMPDIR``), or in ``/tmp`` where that path is too long for a
    Unix socket in it (a deep ``TMPDIR``, a test's own temporary directory)."""
    where = tempfile.gettempdir()
    if len(os.path.join(where, prefix + "x" * 8)) > SOCKET_DIR_LIMIT and os.path.isdir("/tmp"):
        where = "/tmp"
    with tempfile.TemporaryDirectory(prefix=prefix, dir=where) as folder:
        yield Path(folder)


def _dies_with_parent() -> None:
    """Between fork and exec (``prctl`` is loaded before the fork)."""
    prctl.set_option(prctl.PR_SET_PDEATHSIG, signal.SIGKILL)


def start(argv: Sequence[str], *, log: Path, user: str | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` (as ``user``, when given), its output appended to ``log``. Raises
    :class:`ServerError` if it cannot be started."""
    prctl.load()
    with open(log, "ab") as out:
        try:
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                user=user,
                group=user,
                close_fds=True,
                preexec_fn=_dies_with_parent,
            )
        except OSError as exc:
            raise ServerError(f"{argv[0]} could not be started: {exc}") from exc


def log_tail(log: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of ``log``, joined with `` | `` (``"(no output)"``)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return " | ".join(text.splitlines()[-lines:]) or "(no output)"


def wait_until(
    ready: Callable[[], bool],
    server: subprocess.Popen[bytes],
    *,
    timeout: float,
    what: str,
    log: Path,
) -> None:
    """Return once ``ready()`` is true (the server made its socket, says it is ready);
    :class:`ServerError` (the server stopped and reaped) if ``server`` ends first or
    ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while not ready():
        if server.poll() is not None:
            raise ServerError(
                f"{what} ended before it was ready ({_ended(server.returncode)}); its log ends: "
                f"{log_tail(log)}"
            )
        if time.monotonic() > deadline:
            stop(server, signal.SIGKILL)
            raise ServerError(
                f"{what} was not ready after {timeout:g} s; its log ends: {log_tail(log)}"
            )
        time.sleep(POLL)


def stop(server: subprocess.Popen[bytes], how: int = signal.SIGTERM, timeout: float = 30.0) -> None:
    """Send ``how``, wait up to ``timeout`` seconds, then kill; the process is reaped."""
    if server.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(how)
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=timeout)
    if server.poll() is None:
        server.kill()
        server.wait(timeout=timeout)


def _ended(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"
