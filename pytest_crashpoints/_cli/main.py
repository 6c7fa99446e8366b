"""The ``crashpoints`` command.

Subcommands:

- ``crashpoints gate [PATHS...] [-- PYTEST ARGS]``: run the crash suites as a deployment gate.
- ``crashpoints replay TOKEN``: run the one schedule of a failure report against its test.
- ``crashpoints show REPORT.json``: the timeline and evidence of each failure in a report.
- ``crashpoints queue [--json] LEDGER``: the operator's view of a reference ledger: every
  in-flight, UNKNOWN and MANUAL_REVIEW attempt. Exit 0 when the queue is empty, 1 when there is
  work left, 2 on an error (one line on stderr).

Heavy imports (pytest, the ledger) happen inside the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .._plugin.options import DOCS_URL

__all__ = ["main", "version"]


def version() -> str:
    """The installed release of pytest-crashpoints (from the package's metadata)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pytest-crashpoints")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Help(argparse.HelpFormatter):
    """argparse's help, but a URL in a description or epilog is never broken across lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crashpoints",
        formatter_class=_Help,
        description=(
            "Prove that tool calls survive crashes: run crash suites as a deployment gate."
        ),
        epilog=f"Documentation: {DOCS_URL}cli.md",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s (pytest-crashpoints) {version()}"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    gate = sub.add_parser(
        "gate",
        formatter_class=_Help,
        help="run the crash tests as a deployment gate",
        description=(
            "Run pytest with the crashpoints plugin over PATHS (strict coverage on), write the "
            "JSON report, JUnit XML and a Markdown summary, and exit non-zero on any "
            "violation, declared point never reached, or deliberately broken agent not "
            "caught. Arguments after -- go to pytest (e.g. -- -n 2)."
        ),
        epilog=f"Documentation: {DOCS_URL}cli.md#crashpoints-gate",
    )
    gate.add_argument(
        "paths",
        nargs="*",
        help="test files, folders or node ids (default: what pytest collects here: your "
        "configuration's testpaths, or the current folder)",
    )
    gate.add_argument(
        "--report", default="crashpoints-report.json", help="JSON report path (%(default)s)"
    )
    gate.add_argument("--junit", default="crashpoints-junit.xml", help="JUnit XML (%(default)s)")
    gate.add_argument(
        "--markdown", default="crashpoints-summary.md", help="Markdown summary (%(default)s)"
    )
    replay = sub.add_parser(
        "replay",
        help="run exactly the schedule of a replay token against its test",
        description="Same as `pytest NODEID --crashpoints-replay=TOKEN` for the test in TOKEN.",
    )
    replay.add_argument("token", metavar="TOKEN", help="the token from a failure report")
    show = sub.add_parser(
        "show",
        help="print the timeline and evidence of each failure in a JSON report",
        description="Exit 0 when the report has no failed test, 1 when it has, 2 on an error.",
    )
    show.add_argument("report", metavar="REPORT.json", help="a --crashpoints-report file")
    queue = sub.add_parser(
        "queue",
        help="list the in-flight, UNKNOWN and MANUAL_REVIEW attempts of a ledger",
        description=(
            "List the attempts of a reference ledger that still need someone: in flight, "
            "UNKNOWN, or waiting for review. The ledger is only read. Exit status: 0 when the "
            "queue is empty, 1 when there is work in it, 2 on an error."
        ),
    )
    queue.add_argument("ledger", metavar="LEDGER", help="path to the ledger's SQLite file")
    queue.add_argument(
        "--json", action="store_true", help="print a JSON list of objects instead of a table"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "queue":
        from .queue import queue

        return queue(Path(args.ledger), as_json=args.json)
    if args.command == "replay":
        from .replay import replay

        return replay(args.token, pytest_args=extra)
    if args.command == "show":
        from .show import show

        return show(Path(args.report))
    from .gate import gate

    return gate(
        list(args.paths),
        report=Path(args.report),
        junit=Path(args.junit),
        markdown=Path(args.markdown),
        pytest_args=extra,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
