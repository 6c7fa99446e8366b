"""The ``crashpoints`` fixture: what a crash test calls.

::

    @pytest.mark.crashpoints(points="ABCDEF", providers=["email"])
    def test_invoice_email_survives_crashes(crashpoints):
        crashpoints.run(worker=agent.handle, recover=agent.recover,
                        messages=[{"task_id": "t-1", "invoice": "inv-7"}])

``run`` explores crash schedules in real subprocesses and fails the test with a replayable
report when an invariant breaks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._ledger.authority import Authority
from .marker import CrashMarker

if TYPE_CHECKING:
    from fake_providers import Script

    from .._harness.case.context import Context, ProviderSpec
    from .._harness.case.incident import Incident
    from .._harness.case.scenario import CaseDatabase, Scenario
    from .._harness.search.explore import CaseRaised, CrashSettings
    from .._harness.search.findings import ExplorationReport
    from .._harness.storage.agent_redis import RedisConfig
    from .._harness.verdict.invariants import Invariant
    from .._ledger.views import LedgerView
    from .options import SessionOptions

__all__ = ["CrashpointsFixture"]


def default_authorities(
    messages: Sequence[Mapping[str, Any]], providers: Iterable[ProviderSpec]
) -> dict[str, Authority]:
    """Each message's task acts for ``message["tenant"]`` (default ``tenant-1``) with every
    scope of every provider of the test (``<name>:read`` and ``<name>:write``), under policy
    ``p1``."""
    scope = sorted({scope for spec in providers for scope in spec.scopes})
    authorities: dict[str, Authority] = {}
    for message in messages:
        task = message.get("task_id") if isinstance(message, Mapping) else None
        if isinstance(task, str) and task not in authorities:
            tenant = str(message.get("tenant", "tenant-1"))
            authorities[task] = Authority.of(
                tenant_id=tenant, credential_scope=scope, policy_version="p1"
            )
    return authorities


def _recovery_alone(
    worker: Callable[[Any, Context], object] | None,
    recover: Callable[[Context], object] | None,
    command: Sequence[str] | None,
    recover_command: Sequence[str] | None,
    incident: Incident | None,
) -> Callable[[Any, Context], object] | None:
    """The worker of a test with no messages: only an incident's recovery runs there (the
    stand-in worker is never delivered to). Raises :class:`CrashpointsError` for a test
    with nothing to run."""
    from .._harness.case.incident import no_worker
    from ..errors import CrashpointsError

    if incident is None:
        raise CrashpointsError(
            "messages= is empty: nothing would be delivered. Give the messages the worker "
            "handles, or an incident= whose recovery alone is to be tested."
        )
    if recover is None and recover_command is None:
        raise CrashpointsError(
            "an incident with no messages is reproduced by its recovery alone, and the test "
            "has none: pass recover= (or recover_command=), or the messages to redeliver."
        )
    if worker is None and command is None:
        return no_worker
    return worker


def _workers(
    worker: Callable[[Any, Context], object] | None,
    recover: Callable[[Context], object] | None,
    command: Sequence[str] | None,
    recover_command: Sequence[str] | None,
    messages: Sequence[Mapping[str, Any]],
) -> tuple[Callable[[Any, Context], object], Callable[[Context], object] | None]:
    """The worker and recovery functions of ``run``'s arguments: a command becomes the
    bridge that runs it. Raises :class:`CrashpointsError` for a choice that is not one."""
    from .._harness.case.bridge import CommandRecovery, CommandWorker, message_json
    from ..errors import CrashpointsError

    if worker is not None and command is not None:
        raise CrashpointsError(
            "pass worker= (a Python function) or command= (a program), not both."
        )
    if recover is not None and recover_command is not None:
        raise CrashpointsError(
            "pass recover= (a Python function) or recover_command= (a program), not both."
        )
    if command is not None:
        worker = CommandWorker(command)
        for index, message in enumerate(messages):
            message_json(message, index=index)
    if worker is None:
        raise CrashpointsError(
            "pass worker= (a function of (message, ctx)) or command= (a program and its "
            "arguments, e.g. ['node', 'worker.js']): the test has nothing to run."
        )
    if recover_command is not None:
        recover = CommandRecovery(recover_command)
    return worker, recover


@dataclasses.dataclass
class CrashpointsFixture:
    """Runs the test's worker under crash schedules. Created per test by the plugin."""

    nodeid: str
    marker: CrashMarker
    options: SessionOptions
    seed: int | None
    base_dir: Path
    report: ExplorationReport | None = None
    #: Invariants of your own from the ``pytest_crashpoints_invariants`` hook.
    hooked_invariants: tuple[Invariant, ...] = ()
    #: Hypothesis's statistics of the exploration, in its own words (None if it did not run).
    statistics: str | None = None
    #: Where progress goes after each case (live lines, or an xdist worker's file); ``None``:
    #: nowhere.
    progress: Any = None
    #: Whether ``run`` was called, and whether the test read its settings (a test of the
    #: settings that runs nothing on purpose).
    ran: bool = False
    consulted: bool = False
    #: The exploration report so far (kept when ``run`` ends in an error midway).
    partial: ExplorationReport | None = None
    #: What ``run`` raised instead of returning, and whose code raised it (``origin_of``).
    error: BaseException | None = None
    error_origin: tuple[str, str | None] | None = None

    def settings(self) -> CrashSettings:
        """This test's settings: its marker over the session's options."""
        from .settings import resolve

        self.consulted = True

        return resolve(self.marker, self.options, seed=self.seed)

    def run(
        self,
        *,
        worker: Callable[[Any, Context], object] | None = None,
        recover: Callable[[Context], object] | None = None,
        command: Sequence[str] | None = None,
        recover_command: Sequence[str] | None = None,
        messages: Sequence[Mapping[str, Any]] = (),
        authorities: Mapping[str, Authority] | None = None,
        ledger_view: Callable[[Context], LedgerView] | None = None,
        transport_points: Sequence[str] = (),
        reference_messages: Sequence[Mapping[str, Any]] | None = None,
        invariants: Sequence[Invariant] = (),
        model: Script | None = None,
        setup: Callable[[Context], object] | None = None,
        incident: Incident | None = None,
        databases: Sequence[CaseDatabase] = (),
        redis: object = None,
    ) -> ExplorationReport:
        """Explore crash schedules of ``worker`` on ``messages``; fail the test on a violation.

        ``worker(message, ctx)`` handles one message in a worker process; ``recover(ctx)`` runs
        recovery in its own process (leave it out if the agent has none: the queue's redelivery
        of a dead worker's message is then all that finishes the work). ``command`` (a program
        and its arguments, in any language) instead of ``worker`` handles each message, given
        as JSON on its standard input; ``recover_command`` instead of ``recover`` is recovery
        as a program (docs/howto-any-language.md). ``authorities`` maps
        each task to its initial authority (default: see :func:`default_authorities`).
        ``ledger_view(ctx)`` reads your own ledger (default: the reference ledger).
        ``transport_points`` lets the HTTP transport fire B and C (for workers that do not call
        ``crashpoint`` themselves). ``reference_messages`` (the same work, as messages for
        :func:`reference_worker`) turns on the differential check: every schedule also runs on
        the reference worker, and the report lists where the final outcomes differ.
        ``invariants`` are invariants of your own (functions of the case's evidence that
        return the violations they find), checked after the six on every case, as are those
        of the ``pytest_crashpoints_invariants`` hook.
        ``model`` is the :class:`fake_providers.Script` the ``model`` provider answers from
        (required when the marker names it). ``setup(ctx)`` runs in the harness before each
        case, as the harness: it creates what the agent's tools expect to find at the
        providers (the charge a support agent refunds); its requests are not the agent's.
        ``incident`` starts every case from a state production was left in: its ledger and
        the providers' exported objects (:class:`~pytest_crashpoints.Incident`,
        docs/howto-incident.md). With an incident and no ``messages`` (the worker long
        dead, nothing to redeliver), the recovery alone is run and crashed: ``worker`` may be
        left out, and each task of the incident's ledger gets an authority (the one its row
        records, when the view reads one) unless ``authorities`` gives them.
        ``databases`` are databases made fresh for each case in a database server and dropped
        after it (``crashpoints_postgres.case_database(schema=...)``, docs/howto-postgres.md);
        a test with one runs every case from its start (the processes engine).
        ``redis`` gives each case a ``redis-server`` of its own at ``ctx.redis_url``:
        ``True`` (Redis's default persistence, RDB snapshots) or the ``redis.conf``
        directives of production (``{"appendonly": "yes", "appendfsync": "everysec"}``); a
        power loss restarts it on what its files keep (docs/howto-redis.md).

        Returns the report when every schedule passed (or, with ``expect=``, when the
        expected violation was caught).
        """
        from .._harness.search.explore import CaseRaised
        from ..errors import CrashpointsError

        self._mark_ran()
        try:  # pytest.fail (a verdict, a set-up mistake) is no Exception: it goes up as is
            return self._run(
                reference_messages,
                worker=worker, recover=recover, command=command, recover_command=recover_command,
                messages=messages, authorities=authorities, ledger_view=ledger_view, model=model,
                transport_points=transport_points, invariants=invariants, setup=setup,
                incident=incident, databases=databases, redis=redis,
            )
        except CaseRaised as exc:
            raise self._case_raised(exc) from None
        except CrashpointsError:
            raise
        except Exception as exc:
            self._note_error(exc, cause=exc)
            raise

    def _mark_ran(self) -> None:
        """Note that ``run`` was called; fail the test if it already was."""
        if self.ran:
            raise pytest.fail.Exception(
                f"crashpoints: {self.nodeid}: crashpoints.run was already called in this test; "
                "call it once per test (put several messages in one run, or write one test "
                "per scenario).",
                pytrace=False,
            )
        self.ran = True

    def _case_raised(self, exc: CaseRaised) -> BaseException:
        """Note the error of a case that raised (whose code it was is its cause's), and return
        the failure that says it in one line, with its schedule and replay command."""
        self._note_error(exc, cause=exc.__cause__ or exc)
        return pytest.fail.Exception(f"crashpoints: {self.nodeid}: {exc}", pytrace=False)

    def _note_error(self, exc: BaseException, *, cause: BaseException) -> None:
        """Keep what ``run`` raised, and whose code raised ``cause`` (``origin_of``)."""
        from .testerror import origin_of

        self.error = exc
        self.error_origin = origin_of(cause)

    def _run(
        self, reference_messages: Sequence[Mapping[str, Any]] | None, **scenario_args: Any
    ) -> ExplorationReport:
        """Build the test's scenario (from ``_scenario``'s arguments), explore its schedules,
        and conclude: the report, or ``pytest.fail`` with what the test found."""
        from ..errors import CrashpointsError

        try:
            scenario = self._scenario(**scenario_args)
            reference = _reference(scenario, reference_messages)
            settings = self._settings_of(scenario)
        except CrashpointsError as exc:
            # A mistake in how the test is set up: one line that says what to do.
            # "from None": the one line, not the harness's exception chained to it.
            message = f"crashpoints: {self.nodeid}: {exc}"
            raise pytest.fail.Exception(message, pytrace=False) from None
        self.report = self._explore(scenario, settings, reference)
        return self._conclude(self.report, settings)

    # -- building the world --------------------------------------------------------------

    def _scenario(
        self,
        *,
        worker: Callable[[Any, Context], object] | None,
        recover: Callable[[Context], object] | None,
        command: Sequence[str] | None,
        recover_command: Sequence[str] | None,
        messages: Sequence[Mapping[str, Any]],
        authorities: Mapping[str, Authority] | None,
        ledger_view: Callable[[Context], LedgerView] | None,
        transport_points: Sequence[str],
        invariants: Sequence[Invariant],
        model: Script | None,
        setup: Callable[[Context], object] | None,
        incident: Incident | None,
        databases: Sequence[CaseDatabase] = (),
        redis: object = None,
    ) -> Scenario:
        """The scenario of ``run``'s arguments under this test's marker. Raises
        :class:`CrashpointsError` for a test set up wrong."""
        from .._harness.case.scenario import Scenario
        from ..errors import CrashpointsError

        providers = self.marker.providers
        if not providers:
            raise CrashpointsError(
                "the crashpoints marker names no providers; add e.g. "
                "providers=['email'] so the harness knows which fake providers to run."
            )
        if not messages:
            worker = _recovery_alone(worker, recover, command, recover_command, incident)
            if authorities is None:
                from .._harness.case.incident import recovery_authorities

                assert incident is not None
                authorities = recovery_authorities(
                    incident, ledger_view, providers, self.base_dir
                )
        worker, recover = _workers(worker, recover, command, recover_command, messages)
        scenario = Scenario(
            worker=worker,
            recover=recover,
            messages=tuple(messages),
            providers=providers,
            authorities=dict(authorities or default_authorities(messages, providers)),
            ledger_view=ledger_view,
            transport_points=tuple(transport_points),
            timeout=self.marker.timeout or self.options.timeout,
            start_method=self.marker.start_method,  # type: ignore[arg-type]
            invariants=(*self.hooked_invariants, *invariants),
            model=model,
            setup=setup,
            incident=incident,
            databases=tuple(databases),
            redis=_agent_redis(redis),
        )
        self._check_expected_names(scenario)
        return scenario

    def _check_expected_names(self, scenario: Scenario) -> None:
        """Raises :class:`CrashpointsError` if ``expect=`` names an invariant of the test's
        own that the scenario does not have."""
        from .._harness.verdict.invariants import invariant_name
        from ..errors import CrashpointsError

        named = {invariant_name(check) for check in scenario.invariants}
        unknown = [n for n in self.marker.expect if isinstance(n, str) and n not in named]
        if unknown:
            raise CrashpointsError(
                f"expect={list(self.marker.expect)!r} names {', '.join(map(repr, unknown))}, "
                f"which is not an invariant of this test (its own: "
                f"{', '.join(sorted(named)) or 'none'}); pass it in invariants=."
            )

    def _settings_of(self, scenario: Scenario) -> CrashSettings:
        """This test's settings; raises :class:`CrashpointsError` if the replay token they
        give names a message the scenario does not have."""
        from .._harness.search.token import check_messages, read_token

        settings = self.settings()
        if settings.replay is not None:
            check_messages(read_token(settings.replay).schedule, len(scenario.messages))
        return settings

    # -- exploring -----------------------------------------------------------------------

    def _explore(
        self, scenario: Scenario, settings: CrashSettings, reference: Scenario | None
    ) -> ExplorationReport:
        """Run the test's schedules, noting Hypothesis's statistics and showing progress.
        The harness unable to run the test as set up fails it in one line; a case that
        raised (:class:`CaseRaised`) goes up as it is."""
        from hypothesis.statistics import collector, describe_statistics

        from .._harness.search.explore import CaseRaised, explore
        from ..errors import CrashpointsError

        def note_statistics(stats: Any) -> None:
            # The first search's: the searches after a failure (for the other invariants it
            # breaks) are Hypothesis runs too, and would each replace it.
            if self.statistics is None:
                stats["nodeid"] = self.nodeid
                self.statistics = describe_statistics(stats)

        try:
            with collector.with_value(note_statistics):  # type: ignore[arg-type]
                return explore(
                    scenario,
                    settings,
                    base_dir=self.base_dir,
                    nodeid=self.nodeid,
                    reference=reference,
                    on_case=self._on_case(),
                )
        except CrashpointsError as exc:
            if isinstance(exc, CaseRaised):
                raise
            # The harness could not run the test as set up (e.g. a worker that cannot cross to
            # a spawned process): one line that says what to do, not the harness's traceback.
            # "from None": the one line, not the harness's exception chained to it.
            message = f"crashpoints: {self.nodeid}: {exc}"
            raise pytest.fail.Exception(message, pytrace=False) from None
        finally:
            if self.progress is not None:
                self.progress.finish(self.nodeid)

    def _on_case(self) -> Callable[[ExplorationReport], None]:
        """What runs after each case: the report so far is kept (for a run that ends in an
        error midway), and progress shown."""
        progress = self._progress()

        def on_case(report: ExplorationReport) -> None:
            self.partial = report
            if progress is not None:
                progress(report)

        return on_case

    def _progress(self) -> Callable[[ExplorationReport], None] | None:
        """Show this test's progress now, and return what shows it after each case."""
        if self.progress is None:
            return None
        from .progress import progress_state

        progress = self.progress
        started = time.time()

        def on_case(report: ExplorationReport) -> None:
            progress.update(
                progress_state(
                    self.nodeid,
                    done=report.cases,
                    planned=report.planned,
                    reached=report.reached,
                    failed=any(run.verdict != "passed" for run in report.schedules),
                    started=started,
                )
            )

        progress.update(
            progress_state(
                self.nodeid, done=0, planned=0, reached={}, failed=False, started=started
            )
        )
        return on_case

    # -- concluding ----------------------------------------------------------------------

    def _conclude(self, report: ExplorationReport, settings: CrashSettings) -> ExplorationReport:
        """The verdict on ``report``: returned when the test passed (or caught what it
        expected), else ``pytest.fail`` with why."""
        from .._harness.search.findings import render_failure

        if report.failure is not None and (
            report.failure.disagreement is not None or report.failure.origin is not None
        ):
            # A harness bug, a case cut short by a timeout, or one that reached past the
            # simulated world fails the test whatever it expected: none says anything about
            # the agent.
            pytest.fail(render_failure(report), pytrace=False)
        if self.marker.expect:
            self._check_caught(report)
            return report
        if report.failure is not None:
            pytest.fail(render_failure(report), pytrace=False)
        # A shard runs a part of the schedules: coverage is judged on the merged report.
        if settings.strict_coverage and settings.replay is None and settings.shard is None:
            self._check_coverage(report)
        return report

    def _check_caught(self, report: ExplorationReport) -> None:
        """Fail the test unless ``report`` broke every invariant it expected broken."""
        from .._harness.search.findings import render_failure
        from .._harness.verdict.invariants import invariant_key

        expected = self.marker.expect
        # What the failing schedule broke, and what the rest of the budget found after it.
        found = set(report.failure.every_invariant) if report.failure else set()
        if not set(expected) <= found:
            stopped = (
                " The failing schedule and the schedules found after it broke only these: "
                "a larger budget (max_examples=, max_faults=, more points) may find the rest, "
                "or give each other bug a test of its own."
                if found
                else ""
            )
            pytest.fail(
                f"crashpoints: the deliberately broken agent of {self.nodeid} was not "
                f"caught: expected a violation of invariant(s) {list(expected)}, found "
                f"{sorted(found, key=invariant_key) or 'none'} in {report.cases} case(s)."
                f"{stopped}\n" + render_failure(report),
                pytrace=False,
            )

    def _check_coverage(self, report: ExplorationReport) -> None:
        """Fail the test (strict coverage) if ``report`` left a declared point unreached or
        unkilled, or an invariant unchecked."""
        gaps = _coverage_gaps(report)
        if gaps:
            pytest.fail(
                f"crashpoints: {self.nodeid} (strict coverage) in {report.cases} case(s): "
                + "; ".join(gaps)
                + ". A test that never kills at a point, or cannot check an invariant, "
                "proves nothing about it: reach and kill the points (or drop them from "
                "points=), and read the columns the checks need in your ledger view.",
                pytrace=False,
            )


def _reference(
    scenario: Scenario, reference_messages: Sequence[Mapping[str, Any]] | None
) -> Scenario | None:
    """The scenario of the differential check: the same world, the reference worker and
    recovery on ``reference_messages`` (``None``: no check)."""
    if reference_messages is None:
        return None
    from .._harness.case.reference import reference_recovery, reference_worker

    return dataclasses.replace(
        scenario,
        worker=reference_worker,
        recover=reference_recovery,
        messages=tuple(reference_messages),
        ledger_view=None,
        transport_points=(),
    )


def _coverage_gaps(report: ExplorationReport) -> list[str]:
    """What strict coverage holds against ``report``, in words (empty: nothing)."""
    gaps = [
        f"point(s) {', '.join(report.unreached)} declared but never reached"
        if report.unreached
        else "",
        f"point(s) {', '.join(report.unkilled)} reached but never killed (no kill "
        "scheduled there took effect)"
        if report.unkilled
        else "",
        *(f"not checked: {line}" for line in report.unchecked),
        *(f"{', '.join(points)}: {why}" for why, points in _by_reason(report.out_of_reach)),
    ]
    return [gap for gap in gaps if gap]


def _by_reason(reasons: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """Points by the reason they share, in the order first given."""
    grouped: dict[str, list[str]] = {}
    for point, why in reasons.items():
        grouped.setdefault(why, []).append(point)
    return list(grouped.items())


def _agent_redis(value: object) -> RedisConfig | None:
    """``redis=`` of ``run`` as the scenario's :class:`RedisConfig`. Raises
    :class:`CrashpointsError` for a value that is not one, or when ``redis-server`` is not
    installed."""
    from .._harness.storage.agent_redis import RedisConfig
    from .._servers.redis_server import INSTALL, find_redis_server
    from ..errors import CrashpointsError

    config = RedisConfig.of(value)
    if config is not None and find_redis_server() is None:
        raise CrashpointsError(f"redis= needs redis-server, which is not on PATH; {INSTALL}.")
    return config
