"""A program started by a worker: it dies with the worker, and its end is described.

The harness runs a worker that is a command (any language) from a *bridge*: a harness worker
that starts the program with :func:`start_command` and waits for it. The program stays in the
bridge's process group, so the group kill that ends every worker (a kill at a fail point, a
timeout, an interruption) ends it too, and it gets ``PR_SET_PDEATHSIG=SIGKILL`` on Linux, so
it dies with the bridge even if it left the group. Its standard input is a file, its output
goes to files (kept in the case's run directory); nothing it holds is the harness's (the
bridge's descriptors are close-on-exec).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import HarnessUsageError
from . import prctl

__all__ = ["check_command", "describe_exit", "start_command", "tail"]



def check_command(argv: object, *, what: str = "command") -> tuple[str, ...]:
    """The command ``argv`` as a tuple of strings whose program exists and can be run.

    Raises :class:`HarnessUsageError` (one line: what is wrong, what to pass) for an empty
    command, one that is not a sequence of strings, or a program not found.
    """
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise HarnessUsageError(
            f"{what}={argv!r} is not a list of strings; pass the program and its arguments, "
            f"e.g. {what}=['node', 'worker.js']."
        )
    words = tuple(argv)
    if not words:
        raise HarnessUsageError(
            f"{what}=[] is empty; pass the program and its arguments, e.g. "
            f"{what}=['node', 'worker.js']."
        )
    if not all(isinstance(word, str) and word for word in words):
        raise HarnessUsageError(f"{what}={list(words)!r}: every item must be a non-empty string.")
    program = words[0]
    if os.sep in program:
        found = program if os.access(program, os.X_OK) and os.path.isfile(program) else None
    else:
        found = shutil.which(program)
    if found is None:
        raise HarnessUsageError(
            f"{what}={list(words)!r}: program {program!r} was not found or cannot be run "
            "(not on PATH, or not an executable file); install it, or give its path."
        )
    return words


def _die_with_bridge(bridge: int) -> None:
    """Run in the program's process between fork and exec (the bridge has no other thread
    yet: nothing here can meet a lock held by one)."""
    prctl.set_option(prctl.PR_SET_PDEATHSIG, signal.SIGKILL)  # loaded before the fork
    if os.getppid() != bridge:  # the bridge died before the death signal was set
        os.kill(os.getpid(), signal.SIGKILL)


def start_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    stdin: str | os.PathLike[str] | None,
    stdout: str | os.PathLike[str],
    stderr: str | os.PathLike[str],
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with ``env``, reading ``stdin`` (a file; ``None``: nothing) and writing
    its output to the files ``stdout`` and ``stderr``; it dies with this process.

    Call it from the thread that outlives the program (the death signal is tied to the
    thread that forked it) and before starting any other thread (the death signal is set
    between fork and exec). Raises :class:`HarnessUsageError` if the program cannot start.
    """
    prctl.load()  # here: the program's process must not build it between fork and exec
    bridge = os.getpid()
    out = open(stdout, "ab")  # noqa: SIM115 - closed below, after the fork
    err = open(stderr, "ab")  # noqa: SIM115
    inp = open(stdin, "rb") if stdin is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv),
            stdin=inp,
            stdout=out,
            stderr=err,
            env=dict(env),
            cwd=cwd,
            close_fds=True,
            preexec_fn=lambda: _die_with_bridge(bridge),
        )
    except OSError as exc:
        raise HarnessUsageError(
            f"the command {list(argv)!r} could not be started: {exc}; check the program and "
            "its permissions."
        ) from exc
    finally:
        out.close()
        err.close()
        if not isinstance(inp, int):
            inp.close()


def describe_exit(returncode: int) -> str:
    """``"exited with status 3"``, ``"was killed by SIGSEGV"``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


def tail(path: str | os.PathLike[str], lines: int) -> tuple[list[str], int]:
    """The last ``lines`` lines of the text file ``path`` and how many it has (``([], 0)``
    for a missing or empty file), leaving out traceback markers (``~~^^``). Reads at most its
    last 64 KiB."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - 65536))
            data = file.read()
    except OSError:
        return [], 0
    text = data.decode("utf-8", errors="replace").rstrip("\n")
    if not text:
        return [], 0
    every = text.split("\n")
    total = len(every) if size <= 65536 else Path(path).read_bytes().count(b"\n") + 1
    # Python's traceback markers under a line (``~~~^^^``) say nothing on their own.
    telling = [line for line in every if not line.strip() or line.strip(" \t~^")]
    return telling[-lines:], total
