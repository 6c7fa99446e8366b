"""The pytest plugin (entry point ``pytest11: crashpoints``): marker, options, fixture, report.

Kept thin and cheap to import: every pytest run of every user imports it, so the harness
(hypothesis, httpx, respx, multiprocess) is imported only inside the fixture that runs it.

- ``@pytest.mark.crashpoints(...)`` is validated at collection; a bad marker fails its test
  with one line naming the test and the bad value.
- The header says ``Using --crashpoints-seed=N``; ``--crashpoints-seed=last`` reuses it.
  Without it, ``--hypothesis-seed`` seeds the crash schedules too: the seed shown is the seed
  used.
- Each test's result travels on its report as JSON (so it comes back from xdist workers);
  the terminal summary aggregates them, ``--crashpoints-report PATH`` writes them and
  ``--crashpoints-html PATH`` draws them, ``--crashpoints-otel PATH`` exports each failing
  case as an OpenTelemetry trace. The seed, cases, verdict, invariants broken and
  replay token also go to the JUnit XML, as properties of the test (``record_property``'s
  mechanism).
- On a terminal, a live line per running crash test shows its progress (under xdist the
  workers pass it to the controller through files); ``-v`` lists each test's schedules.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._plugin.options import DOCS_URL, SessionOptions, add_options, read_options
from ._plugin.results import REPORT_ATTR, junit_properties

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ._plugin.fixture import CrashpointsFixture
    from .servers import PostgresServer, RedisServer

MARKER_HELP = (
    "crashpoints(points='ABCDEF', *, providers=(), mode=None, max_examples=None, "
    "max_faults=None, timeout=None, start_method='fork', strict_coverage=None, expect=(), "
    "engine=None, faults=None): "
    "run this test's worker under crash schedules: real SIGKILLs at the points, recovery, "
    f"and the six invariants. See {DOCS_URL}reference.md#the-marker"
)

options_key = pytest.StashKey[SessionOptions]()
seed_key = pytest.StashKey[int]()
#: Where the session's seed came from, when not from a crashpoints option ("" otherwise).
seed_origin_key = pytest.StashKey[str]()
marker_key = pytest.StashKey[Any]()
fixture_key = pytest.StashKey[Any]()
#: Whether the test's call phase passed (a crash test that passed without running is an error).
call_passed_key = pytest.StashKey[bool]()
#: Where a running crash test reports its progress: the live lines of this process, or, in an
#: xdist worker, the file the controller reads.
progress_key = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from ._plugin import hooks

    pluginmanager.add_hookspecs(hooks)


@pytest.hookimpl(trylast=True)  # after the terminal reporter, which the progress lines need
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    options = read_options(config)
    config.stash[options_key] = options
    config.stash[seed_origin_key] = ""
    config.stash[seed_key] = _session_seed(config, options)
    from ._harness.storage import scratch

    scratch.configure(options.run_dir)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "crashpoints-xdist")
    _set_up_progress(config)
    if config.get_verbosity() > 0 and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_ScheduleListing(config), "crashpoints-listing")


def _set_up_progress(config: pytest.Config) -> None:
    """Live progress lines, only where someone watches: a terminal, not -q, not -s."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        folder = workerinput.get("crashpoints_progress")
        if folder:
            from ._plugin.progress import ProgressFile

            worker = str(workerinput.get("workerid", "worker"))
            config.stash[progress_key] = ProgressFile(
                Path(folder) / f"{worker}.json", worker=worker
            )
        return
    if (
        config.get_verbosity() < 0
        or config.getoption("capture", None) == "no"
        or config.getini("log_cli")
        or not config.pluginmanager.hasplugin("terminalreporter")
    ):
        return
    from ._plugin.progress import LiveLines, Progress, terminal_out

    try:
        out = terminal_out(sys.stdout.fileno())
    except (OSError, ValueError):  # a stdout with no file behind it (pytester in-process)
        out = None
    if out is None:
        return
    live = LiveLines(
        out,
        column=lambda: config.get_terminal_writer().width_of_current_line,
        width=lambda: config.get_terminal_writer().fullwidth,
    )
    config.stash[progress_key] = Progress(live)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_progress(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_progress(config)


def _documents(
    options: SessionOptions | None,
) -> list[tuple[str, str, str, Callable[[dict[str, Any]], str]]]:
    """The documents the session writes from its report besides the JSON: (path, what it
    is, its option, its renderer), for the options given."""
    out: list[tuple[str, str, str, Callable[[dict[str, Any]], str]]] = []
    if options is not None and options.html:
        from ._plugin.html import render_html

        out.append((options.html, "HTML report", "html", render_html))
    if options is not None and options.otel:
        from ._plugin.otel import render_otlp

        out.append((options.otel, "traces", "otel", render_otlp))
    return out


def _stop_progress(config: pytest.Config) -> None:
    progress = config.stash.get(progress_key, None)
    if progress is not None and hasattr(progress, "stop"):
        progress.stop()


def _session_seed(config: pytest.Config, options: SessionOptions) -> int:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "crashpoints_seed" in workerinput:
        return int(workerinput["crashpoints_seed"])
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    if options.seed == "last":
        last = cache.get("crashpoints/seed", None) if cache is not None else None
        if last is None:
            raise pytest.UsageError(
                "crashpoints: --crashpoints-seed=last, but no earlier run recorded a seed in "
                "the pytest cache; run once without it, or pass a number."
            )
        return int(last)
    replayed = _replay_seed(options)
    if isinstance(options.seed, int):
        seed = options.seed
    elif replayed is not None:
        # The printed replay command (pytest ... --crashpoints-replay=TOKEN) shows the seed
        # of the run it came from, as `crashpoints replay TOKEN` does.
        config.stash[seed_origin_key] = " (from the replay token)"
        seed = replayed
    else:
        forced = _hypothesis_seed(config)
        if forced is not None:
            config.stash[seed_origin_key] = " (from --hypothesis-seed)"
        elif options.shard is not None:
            raise pytest.UsageError(
                f"crashpoints: --crashpoints-shard={options.shard[0]}/{options.shard[1]} needs "
                "--crashpoints-seed=N, the same on every shard (the CI run's id, say): "
                "crashpoints merge takes the shards of one seed only."
            )
        seed = forced if forced is not None else random.Random().getrandbits(32)
    if cache is not None:
        cache.set("crashpoints/seed", seed)
    return seed


def _replay_seed(options: SessionOptions) -> int | None:
    """The seed a ``--crashpoints-replay`` token carries, if any (a bad token is refused
    later, with its one line, where the test runs)."""
    if not options.replay:
        return None
    from ._harness.search.token import read_token
    from .errors import CrashpointsError

    try:
        return read_token(options.replay).seed
    except CrashpointsError:
        return None


def _hypothesis_seed(config: pytest.Config) -> int | None:
    """``--hypothesis-seed``, as a crash-schedule seed (a whole number of 0 or more; any other
    value Hypothesis accepts is turned into one), or None when it was not given."""
    raw = config.getoption("hypothesis_seed", default=None)  # Hypothesis's plugin's option
    if raw is None:
        return None
    text = str(raw)
    if re.fullmatch(r"[0-9]+", text):
        return int(text)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


class _XdistHooks:
    """Registered only when pytest-xdist is there: the controller's seed goes to workers."""

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["crashpoints_seed"] = node.config.stash[seed_key]
        progress = node.config.stash.get(progress_key, None)
        if progress is not None and hasattr(progress, "follow_workers"):
            folder = progress.follow_workers(node.config.get_terminal_writer())
            if folder is not None:
                node.workerinput["crashpoints_progress"] = str(folder)


class _ScheduleListing:
    """Under -v: after each crash test's result, the schedules it ran with their verdicts."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        raw = getattr(report, REPORT_ATTR, None)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if report.when != "call" or not isinstance(raw, str) or reporter is None:
            return
        from ._plugin.summary import schedule_lines

        for line in schedule_lines(json.loads(raw).get("schedules") or []):
            reporter.write_line(f"    {line}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    from ._harness.storage import scratch

    lines = [
        f"Using --crashpoints-seed={config.stash[seed_key]}{config.stash[seed_origin_key]}",
        f"crashpoints: {scratch.describe()}; a failing case's files are kept under pytest's "
        "tmp_path (--basetemp)",
    ]
    shard = config.stash[options_key].shard
    if shard is not None and not config.stash[options_key].replay:
        lines.append(
            f"crashpoints: shard {shard[0]} of {shard[1]} of each crash test's schedules; "
            "coverage is judged on the merged report (crashpoints merge)"
        )
    return lines


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker("crashpoints")
        if marker is None:
            continue
        from ._plugin.marker import parse_marker
        from .errors import CrashpointsError

        try:
            item.stash[marker_key] = parse_marker(marker.args, dict(marker.kwargs))
        except CrashpointsError as exc:
            item.stash[marker_key] = f"crashpoints: bad marker on {item.nodeid}: {exc}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    parsed = item.stash.get(marker_key, None)
    if isinstance(parsed, str):
        pytest.fail(parsed, pytrace=False)


@pytest.fixture
def crashpoints(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CrashpointsFixture]:
    """Run this test's worker under crash schedules: ``crashpoints.run(worker=..., ...)``."""
    from ._plugin.fixture import CrashpointsFixture
    from ._plugin.marker import CrashMarker

    item = request.node
    parsed = item.stash.get(marker_key, None)
    if parsed is None:
        parsed = CrashMarker()
    fixture = CrashpointsFixture(
        nodeid=item.nodeid,
        marker=parsed,
        options=item.config.stash[options_key],
        seed=item.config.stash[seed_key],
        base_dir=tmp_path,
        hooked_invariants=tuple(
            check
            for checks in item.ihook.pytest_crashpoints_invariants(item=item)
            for check in checks or ()
        ),
        progress=item.config.stash.get(progress_key, None),
    )
    item.stash[fixture_key] = fixture
    yield fixture
    from ._process.handle import kill_live_workers

    kill_live_workers()
    if not (fixture.ran or fixture.consulted) and item.stash.get(call_passed_key, False):
        pytest.fail(
            f"crashpoints: {item.nodeid}: the test asked for the crashpoints fixture but never "
            "called crashpoints.run: it ran no crash case (call crashpoints.run(worker=..., "
            "messages=...), or drop the fixture).",
            pytrace=False,
        )


@pytest.fixture
def crashpoints_redis() -> Iterator[RedisServer]:
    """A private ``redis-server`` for this test, on a Unix socket (``.url``, ``.socket``),
    stopped after it; the test is skipped, saying what to install, where there is none."""
    from .servers import redis_server

    yield from _served(redis_server)


@pytest.fixture(scope="session")
def crashpoints_postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL server for the session, on a Unix socket (``.dsn(database)``,
    ``.create_database(name, template=...)``), stopped after it; the tests are skipped, saying
    what to install, where there is none."""
    from .servers import postgres_server

    yield from _served(postgres_server)


def _served(start: Callable[[], AbstractContextManager[Any]]) -> Iterator[Any]:
    from .errors import ServerError

    try:
        with start() as server:
            yield server
    except ServerError as exc:
        if exc.installed:
            raise
        pytest.skip(f"crashpoints: {exc}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.when == "call":
        item.stash[call_passed_key] = report.passed
    fixture = item.stash.get(fixture_key, None)
    if fixture is None or fixture.report is None:
        # No exploration report: a crash test that ended in an error is still reported.
        data = _error_data(item, call, report, fixture)
        if data is not None:
            data["outcome"] = report.outcome
            setattr(report, REPORT_ATTR, json.dumps(data))
            item.user_properties.extend(junit_properties(data, outcome=report.outcome))
        return report
    if call.when == "call":
        data = fixture.report.to_json()
        data["expect"] = list(fixture.marker.expect)
        # The gate holds a test to its coverage only if the test itself is strict.
        data["strict_coverage"] = bool(fixture.settings().strict_coverage)
        if fixture.marker.expect and report.passed:
            data["verdict"] = "caught"  # broken on purpose, and the harness found it
        setattr(report, REPORT_ATTR, json.dumps(data))
        # Taken into the JUnit XML from the teardown report, as record_property's are.
        item.user_properties.extend(junit_properties(data, outcome=report.outcome))
        if fixture.statistics is not None:
            # Hypothesis's plugin shows this under --hypothesis-show-statistics (and puts
            # it in the JUnit XML), as for a test of its own.
            item.hypothesis_statistics = fixture.statistics  # type: ignore[attr-defined]
    return report


def _error_data(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport, fixture: Any
) -> dict[str, Any] | None:
    """The report entry of a crash test (marked, or using the fixture) that ended in an error
    without an exploration report; None for any other test or phase."""
    marked = item.get_closest_marker("crashpoints") is not None
    if call.when not in ("setup", "call") or report.skipped or (not marked and fixture is None):
        return None
    from ._plugin.testerror import crash_test_error

    parsed = item.stash.get(marker_key, None)
    expect = [] if parsed is None or isinstance(parsed, str) else list(parsed.expect)
    excinfo = call.excinfo.value if call.excinfo is not None else None
    return crash_test_error(
        item.nodeid, when=call.when, passed=report.passed, exc=excinfo, fixture=fixture,
        expect=expect, seed=item.config.stash[seed_key],
    )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    from ._plugin.results import collect, report_document, write_report, write_text

    results = collect(terminalreporter)
    options = config.stash.get(options_key, None)
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    # A replay runs one schedule whatever the shard: its report is not a shard's.
    shard = options.shard if options is not None and options.replay is None else None
    if options is not None and options.report:
        try:
            write_report(
                Path(options.report),
                results,
                seed=config.stash[seed_key],
                interrupted=interrupted,
                shard=shard,
            )
        except OSError as exc:  # checked at start-up, but the disk may have changed since
            terminalreporter.write_line(
                f"crashpoints: could not write the report to {options.report!r}: "
                f"{exc.strerror or exc}; check --crashpoints-report.",
                red=True,
            )
    documents = _documents(options)
    if documents:
        document = report_document(
            results, seed=config.stash[seed_key], interrupted=interrupted, shard=shard
        )
    for path, what, option, render in documents:
        try:
            write_text(Path(path), render(document))
        except OSError as exc:
            terminalreporter.write_line(
                f"crashpoints: could not write the {what} to {path!r}: "
                f"{exc.strerror or exc}; check --crashpoints-{option}.",
                red=True,
            )
    if not results:
        return
    from ._plugin.summary import summary_lines

    terminalreporter.section("crashpoints")
    for line in summary_lines(results, seed=config.stash[seed_key]):
        terminalreporter.write_line(line)


