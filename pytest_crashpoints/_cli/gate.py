"""``crashpoints gate``: run the crash suites as a deployment gate.

It runs pytest with the plugin over the crash suites (strict coverage on), then writes the
JSON report, JUnit XML, a Markdown summary fit for a CI step summary (appended to
``$GITHUB_STEP_SUMMARY`` when that is set) and the HTML report, prints a summary table, and
exits non-zero on any violation, unreached declared point or uncaught broken agent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .._plugin.results import new_file_beside, write_text
from .._process import prctl
from .._process.prctl import PR_SET_PDEATHSIG
from ..errors import CrashpointsError
from .reading import load_report, render_markdown, render_table, report_totals

__all__ = ["GATE_ERROR", "PytestRun", "gate", "run_pytest", "write_atomically"]

GATE_ERROR = 2
INTERRUPTED = 2  # pytest.ExitCode.INTERRUPTED


def gate(
    paths: Sequence[str],
    *,
    report: Path,
    junit: Path,
    markdown: Path,
    html: Path | None = None,
    pytest_args: Sequence[str] = (),
    out: TextIO | None = None,
) -> int:
    """Run the crash suites under ``paths`` as a deployment gate; return the exit status.

    No ``paths``: pytest collects what it would here (its ``testpaths``, or the current folder).

    The reports of an earlier run stay where they are until the new ones are complete: pytest
    writes to ``.new`` files beside them, which replace them only when crash tests ran.
    """
    out = out or sys.stdout
    missing = [p for p in paths if not Path(p.split("::")[0]).exists()]
    if missing:
        print(f"crashpoints gate: error: no such path: {', '.join(missing)}", file=sys.stderr)
        return GATE_ERROR
    for path in (report, junit):
        path.parent.mkdir(parents=True, exist_ok=True)
    # Files of this run's own, beside the reports (two gates in one folder never share one),
    # created new (never through a link) and renamed over the reports once complete.
    with new_file_beside(report, suffix=".new") as new_report, new_file_beside(
        junit, suffix=".new"
    ) as new_junit:
        # pytest writes the report only when crash tests ran, by a rename onto this name
        # (never through a link); the JUnit file it writes into, so that one stays.
        new_report.unlink()
        run = run_pytest(
            [
                "--crashpoints-strict-coverage",
                f"--crashpoints-report={new_report}",
                f"--junitxml={new_junit}",
                *pytest_args,
                *paths,
            ]
        )
        reports = _Reports(report, junit, markdown, html)
        return _conclude(run, paths, reports, new_report, new_junit, out)


@dataclasses.dataclass(frozen=True)
class _Reports:
    """Where the gate's reports go (``html``: ``None`` for none)."""

    report: Path
    junit: Path
    markdown: Path
    html: Path | None


def _conclude(
    run: PytestRun,
    paths: Sequence[str],
    reports: _Reports,
    new_report: Path,
    new_junit: Path,
    out: TextIO,
) -> int:
    """What the gate makes of the pytest run: its reports put in place and its verdict
    printed, or why there is none; returns the exit status."""
    status = run.status
    if run.signal is not None and run.signal != signal.SIGINT:
        print(
            f"crashpoints gate: stopped by {run.signal.name}; pytest and every process it "
            "started were ended, and the reports of the previous run were left as they were.",
            file=sys.stderr,
        )
        return status
    interrupted = run.signal is not None or status == INTERRUPTED
    document = None
    if new_report.is_file():
        try:
            document = load_report(new_report)
        except CrashpointsError as exc:
            print(f"crashpoints gate: error: {exc}", file=sys.stderr)
            return GATE_ERROR
    if document is None or not document["tests"]:
        return _no_crash_tests(run, paths, interrupted=interrupted)
    totals = report_totals(document["tests"])
    passed = _passed(status, totals, sharded=document.get("shard") is not None)
    text = render_markdown(document, passed=passed)
    _put_in_place(document, text, reports, new_report, new_junit)
    print("", file=out)
    print(render_table(document), file=out)
    written = f"report: {reports.report}  junit: {reports.junit}  summary: {reports.markdown}"
    if reports.html is not None:
        written += f"  html: {reports.html}"
    print(written, file=out)
    if interrupted:
        print(
            f"crashpoints gate: interrupted (pytest exit {status}); the reports hold the "
            f"{totals['tests']} crash test(s) that finished.",
            file=out,
        )
        return status
    print(f"crashpoints gate: {'passed' if passed else 'FAILED'}", file=out)
    return 0 if passed else (status or 1)


def _no_crash_tests(run: PytestRun, paths: Sequence[str], *, interrupted: bool) -> int:
    """Say why no crash test finished (the reports of the previous run left as they were);
    return the exit status."""
    status = run.status
    if interrupted and run.signal is None:
        # pytest stopped itself: exit 2 without a signal is an error while collecting the
        # tests or in pytest's arguments, which pytest printed above.
        print(
            f"crashpoints gate: error: pytest stopped (exit {status}) before any crash "
            "test ran: an error while collecting the tests or in pytest's arguments (see "
            "pytest's output above); the reports of the previous run were left as they "
            "were.",
            file=sys.stderr,
        )
        return status
    if interrupted:
        print(
            f"crashpoints gate: interrupted (pytest exit {status}) before any crash test "
            "finished; the reports of the previous run were left as they were.",
            file=sys.stderr,
        )
        return status
    where = ", ".join(paths) or f"{Path.cwd()} (pytest's testpaths, or the folder itself)"
    print(
        f"crashpoints gate: error: no crash tests ran under {where} "
        f"(pytest exit {status}); mark tests with @pytest.mark.crashpoints(...). "
        "No report was written.",
        file=sys.stderr,
    )
    return GATE_ERROR


def _passed(status: int, totals: dict[str, Any], *, sharded: bool) -> bool:
    """Whether the run passes the gate: pytest passed, no crash test failed or ended in an
    error, and every declared point was reached and killed. A shard ran a part of each
    test's schedules: its coverage is judged once the shards' reports are merged
    (`crashpoints merge`)."""
    return (
        status == 0
        and totals["failed"] == 0
        and totals["errors"] == 0
        and (sharded or not (totals["unreached"] or totals["unkilled"]))
    )


def _put_in_place(
    document: dict[str, Any], text: str, reports: _Reports, new_report: Path, new_junit: Path
) -> None:
    """The run's reports in place of the previous run's (a link among those replaced, not
    written through), the Markdown summary ``text`` written, and appended to
    ``$GITHUB_STEP_SUMMARY`` when that is set."""
    for path in (reports.report, reports.junit, reports.markdown, reports.html):
        if path is not None and path.is_symlink():
            print(
                f"crashpoints gate: {path} was a symbolic link (to {os.readlink(path)}); it "
                "is replaced by the report, and nothing was written through it.",
                file=sys.stderr,
            )
    new_report.replace(reports.report)
    if new_junit.is_file() and new_junit.stat().st_size:  # pytest wrote it
        new_junit.replace(reports.junit)
    write_atomically(reports.markdown, text)
    if reports.html is not None:
        from .._plugin.html import render_html

        write_atomically(reports.html, render_html(document))
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file of its own and a rename: a reader
    sees the old file or the new one, never a part; nothing is written through a link."""
    write_text(path, text)


def say_write_error(command: str, output: Path, exc: CrashpointsError | OSError) -> None:
    """Say on stderr, in one line, why ``crashpoints COMMAND`` wrote nothing to ``output``: a
    report it could not use, or an ``OSError`` of the write."""
    why = f"cannot write {output}: {exc.strerror or exc}" if isinstance(exc, OSError) else exc
    print(f"crashpoints {command}: error: {why}", file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class PytestRun:
    """How the pytest run ended: its status (``128 + N`` if it died of signal N), and the
    signal the gate received and passed on to it, if any."""

    status: int
    signal: signal.Signals | None


#: The signals the gate passes on to pytest's process group.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# The guardian: it leads pytest's process group, ignores the signals the gate forwards, and
# when its stdin closes (the gate ended, however it ended, SIGKILL included) kills the group.
_GUARDIAN = (
    "import os, signal\n"
    "while os.read(0, 512):\n"
    "    pass\n"
    "os.killpg(0, signal.SIGKILL)\n"
)


def run_pytest(args: Sequence[str]) -> PytestRun:
    """Run pytest with the plugin in a fresh interpreter (so it imports, and rewrites,
    everything itself); its output streams through.

    pytest runs in a process group of its own, led by a small guardian process that kills the
    whole group when the gate ends, however it ends (SIGKILL included); on Linux pytest also
    gets ``SIGKILL`` if the gate dies (``PR_SET_PDEATHSIG``). SIGINT, SIGTERM and SIGHUP sent
    to the gate are passed on to the group, and the gate waits for pytest to end.
    """
    import subprocess

    command = [sys.executable, "-m", "pytest", "-p", "crashpoints", *args]
    read_end, write_end = os.pipe()
    try:
        guardian = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARDIAN],
            stdin=read_end,
            preexec_fn=_lead_a_group,
        )
    finally:
        os.close(read_end)
    group = guardian.pid
    received: list[signal.Signals] = []
    sent = [0]
    child: subprocess.Popen[bytes] | None = None

    def forward_pending() -> None:
        while sent[0] < len(received):
            signum = received[sent[0]]
            sent[0] += 1
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum))
        if child is not None:
            forward_pending()

    previous = _install(on_signal)
    try:
        child = subprocess.Popen(command, preexec_fn=_joining(group, prctl.load()))
        forward_pending()  # a signal that came while pytest was starting
        code = child.wait()
    finally:
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
            child.wait()
        os.close(write_end)  # the guardian kills whatever pytest left in its group, and itself
        guardian.wait()
        _restore(previous)
    status = 128 - code if code < 0 else code
    return PytestRun(status, received[0] if received else None)


def _joining(group: int, prctl: Any) -> Callable[[], None]:
    """What pytest's process runs before it starts: it joins the guardian's ``group``, takes
    the forwarded signals' default actions back, and asks for ``SIGKILL`` when the gate dies
    (``prctl``: looked up before the fork; ``None`` where there is none)."""

    def join_group() -> None:
        os.setpgid(0, group)
        for signum in FORWARDED:
            signal.signal(signum, signal.SIG_DFL)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return join_group


def _lead_a_group() -> None:
    os.setpgid(0, 0)
    for signum in FORWARDED:
        signal.signal(signum, signal.SIG_IGN)  # ignored signals stay ignored across exec


def _install(handler: Any) -> dict[signal.Signals, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}  # only the main thread may set handlers (a gate run from a test's thread)
    return {signum: signal.signal(signum, handler) for signum in FORWARDED}


def _restore(previous: dict[signal.Signals, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
