"""Every deliberately broken agent must be caught, with the invariant its bug breaks.

A test marked ``expect=N`` passes only when the harness finds a failing schedule whose
violations include invariant N (the summary reports it as "caught"); it fails when the bug
goes unnoticed. ``expect=[N, M]`` needs both, from the failing schedule or from those found
after it for the other invariants. The agents live in :mod:`scenarios.broken.agents`;
README.md has the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_crashpoints import reference_recovery, reference_worker
from scenarios.broken import agents

if TYPE_CHECKING:
    from pytest_crashpoints import CrashpointsFixture

INVOICE_EMAIL = {
    "task_id": "invoice-7",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "send_email",
            "key": "invoice:tenant-7:inv-7:send",
            "args": {
                "to": "billing@customer.example",
                "subject": "Invoice INV-7",
                "body": "Amount due: 120.00 EUR by 2026-09-01.",
            },
        }
    ],
}

ORDER_CHARGE = {
    "task_id": "order-7",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "charge",
            "key": "order:tenant-7:order-7:charge",
            "args": {"amount": 4200, "currency": "eur", "customer": "cus_tenant-7"},
        }
    ],
}

ORDER_WITH_RECEIPT = {
    "task_id": "order-8",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "charge",
            "key": "order:tenant-7:order-8:charge",
            "args": {"amount": 4200, "currency": "eur", "customer": "cus_tenant-7"},
        },
        {
            "tool": "send_email",
            "key": "order:tenant-7:order-8:receipt",
            "args": {
                "to": "ada@customer.example",
                "subject": "Receipt for order 8",
                "body": "We charged 42.00 EUR.",
            },
        },
    ],
}

RELEASE = {
    "task_id": "release-142",
    "tenant": "tenant-7",
    "calls": [
        {
            "tool": "deploy",
            "key": "release:tenant-7:api:1.4.2:production",
            "args": {"service": "api", "version": "1.4.2", "environment": "production"},
        }
    ],
}


def exhaustive(
    *, points: object, providers: list[str], expect: int | list[int]
) -> pytest.MarkDecorator:
    """Every single fault at ``points``, fewest first: deterministic; the first catch is the
    failure, and the schedules after it are searched for the other invariants the agent
    breaks. ``points`` are the faults that expose the bug; with all of ``"ABCDEF"`` each
    agent is caught just the same, a few cases later."""
    return pytest.mark.crashpoints(
        points=points, providers=providers, mode="exhaustive", max_faults=1, expect=expect
    )


@exhaustive(points="ABC", providers=["email"], expect=1)
def test_blind_retry_after_a_crash(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=agents.blind_retry_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="BD", providers=["payments"], expect=1)
def test_random_idempotency_key_per_try(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.random_key_worker, recover=reference_recovery, messages=[ORDER_CHARGE]
    )


@exhaustive(points="ABC", providers=["email"], expect=1)
def test_dispatched_recorded_after_the_send(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.dispatched_after_send_worker,
        recover=reference_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points="ABC", providers=["email"], expect=2)
def test_http_200_taken_as_confirmation(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=agents.confirm_on_http_200_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points=["A", "B", "C", "D", "message.acked"], providers=["email"], expect=2)
def test_work_skipped_after_a_crash(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.skip_after_crash_worker, recover=reference_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="BE", providers=["email"], expect=4)
def test_stale_authority_kept_by_recovery(crashpoints: CrashpointsFixture) -> None:
    # Invariant 2, not 4: see stale_authority_recovery's docstring and README.md.
    crashpoints.run(
        worker=reference_worker,
        recover=agents.stale_authority_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points="BE", providers=["email"], expect=4)
def test_tenant_change_ignored_by_recovery(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=agents.tenant_blind_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="ABC", providers=["deploy"], expect=6)
def test_recovery_dispatches_again_on_its_next_run(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=agents.retry_review_recovery, messages=[RELEASE]
    )


@exhaustive(points="BF", providers=["email"], expect=5)
def test_unknown_left_without_an_owner(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=agents.forget_owner_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="BD", providers=["email"], expect=1)
def test_duplicate_delivery_not_deduplicated(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.key_per_delivery_worker, recover=reference_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="BF", providers=["email"], expect=1)
def test_lookup_timeout_taken_for_absent(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=agents.timeout_as_absent_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points="ABC", providers=["deploy"], expect=6)
def test_crashed_recovery_taken_for_a_poison_pill(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=agents.gives_up_after_crashed_recovery,
        messages=[RELEASE],
    )


@exhaustive(points="F", providers=["email"], expect=2)
def test_failed_confirming_lookup_taken_for_failure(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.failed_lookup_as_failure_worker,
        recover=reference_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points="AD", providers=["email"], expect=1)
def test_recovery_without_a_claim(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker, recover=agents.unclaimed_recovery, messages=[INVOICE_EMAIL]
    )


@exhaustive(points="BF", providers=["email"], expect=1)
def test_lagging_search_taken_for_absent(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=reference_worker,
        recover=agents.lagging_search_trusted_recovery,
        messages=[INVOICE_EMAIL],
    )


@exhaustive(points="E", providers=["payments", "email"], expect=4)
def test_authority_read_once_per_message(crashpoints: CrashpointsFixture) -> None:
    crashpoints.run(
        worker=agents.authority_read_once_worker,
        recover=reference_recovery,
        messages=[ORDER_WITH_RECEIPT],
    )


@exhaustive(points="BEF", providers=["email"], expect=[4, 5])
def test_two_bugs_each_shown_by_a_schedule_of_its_own(crashpoints: CrashpointsFixture) -> None:
    # 4 (with 1 and 2) from the failing schedule, a tenant moved (E) after a kill at B; 5 from
    # a schedule found after it, lookups failing (F) after a kill at B.
    crashpoints.run(
        worker=reference_worker,
        recover=agents.tenant_blind_releasing_recovery,
        messages=[INVOICE_EMAIL],
    )
