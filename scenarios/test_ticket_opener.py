"""The incident responder done right (``scenarios/ticket_opener.py``): PyGithub with no retry
of a POST, and a claim with a lease before "is the issue open already?". One issue per
incident through kills at A, B and C, lost answers (a 502, a reset, a timeout after GitHub
opened the issue), and a second delivery at once, the first waiting at any of its fail points.
Its two broken versions are in ``broken/test_ticket_opener.py``."""

import pytest

from pytest_crashpoints import SQLiteLedgerView, State

github = pytest.importorskip(
    "github", reason="PyGithub is a dev dependency: pip install --group dev"
)

from scenarios import ticket_opener  # noqa: E402

INCIDENT = {
    "task_id": "inc-42",
    "tenant": "tenant-7",
    "title": "Checkout latency above 2 s",
    "body": "p99 of /checkout at 2.4 s since 14:02 UTC.",
}
STATES = {"opening": State.DISPATCHED, "open": State.OUTCOME_CONFIRMED}


def responder(*, sdk_retries=False, claims_first=True):
    def worker(incident, ctx):
        return ticket_opener.open_ticket(
            incident,
            db=ctx.env.path / "incidents.db",
            api_url=ctx.base_url("tickets"),
            token=ctx.api_key("tickets", incident["task_id"]),
            sdk_retries=sdk_retries,
            claims_first=claims_first,
        )

    return worker


def incidents(ctx):
    columns = {"attempt_id": "id", "state": "status", "owner": "owner"}
    columns["result_ref"] = "issue_number"
    path = ctx.env.path / "incidents.db"
    return SQLiteLedgerView(path, table="incidents", columns=columns, states=STATES)


@pytest.mark.crashpoints(
    points="ABCD", providers=["tickets"], mode="exhaustive", strict_coverage=False
)
def test_one_issue_per_incident(crashpoints):
    crashpoints.run(worker=responder(), messages=[INCIDENT], ledger_view=incidents)
