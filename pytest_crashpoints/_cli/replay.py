"""``crashpoints replay TOKEN``: run the one schedule of a replay token against its test."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from ..errors import CrashpointsError
from .gate import GATE_ERROR, run_pytest

__all__ = ["replay"]


def replay(token: str, *, pytest_args: Sequence[str] = ()) -> int:
    """Run the one schedule of a replay token against the test it came from."""
    from .._harness.search.token import read_token

    try:
        read = read_token(token)
    except CrashpointsError as exc:
        print(f"crashpoints replay: error: {exc}", file=sys.stderr)
        return GATE_ERROR
    if not read.nodeid:
        print(
            "crashpoints replay: error: this token does not name its test; run "
            f"`pytest <test> --crashpoints-replay={token}` instead.",
            file=sys.stderr,
        )
        return GATE_ERROR
    args = [f"--crashpoints-replay={token}"]
    if read.seed is not None:
        args.append(f"--crashpoints-seed={read.seed}")
    # The node id is already checked (no "-", no "@", relative, no ".."); "./" in front keeps
    # pytest from ever reading it as an option or an arguments file.
    return run_pytest([*args, *pytest_args, f"./{read.nodeid}"]).status


