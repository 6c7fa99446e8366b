"""Whose each object of an incident is (``provenance.read_objects``): only on evidence, a row
of the incident's ledger that names it, the export, or a task the object itself names
(Stripe's metadata, SendGrid's custom args, a GitHub issue's labels, title or body). An
object that names another task is that task's history; one that names none is history of
no task, however few tasks the test has."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fake_providers import Exported
from pytest_crashpoints import (
    Authority,
    Context,
    Incident,
    ProviderSpec,
    SQLiteLedgerView,
    State,
)
from pytest_crashpoints._harness.case.incident import recovery_authorities
from pytest_crashpoints._harness.case.provenance import Reading, read_objects
from pytest_crashpoints._ledger.records import Attempt


def _charge(object_id: str, **metadata: str) -> Exported:
    return Exported("charge", object_id, "charges.create", {"metadata": metadata},
                    aliases=(object_id,))


def _row(task: str, *, state: State = State.OUTCOME_CONFIRMED, **links: Any) -> Attempt:
    authority = Authority.of(tenant_id="t", credential_scope=[], policy_version="p")
    fields: dict[str, Any] = {"idempotency_key": "", "provider_request_id": None,
                              "result_ref": None, **links}
    return Attempt(
        attempt_id=f"row-{task}", task_id=task, tool_name="charge", args_hash="h", args={},
        state=state, authority=authority, owner=None, lease_expires_at=None,
        next_attempt_at=None, attempt_count=1, parent_attempt_id=None, created_at=0.0,
        updated_at=0.0, **fields,
    )


def _one(obj: Exported, rows: list[Attempt] | None = None,
         messages: tuple[str, ...] = ("ord-7",)) -> Reading:
    [reading] = read_objects([obj], rows or [], list(messages))
    return reading


def test_an_object_that_names_nothing_is_history_even_with_one_task() -> None:
    reading = _one(_charge("ch_1"))
    assert (reading.task, reading.work) == (None, False)
    assert reading.text == "ch_1: history: no ledger row names it, and it names no task"


def test_an_object_whose_metadata_names_the_message_is_its_effect() -> None:
    reading = _one(_charge("ch_7", order_id="ord-7"))
    assert (reading.task, reading.work) == ("ord-7", True)
    assert reading.text == "ch_7: ord-7's effect: metadata order_id"


def test_another_orders_charge_is_that_orders_history_by_the_field_that_names_orders() -> None:
    mine, other = _charge("ch_7", order_id="ord-7"), _charge("pi_8", order_id="ord-8")
    readings = read_objects([other, mine], [], ["ord-7"])
    assert [(r.task, r.work) for r in readings] == [("ord-8", False), ("ord-7", True)]
    assert readings[0].text == "pi_8: history of ord-8 (metadata order_id)"
    # Without an object that shows which field names orders, it names no task.
    assert _one(other).text == "pi_8: history: no ledger row names it, and it names no task"


def test_a_row_that_names_an_object_decides_whose_it_is_before_its_metadata() -> None:
    rows = [_row("ord-6", result_ref="ch_old"), _row("ord-7", state=State.DISPATCHED,
                                                   idempotency_key="order-7-charge")]
    old = _one(_charge("ch_old", order_id="ord-7"), rows)
    assert (old.task, old.work) == ("ord-6", False)
    assert old.text == "ch_old: history of ord-6 (ledger row row-ord-6 names it in its result_ref)"
    keyed = Exported("charge", "ch_x", "charges.create", {}, idempotency_key="order-7-charge")
    reading = _one(keyed, rows)
    assert (reading.task, reading.work) == ("ord-7", True)
    assert reading.text == (
        "ch_x: ord-7's effect: ledger row row-ord-7 names it in its idempotency_key")


def test_the_object_of_a_row_left_in_flight_is_work_without_any_message() -> None:
    rows = [_row("ren-6", state=State.DISPATCHED), _row("ren-5")]
    stuck, done = _charge("ch_6", renewal_id="ren-6"), _charge("ch_5", renewal_id="ren-5")
    readings = read_objects([stuck, done], rows, [])
    assert [(r.task, r.work) for r in readings] == [("ren-6", True), ("ren-5", False)]


def test_the_export_may_say_whose_an_object_is() -> None:
    said = Exported("charge", "ch_1", "charges.create", {}, task_id="ord-7")
    assert _one(said).text == "ch_1: ord-7's effect: the export names it"


def test_sendgrid_custom_args_and_github_labels_title_and_body_name_tasks() -> None:
    mail = Exported("message", "m1", "mail.send", {"unique_args": {"job": "ord-7"}})
    label = Exported("issue", "o/r#3", "issues.create", {"labels": ["bug", "ord-7"]})
    body = Exported("issue", "o/r#4", "issues.create",
                    {"title": "Refund", "body": "Refund for ord-7, as asked."})
    assert _one(mail).text == "m1: ord-7's effect: custom args job"
    assert _one(label).text == "o/r#3: ord-7's effect: label ord-7"
    assert _one(body).text == "o/r#4: ord-7's effect: its body names it"


def test_a_task_id_inside_a_longer_word_names_nothing() -> None:
    longer = Exported("issue", "o/r#5", "issues.create",
                      {"title": "about ord-70 and xord-7", "body": ""})
    assert _one(longer).task is None


def test_an_object_that_carries_a_rows_idempotency_key_is_that_rows() -> None:
    rows = [_row("t-1", state=State.DISPATCHED, idempotency_key="charge:t-1")]
    reading = _one(_charge("ch_1", idempotency_key="charge:t-1"), rows, ())
    assert (reading.task, reading.work) == ("t-1", True)
    assert reading.text == (
        "ch_1: t-1's effect: its metadata idempotency_key is ledger row row-t-1's idempotency key")


def test_a_row_whose_view_reads_no_task_is_a_task_of_its_own() -> None:
    """A view that maps no task column: the row is its own unit of work, named by its id."""
    stuck = dataclasses.replace(_row("", state=State.DISPATCHED), attempt_id="job-7")
    mail = Exported("message", "m1", "mail.send", {"unique_args": {"job_id": "job-7"}})
    [reading] = read_objects([mail], [stuck], [])
    assert (reading.task, reading.work) == ("job-7", True)
    assert reading.text == "m1: job-7's effect: custom args job_id"


def test_a_recovery_alone_gives_each_rows_task_the_authority_it_records(
    tmp_path: Path,
) -> None:
    jobs = tmp_path / "jobs.sql"
    jobs.write_text(
        "CREATE TABLE jobs (id TEXT, status TEXT, tenant TEXT, scope TEXT, policy TEXT);\n"
        "INSERT INTO jobs VALUES ('job-7', 'pending', 'acme', 'email:write', 'p9');\n"
        "INSERT INTO jobs VALUES ('job-8', 'sent', '', '', '');\n")
    incident = Incident(ledger=jobs)

    def view(ctx: Context) -> SQLiteLedgerView:
        return SQLiteLedgerView(
            ctx.env.path / "jobs.db", table="jobs",
            states={"pending": State.DISPATCHED, "sent": State.OUTCOME_CONFIRMED},
            columns={"attempt_id": "id", "state": "status", "tenant_id": "tenant",
                     "credential_scope": "scope", "policy_version": "policy"})

    found = recovery_authorities(incident, view, (ProviderSpec("email"),), tmp_path)
    assert found == {
        "job-7": Authority.of(tenant_id="acme", credential_scope=["email:write"],
                              policy_version="p9"),
        "job-8": Authority.of(tenant_id="tenant-1",
                              credential_scope=["email:read", "email:write"],
                              policy_version="p1"),
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.sql"]  # nothing left behind
