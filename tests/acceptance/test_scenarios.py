"""The bundled scenarios, run through the plugin: every deliberately broken agent is caught
with the invariant its bug breaks, and the good invoice-email scenario passes.

They run with ``--crashpoints-engine=compare``: every schedule on the states engine (crash
states constructed from stopped workers) and again the processes way (fresh processes, a
real SIGKILL at each point); any schedule where the two differ in verdict or end state fails
the test as a harness bug. ``make equivalence`` does the same for every bundled scenario.

Each scenario test runs in its own pytest subprocess with the plugin switched on (workers are
forked and killed), so xdist spreads them over the cores.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints import Authority, ProviderSpec, reference_recovery, reference_worker
from pytest_crashpoints.harness import Deliver, KillAt, Scenario, Schedule, run_case
from tests.conftest import run_reported

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

#: The classic recovery bugs the catalogue of broken agents must cover, by test name.
REQUIRED = {
    "test_blind_retry_after_a_crash",
    "test_random_idempotency_key_per_try",
    "test_dispatched_recorded_after_the_send",
    "test_http_200_taken_as_confirmation",
    "test_work_skipped_after_a_crash",
    "test_stale_authority_kept_by_recovery",
    "test_tenant_change_ignored_by_recovery",
    "test_recovery_dispatches_again_on_its_next_run",
    "test_unknown_left_without_an_owner",
    "test_duplicate_delivery_not_deduplicated",
    "test_lookup_timeout_taken_for_absent",
}


BROKEN_FILE = SCENARIOS / "broken" / "test_broken_agents.py"


def _declared_expectations() -> dict[str, tuple[int, ...]]:
    """Each broken-agent test and the ``expect=`` its decorator declares. Read from the
    source: importing it would apply the crashpoints marker, which this suite (plugin off,
    strict markers) does not know."""
    tree = ast.parse(BROKEN_FILE.read_text(encoding="utf-8"))
    found: dict[str, tuple[int, ...]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
            continue
        expect: tuple[int, ...] = ()
        for decorator in node.decorator_list:
            for keyword in getattr(decorator, "keywords", []):
                if keyword.arg == "expect":
                    value = ast.literal_eval(keyword.value)
                    expect = (value,) if isinstance(value, int) else tuple(value)
        found[node.name] = expect
    return found


EXPECT = _declared_expectations()
BROKEN = sorted(EXPECT)


def _run_scenario(
    pytester: pytest.Pytester, target: Path | str, *options: str
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run a bundled scenario file or test in a subprocess; its result and its tests'
    reports, by test name."""
    cache = f"cache_dir={pytester.path / '.cache'}"
    return run_reported(pytester, "-o", cache, *options, str(target))


def _run(pytester: pytest.Pytester, nodeid: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    result, tests = _run_scenario(pytester, nodeid, "--crashpoints-engine=compare")
    (test,) = tests.values()
    errors = (test["failure"] or {}).get("errors", [])
    assert not [e for e in errors if "harness bug" in e], errors
    assert test["engine"]["name"] == "compare"
    return result, test


def test_the_catalogue_covers_every_classic_bug() -> None:
    assert set(BROKEN) >= REQUIRED
    for name in BROKEN:
        assert EXPECT[name], f"{name} is not marked expect=..."


@pytest.mark.parametrize("name", BROKEN)
def test_broken_agent_is_caught_with_its_invariant(pytester: pytest.Pytester, name: str) -> None:
    result, test = _run(pytester, f"{BROKEN_FILE}::{name}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 crash test(s)*0 passed, 1 caught (broken on purpose)*"])
    # What the failing schedule broke, and what the schedules found after it did.
    failure = test["failure"]
    found = {*failure["invariants"], *(n for also in failure["also"] for n in also["invariants"])}
    assert set(EXPECT[name]) <= found, failure["violations"]
    assert failure["deterministic"]


def test_good_invoice_email_scenario_passes(pytester: pytest.Pytester) -> None:
    result, test = _run(
        pytester, f"{SCENARIOS / 'test_invoice_email.py'}::test_invoice_email_is_sent_exactly_once"
    )
    result.assert_outcomes(passed=1)
    assert test["verdict"] == "passed"
    assert test["failure"] is None
    assert not test["unreached"]
    # Every kind of fault was injected, and every kill was recovered from.
    assert {"A", "B", "C"} <= {p for p, row in test["coverage"].items() if row["killed"]}
    assert {"D", "E", "F"} <= {p for p, row in test["coverage"].items() if row["reached"]}


def test_reference_worker_keeps_later_calls_of_a_killed_message(tmp_path: Path) -> None:
    calls = [
        {
            "tool": "send_email",
            "key": "invoice:tenant-7:inv-7:send",
            "args": {"to": "billing@customer.example", "subject": "Invoice", "body": "120 EUR"},
        },
        {
            "tool": "open_ticket",
            "key": "invoice:tenant-7:inv-7:follow-up",
            "args": {"repo": "tenant-7/billing", "title": "Follow up", "body": "INV-7 sent"},
        },
    ]
    scenario = Scenario(
        worker=reference_worker,
        recover=reference_recovery,
        messages=({"task_id": "t-1", "calls": calls},),
        providers=(ProviderSpec("email"), ProviderSpec("tickets")),
        authorities={
            "t-1": Authority.of(
                tenant_id="tenant-7",
                credential_scope="email:read email:write tickets:read tickets:write",
                policy_version="p1",
            )
        },
    )
    golden = run_case(scenario, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert golden.passed
    result = run_case(
        scenario,
        Schedule((Deliver(0, KillAt("A", 1)),)),
        base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    assert result.passed, [str(v) for v in result.violations]


NODE_SCENARIO = SCENARIOS / "node" / "test_node_mailer.py"


def test_node_mailer_scenario_is_caught_at_b_and_its_fix_passes(pytester: pytest.Pytester):
    """The bundled Node.js scenario, as the gate runs it (strict coverage): the broken mailer
    is caught by invariant 1 with a kill at B, the fixed one passes with every check."""
    import shutil

    if shutil.which("node") is None:
        pytest.skip(
            "node is not installed: the Node.js scenario cannot run (apt-get install nodejs)"
        )
    result, tests = _run_scenario(pytester, NODE_SCENARIO, "--crashpoints-strict-coverage")
    result.assert_outcomes(passed=2)
    fixed = tests["test_a_half_done_job_is_parked_not_sent_again"]
    assert fixed["verdict"] == "passed" and not fixed["unchecked"] and not fixed["unkilled"]
    assert {p for p, row in fixed["coverage"].items() if row["killed"]} == {"A", "B", "C"}
    broken = tests["test_a_job_sent_then_marked_is_sent_twice"]
    assert broken["verdict"] == "caught"
    assert broken["failure"]["schedule_text"] == "deliver message 0, kill at B (hit 1)"
    assert 1 in broken["failure"]["invariants"] and broken["failure"]["deterministic"]


CELERY_SCENARIO = SCENARIOS / "celery_worker" / "test_celery_mailer.py"


def test_celery_worker_redelivered_by_its_broker_is_caught_and_its_fix_passes(
    pytester: pytest.Pytester,
) -> None:
    """The bundled Celery scenario: the broker's own redelivery after a real kill shows in the
    timeline; the task that is not idempotent is caught by invariant 1 with a kill at B, the
    one that parks a half-done job passes, on the processes engine its marker asks for."""
    import importlib.util
    import shutil

    missing = [
        what
        for what, ok in [
            ("redis-server (apt-get install redis-server)", shutil.which("redis-server")),
            ("celery (pip install 'celery[redis]')", importlib.util.find_spec("celery")),
        ]
        if not ok
    ]
    if missing:
        pytest.skip(f"the Celery scenario cannot run without {', '.join(missing)}")
    result, tests = _run_scenario(pytester, CELERY_SCENARIO, "--crashpoints-engine=states")
    result.assert_outcomes(passed=2)
    fixed = tests["test_a_task_that_parks_a_half_done_job_survives_redelivery"]
    assert fixed["verdict"] == "passed" and fixed["coverage"]["B"]["killed"]
    assert fixed["engine"]["name"] == "processes"
    broken = tests["test_a_task_that_is_not_idempotent_mails_twice_on_redelivery"]
    assert broken["verdict"] == "caught"
    assert broken["failure"]["schedule_text"] == "deliver message 0, kill at B (hit 1)"
    assert broken["failure"]["invariants"] == [1]
    assert "worker-2 stdout: celery task" in broken["failure"]["timeline"]
    assert "job job-7 redelivered by the broker" in broken["failure"]["timeline"]


def test_an_sdk_retry_after_a_lost_answer_is_caught_by_the_lost_answer_alone(
    pytester: pytest.Pytester,
) -> None:
    """``faults=["lose_response"]``: no kill is tried, so what catches PyGithub's default
    retry of a create is the lost answer itself, the worker alive."""
    pytest.importorskip("github", reason="PyGithub is a dev dependency")
    result, tests = _run_scenario(
        pytester, SCENARIOS / "broken" / "test_ticket_opener.py", "-k", "sdk_retries"
    )
    result.assert_outcomes(passed=1, deselected=1)
    [test] = tests.values()
    assert test["verdict"] == "caught" and 1 in test["failure"]["invariants"]
    assert "the answer is lost" in test["failure"]["schedule_text"]
    assert "kill" not in test["failure"]["schedule_text"]
    assert test["schedules"], "the report lists the cases it ran"
    assert all("kill" not in run["schedule_text"] for run in test["schedules"])


#: The scenarios of queues, engines and storage faults: each file (or the tests ``-k`` picks
#: in it), what it needs, and the verdict of each of its tests. (The passing twins of DBOS's
#: charger, ~25 s, and of the Pydantic AI agents, a minute or more each, the order charger's
#: storage faults, run by tests/cases/test_power_loss.py's mechanics, and the renewal
#: charger's fix from its incidents, swept by tests/cases/test_incident*.py, are left to
#: ``make gate``.)
REACH = [
    ("rq_worker/test_rq_mailer.py", "", ("redis-server", "rq"), {
        "test_a_job_with_retries_is_run_again_by_rq_and_parked": "passed",
        "test_rqs_default_fails_an_abandoned_job_for_good": "caught",
    }),
    ("test_huey_mailer.py", "", ("huey",), {
        "test_lost_jobs_enqueued_again_at_startup_survive_every_kill": "passed",
    }),
    ("broken/test_huey_mailer.py", "", ("huey",), {
        "test_hueys_default_loses_the_task_of_a_killed_worker": "caught",
    }),
    ("dramatiq_worker/test_dramatiq_mailer.py", "", ("redis-server", "dramatiq"), {
        "test_an_actor_that_parks_a_half_done_job_survives_redelivery": "passed",
        "test_an_actor_that_is_not_idempotent_mails_twice_on_redelivery": "caught",
    }),
    ("procrastinate_worker/test_procrastinate_mailer.py", "", ("initdb", "procrastinate"), {
        "test_stalled_jobs_retried_by_a_periodic_task_survive_a_kill": "passed",
        "test_procrastinates_default_leaves_a_killed_workers_job_doing": "caught",
    }),
    ("broken/test_dbos_charger.py", "", ("dbos", "dbos-sqlite"), {
        "test_a_step_without_a_key_charges_again_when_dbos_recovers_it": "caught",
    }),
    ("broken/test_pydantic_ai.py", "", ("pydantic_ai",), {
        "test_a_refund_without_a_key_is_made_again_when_the_ticket_comes_back": "caught",
    }),
    ("broken/test_pydantic_ai_dbos.py", "", ("pydantic_ai", "dbos-sqlite"), {
        "test_a_refund_step_without_a_key_refunds_again_when_dbos_recovers_it": "caught",
    }),
    ("test_approval_graph.py", "", ("langgraph",), {
        "test_an_approved_refund_is_made_once_across_crashes": "passed",
    }),
    ("broken/test_approval_graph.py", "", ("langgraph",), {
        "test_a_resumed_node_refunds_again_after_a_kill": "caught",
    }),
    ("test_outbox_relay.py", "", (), {
        "test_each_event_reaches_the_consumer_once": "passed",
    }),
    ("broken/test_renewal_charger.py", "", (), {
        "test_the_november_incident_charges_again": "caught",
        "test_the_june_2024_incident_recovered_alone_charges_again": "caught",
    }),
    ("broken/test_outbox_relay.py", "", (), {
        "test_a_relay_killed_between_publish_and_mark_publishes_twice": "caught",
    }),
    ("broken/test_jobs_mailer.py", "power or backup", (), {
        "test_a_pending_row_lost_with_the_power_is_sent_again": "caught",
        "test_a_job_forgotten_by_a_restored_backup_is_sent_again": "caught",
    }),
    ("test_jobs_mailer.py", "power", (), {
        "test_with_sqlites_default_sync_a_power_loss_is_a_kill": "passed",
    }),
    ("test_journal_mailer.py", "", (), {
        "test_a_line_torn_by_the_power_is_cut_and_the_job_mailed_once": "passed",
    }),
    ("broken/test_journal_mailer.py", "", (), {
        "test_a_reader_that_refuses_a_torn_line_never_starts_again": "caught",
    }),
    ("broken/test_jobs_mailer.py", "failed_commit", (), {
        "test_a_failed_commit_logged_then_sent_and_killed_is_sent_twice": "caught",
    }),
    ("test_django_mailer.py", "", ("django", "aiosmtpd"), {
        "test_a_claimed_job_is_parked_never_sent_twice": "passed",
    }),
    ("broken/test_django_mailer.py", "", ("django", "aiosmtpd"), {
        "test_a_job_sent_then_marked_is_sent_twice": "caught",
    }),
    ("test_django_mailer_pg.py", "", ("initdb", "psycopg", "django", "aiosmtpd"), {
        "test_on_postgres_a_claimed_job_is_parked_never_sent_twice": "passed",
    }),
    ("broken/test_django_mailer_pg.py", "", ("initdb", "psycopg", "django", "aiosmtpd"), {
        "test_on_postgres_a_job_sent_then_marked_is_sent_twice": "caught",
    }),
    ("stdin_mailer/test_stdin_mailer.py", "", (), {
        "test_a_job_survives_kills_power_loss_and_failed_commits": "passed",
        "test_a_failed_commit_then_a_kill_is_survived_too": "passed",
        "test_a_pending_row_not_synced_is_lost_with_the_power_and_sent_again": "caught",
        "test_a_failed_commit_logged_then_sent_and_killed_is_sent_twice": "caught",
    }),
    ("test_intent_charger.py", "default_sync", ("stripe",), {
        "test_with_sqlites_default_sync_the_pending_row_survives": "passed",
    }),
    ("broken/test_intent_charger.py", "", ("stripe",), {
        "test_an_unsynced_pending_row_lost_to_a_power_loss_charges_twice": "caught",
    }),
]


@pytest.mark.parametrize(
    ("target", "pick", "needs", "verdicts"), REACH, ids=[f"{t}[{k}]" for t, k, _, _ in REACH]
)
def test_queue_engine_and_storage_scenarios_pass_and_their_broken_twins_are_caught(
    pytester: pytest.Pytester, target: str, pick: str, needs: tuple[str, ...],
    verdicts: dict[str, str],
) -> None:
    """A queue's own redelivery (or loss) of a killed worker's job, a durable engine's own
    recovery, a power loss (a line torn between its write and its sync too) and a restored
    backup: each good scenario passes, each broken one is caught, as the gate runs them."""
    import importlib.util
    import shutil

    from pytest_crashpoints.servers import find_postgres_bin

    def there(what: str) -> bool:
        if what == "initdb":
            return find_postgres_bin() is not None
        if what == "dbos-sqlite":
            # DBOS on Python 3.12+ writes its system database with unixepoch('subsec'),
            # which SQLite has from 3.42 on: with an older SQLite, DBOS.launch() fails.
            import sqlite3
            import sys

            return sys.version_info < (3, 12) or sqlite3.sqlite_version_info >= (3, 42)
        if what == "redis-server":
            return shutil.which(what) is not None
        return importlib.util.find_spec(what) is not None

    missing = [what for what in needs if not there(what)]
    if missing:
        pytest.skip(f"{target} cannot run without {', '.join(missing)}"
                    + (" (SQLite 3.42 or later under Python 3.12+)" if "dbos-sqlite" in missing
                       else ""))
    options = ("-k", pick) if pick else ()
    result, tests = _run_scenario(pytester, SCENARIOS / target, *options)
    assert {name: test["verdict"] for name, test in tests.items()} == verdicts, result.outlines


def test_a_mailer_that_waits_out_the_search_lag_passes_and_its_hasty_twin_is_caught(
    pytester: pytest.Pytester,
) -> None:
    """After a lost answer the mailer waits 31 s (time.sleep, asyncio.sleep) and looks its
    mail up again: each wait is skipped and moves the case's clock, so the search (30 s
    behind) shows the mail. The twin that looks at once sends it twice."""
    result, tests = _run_scenario(pytester, SCENARIOS / "test_patient_mailer.py")
    assert {name: test["verdict"] for name, test in tests.items()} == {
        "test_a_mailer_that_waits_out_the_lag_mails_once": "passed",
        "test_the_async_mailer_that_waits_out_the_lag_mails_once": "passed",
    }, result.outlines
    for test in tests.values():
        # One 31 s wait per lost answer (reset, timeout, 502), none of it real.
        assert test["waits"] == {"skipped": 93.0, "real": 0.0, "world": 0.0, "waits": 3}
    result, tests = _run_scenario(pytester, SCENARIOS / "broken" / "test_patient_mailer.py")
    assert [test["verdict"] for test in tests.values()] == ["caught", "caught"], result.outlines
    assert all(test["failure"]["invariants"] == [1] for test in tests.values())


def test_the_django_mailer_on_postgres_survives_a_second_delivery_while_the_first_commits(
    pytester: pytest.Pytester,
) -> None:
    """The first delivery held at its claim's commit (its row locked, the claim not yet
    committed) while a second runs: the second's ``select_for_update(nowait=True)`` fails at
    once and its message comes back, so the job is mailed once. A claim read without the lock
    waits on the first's row lock until it is timed out (the verdict ``error``)."""
    import importlib.util

    from pytest_crashpoints.harness import replay_token
    from pytest_crashpoints.servers import find_postgres_bin

    if find_postgres_bin() is None or not all(
        importlib.util.find_spec(name) for name in ("psycopg", "django", "aiosmtpd")
    ):
        pytest.skip("the Django mailer on PostgreSQL needs PostgreSQL, psycopg, Django, aiosmtpd")
    held_in_the_claim = Schedule((Deliver(0, duplicate="concurrent", pause_at="db.commit"),))
    result, tests = _run_scenario(
        pytester, SCENARIOS / "test_django_mailer_pg.py", "--crashpoints-timeout=30",
        f"--crashpoints-replay={replay_token(held_in_the_claim)}",
    )
    (test,) = tests.values()
    assert test["verdict"] == "passed", result.outlines
