"""Invariants of your own: functions over a case's evidence, named and reported like the six."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pytest_crashpoints import reference_worker
from pytest_crashpoints._harness.verdict.evidence import ProviderRequest
from pytest_crashpoints._harness.verdict.invariants import check_own
from pytest_crashpoints.errors import HarnessUsageError
from pytest_crashpoints.harness import Evidence, Scenario, Violation


def _charge(request_id: str, amount: int) -> ProviderRequest:
    return ProviderRequest(
        provider="billing", request_id=request_id, at=1.0, tenant_id="t", scope=frozenset(),
        kind="refunds.create", operation_key=None, args_hash=None, payload_hash="h",
        status=201, effect_applied=True, idempotent=False, body={"amount": amount},
    )


EVIDENCE = Evidence((), (), (_charge("r1", 600), _charge("r2", 600)))


def refunds_within_charge(evidence: Evidence) -> Iterator[Violation | str]:
    """A refund never exceeds its charge."""
    total = sum(int((r.body or {})["amount"]) for r in evidence.effects)
    if total > 1000:
        yield Violation("ignored", ("a-1",), f"refunded {total} of 1000",
                        tuple(r.request_id for r in evidence.effects))
    yield "a plain message is a violation too"


def test_violations_are_named_for_the_function_and_say_what_it_holds() -> None:
    found, errors = check_own(EVIDENCE, [refunds_within_charge])
    assert errors == []
    first, second = found
    assert (first.invariant, first.title, first.attempt_ids) == (
        "refunds_within_charge", "A refund never exceeds its charge", ("a-1",))
    assert str(first).splitlines() == [
        "invariant refunds_within_charge (A refund never exceeds its charge): refunded 1200 of "
        "1000",
        "    r1",
        "    r2",
    ]
    assert second.message == "a plain message is a violation too" and second.evidence == ()


def test_an_invariant_that_raises_is_a_harness_error_not_a_pass() -> None:
    def needs_a_charge(evidence: Evidence) -> list[str]:
        raise KeyError("charge")

    found, errors = check_own(EVIDENCE, [needs_a_charge])
    assert found == []
    [error] = errors
    assert error.startswith("the invariant needs_a_charge raised KeyError: 'charge' (at ")
    assert "an invariant must return what it finds, never raise" in error


def test_returning_something_else_is_an_error_that_says_what_to_return() -> None:
    def numbers(evidence: Evidence) -> list[int]:
        return [1]

    _, [error] = check_own(EVIDENCE, [numbers])  # type: ignore[list-item]
    assert "return Violation(...) objects or messages (str)" in error


@pytest.mark.parametrize(
    ("checks", "line"),
    [
        (["refunds"], "'refunds' is not callable"),
        ([refunds_within_charge, refunds_within_charge], "two invariants are named"),
        ([lambda: []], "cannot be called as <lambda>(evidence)"),
    ],
)
def test_what_is_not_an_invariant_is_refused_in_one_line(checks: list[object], line: str) -> None:
    with pytest.raises(HarnessUsageError) as refused:
        Scenario(reference_worker, None, (), (), {}, invariants=tuple(checks))  # type: ignore[arg-type]
    assert line in str(refused.value) and "\n" not in str(refused.value)
