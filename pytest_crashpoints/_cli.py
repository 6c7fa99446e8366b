"""The ``crashpoints`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crashpoints",
        description=(
            "Prove that tool calls survive crashes: run crash suites as a deployment gate."
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    gate = sub.add_parser(
        "gate", help="run the crash suites (default: the bundled scenarios) as a deployment gate"
    )
    gate.add_argument("paths", nargs="*", help="test files or folders (default: scenarios/)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    import pytest

    paths = list(args.paths) or ["scenarios"]
    return int(pytest.main(["-p", "crashpoints", *paths]))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
