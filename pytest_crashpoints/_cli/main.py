"""The ``crashpoints`` command.

Subcommands:

- ``crashpoints gate [PATHS...] [-- PYTEST ARGS]``: run the crash suites as a deployment gate.
- ``crashpoints replay TOKEN``: run the one schedule of a failure report against its test.
- ``crashpoints show REPORT.json``: the timeline and evidence of each failure in a report;
  ``--schedules TEST``: the schedules a test ran; ``--html -o PATH``: the HTML report;
  ``--otel -o PATH``: the failing cases as OpenTelemetry traces.
- ``crashpoints merge A.json B.json ... -o merged.json``: the reports of the shards of one
  run (``--crashpoints-shard=K/N``) as one report.
- ``crashpoints reproduce --worker M:F --ledger FILE --export PROVIDER=FILE ... -o TEST.py``:
  a production incident as a crash test whose cases start from its state; written, then run.
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
from typing import TypeAlias

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
    """The command line: the command, its ``--version``, and each subcommand's arguments."""
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
    _add_gate(sub)
    _add_replay(sub)
    _add_show(sub)
    _add_merge(sub)
    _add_reproduce(sub)
    _add_queue(sub)
    return parser


#: What ``add_subparsers`` returns: each subcommand adds its parser to it.
_Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_documented(
    sub: _Subparsers, name: str, *, help: str, description: str
) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``, its help ending with a link to its section of the
    command's documentation."""
    return sub.add_parser(
        name,
        formatter_class=_Help,
        help=help,
        description=description,
        epilog=f"Documentation: {DOCS_URL}cli.md#crashpoints-{name}",
    )


def _add_gate(sub: _Subparsers) -> None:
    """``crashpoints gate`` and its arguments."""
    gate = _add_documented(
        sub,
        "gate",
        help="run the crash tests as a deployment gate",
        description=(
            "Run pytest with the crashpoints plugin over PATHS (strict coverage on), write the "
            "JSON report, JUnit XML, a Markdown summary and the HTML report, and exit non-zero "
            "on any "
            "violation, declared point never reached, or deliberately broken agent not "
            "caught. Arguments after -- go to pytest (e.g. -- -n 2)."
        ),
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
    gate.add_argument(
        "--html", default="crashpoints-report.html", help="HTML report (%(default)s)"
    )


def _add_replay(sub: _Subparsers) -> None:
    """``crashpoints replay`` and its arguments."""
    replay = sub.add_parser(
        "replay",
        help="run exactly the schedule of a replay token against its test",
        description="Same as `pytest NODEID --crashpoints-replay=TOKEN` for the test in TOKEN.",
    )
    replay.add_argument("token", metavar="TOKEN", help="the token from a failure report")


def _add_show(sub: _Subparsers) -> None:
    """``crashpoints show`` and its arguments."""
    show = sub.add_parser(
        "show",
        help="print the timeline and evidence of each failure in a JSON report",
        description=(
            "Print the failures of a report (exit 0 when no test failed, 1 when one did); "
            "with --schedules TEST, the schedules that test ran; with --html, write the HTML "
            "report instead, with --otel its failing cases as OpenTelemetry traces "
            "(OTLP/JSON) (exit 0). Exit 2 on an error."
        ),
    )
    show.add_argument("report", metavar="REPORT.json", help="a --crashpoints-report file")
    show.add_argument(
        "--schedules",
        metavar="TEST",
        help="list the schedules TEST ran (its node id, or a part of it naming one test)",
    )
    show.add_argument(
        "--html", action="store_true", help="write the HTML report (see -o) instead of printing"
    )
    show.add_argument(
        "--otel",
        action="store_true",
        help="write each failing case as an OpenTelemetry trace (OTLP/JSON, see -o)",
    )
    show.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where --html or --otel writes (default: REPORT with the suffix .html, or "
        ".otlp.json)",
    )


def _add_merge(sub: _Subparsers) -> None:
    """``crashpoints merge`` and its arguments."""
    merge = _add_documented(
        sub,
        "merge",
        help="combine the reports of the shards of one run into one report",
        description=(
            "Combine the JSON reports of every shard of one run (--crashpoints-shard=K/N) "
            "into the report one machine would have written: each test's schedules in one "
            "machine's order, each case once, coverage and strict coverage counted on the "
            "union, the failure one machine would have stopped at. Exit 0 when written, 2 on "
            "an error (reports of different runs, a shard missing or given twice), when "
            "nothing is written."
        ),
    )
    merge.add_argument("reports", metavar="REPORT.json", nargs="+", help="the report of each shard")
    merge.add_argument(
        "-o", "--output", metavar="PATH", required=True, help="where the merged report goes"
    )


def _add_reproduce(sub: _Subparsers) -> None:
    """``crashpoints reproduce`` and its arguments."""
    reproduce = _add_documented(
        sub,
        "reproduce",
        help="turn an incident from production into a crash test that starts from its state",
        description=(
            "Write a pytest test (-o) whose every case starts where production stopped: the "
            "ledger as it was (--ledger: a copy of the SQLite file, an SQL dump, or JSON "
            "lines) and the objects the providers held (--export PROVIDER=FILE: Stripe's "
            "list of charges, payment intents and refunds for payments, GitHub's issues for "
            "tickets, SendGrid's email activity for email, or the fakes' own export format). "
            "Each case redelivers the messages (--message, --messages) and runs recovery "
            "(--recover), under every single-fault schedule, and checks the six invariants; "
            "the baseline is the fault-free run of the same messages from an empty world. "
            "With no message (the worker long dead), the recovery alone is run and crashed. "
            "Then it runs the test (arguments after -- go to pytest). Exit 1 when the "
            "incident reproduces (the test breaks an invariant), 0 when every schedule "
            "passes, 2 on an error in the arguments (nothing is written) or when the test "
            "reaches no verdict (its report says why)."
        ),
    )
    reproduce.add_argument("--worker", metavar="MODULE:FUNCTION",
                           help="the worker of your crash tests, worker(message, ctx) (leave "
                           "out with no message: the recovery alone runs)")
    reproduce.add_argument("--recover", metavar="MODULE:FUNCTION",
                           help="your recovery, recover(ctx) (leave out if there is none)")
    reproduce.add_argument("--view", metavar="MODULE:FUNCTION",
                           help="your ledger view, view(ctx) (default: the reference ledger)")
    reproduce.add_argument("--ledger", metavar="FILE", help="the incident's copy of the ledger")
    reproduce.add_argument("--export", action="append", default=[], metavar="PROVIDER=FILE",
                           help="what a provider held (repeat for each provider)")
    reproduce.add_argument("--provider", action="append", default=[], metavar="NAME",
                           help="another provider the agent uses, with nothing exported")
    reproduce.add_argument("--message", action="append", default=[], metavar="JSON",
                           help="a message to redeliver, as JSON with a task_id (repeat)")
    reproduce.add_argument("--messages", action="append", default=[], metavar="FILE",
                           help="messages to redeliver: a JSON array, one object, or JSON lines")
    reproduce.add_argument("--at", metavar="TIME",
                           help="when production stopped (ISO 8601, UTC without an offset; "
                           "default: a minute after the newest time the incident holds)")
    reproduce.add_argument("--points", metavar="POINTS",
                           help="the crash points to try (default: all, A to F)")
    reproduce.add_argument("-o", "--output", required=True, metavar="TEST.py",
                           help="the test file to write (test_<name>.py)")
    reproduce.add_argument("--force", action="store_true", help="replace an existing -o file")
    reproduce.add_argument("--no-run", action="store_true", help="write the test, do not run it")


def _reproduce(args: argparse.Namespace, pytest_args: Sequence[str], argv: Sequence[str]) -> int:
    """``crashpoints reproduce``: read the arguments, write the test, run it."""
    from ..errors import CrashpointsError
    from .reproduce import USAGE, Reproduction, parse_at, parse_exports, read_messages, reproduce

    try:
        spec = Reproduction(
            worker=args.worker, output=Path(args.output), recover=args.recover,
            view=args.view, ledger=Path(args.ledger) if args.ledger else None,
            exports=parse_exports(args.export), providers=tuple(args.provider),
            messages=read_messages(args.message, args.messages), at=parse_at(args.at),
            points=args.points, force=args.force,
        )
    except CrashpointsError as exc:
        print(f"crashpoints reproduce: error: {exc}", file=sys.stderr)
        return USAGE
    return reproduce(spec, run=not args.no_run, pytest_args=pytest_args,
                     command=["crashpoints", *argv])


def _add_queue(sub: _Subparsers) -> None:
    """``crashpoints queue`` and its arguments."""
    queue = sub.add_parser(
        "queue",
        help="list the in-flight, UNKNOWN and MANUAL_REVIEW attempts of a ledger",
        description=(
            "List the attempts of a reference ledger that still need someone: in flight, "
            "UNKNOWN, or waiting for review. The ledger is only read. Exit status: 0 when the "
            "queue is empty, 1 when there is work in it, 2 on an error."
        ),
    )
    queue.add_argument(
        "ledger",
        metavar="LEDGER",
        help=(
            "path to the ledger's SQLite file, or a PostgreSQL connection string or "
            "postgresql:// URL of a PostgresLedger's database"
        ),
    )
    queue.add_argument(
        "--json", action="store_true", help="print a JSON list of objects instead of a table"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = ""
        if getattr(args, "command", None) in ("gate", "replay", "reproduce"):
            hint = (
                f"; pytest's own options go after --: crashpoints {args.command} ... -- "
                f"{' '.join(unknown)}"
            )
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "queue":
        from .queue import queue

        return queue(args.ledger, as_json=args.json)
    if args.command == "merge":
        from .merge import merge

        return merge([Path(report) for report in args.reports], Path(args.output))
    if args.command == "replay":
        from .replay import replay

        return replay(args.token, pytest_args=extra)
    if args.command == "show":
        return _show(parser, args)
    if args.command == "reproduce":
        return _reproduce(args, extra, argv)
    from .gate import gate

    return gate(
        list(args.paths),
        report=Path(args.report),
        junit=Path(args.junit),
        markdown=Path(args.markdown),
        html=Path(args.html) if args.html else None,
        pytest_args=extra,
    )


def _show(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``crashpoints show``: the failures of a report, a test's schedules, the HTML report
    or the OpenTelemetry traces; a usage error for options that do not go together."""
    from .show import show

    if args.output and not (args.html or args.otel):
        parser.error("-o/--output goes with --html or --otel")
    if sum(map(bool, (args.html, args.otel, args.schedules is not None))) > 1:
        parser.error("--html, --otel and --schedules do not go together")
    if args.otel:
        from .show import show_otel

        report_path = Path(args.report)
        output = (
            Path(args.output) if args.output else report_path.with_suffix(".otlp.json")
        )
        return show_otel(report_path, output)
    if args.html:
        from .show import show_html

        report_path = Path(args.report)
        output = Path(args.output) if args.output else report_path.with_suffix(".html")
        return show_html(report_path, output)
    if args.schedules is not None:
        from .show import show_schedules

        return show_schedules(Path(args.report), args.schedules)
    return show(Path(args.report))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
