"""Attempt states and the table of legal transitions.

::

    INTENT_RECORDED -> DISPATCHED -> OUTCOME_CONFIRMED
                             |
                             +-> UNKNOWN -> reconcile -> OUTCOME_CONFIRMED | FAILED | MANUAL_REVIEW

The time between DISPATCHED and OUTCOME_CONFIRMED is not a failure: it is UNKNOWN.
"""

from __future__ import annotations

import enum

__all__ = ["FINAL_STATES", "IN_FLIGHT_STATES", "TRANSITIONS", "State", "is_legal"]


class State(str, enum.Enum):
    """Where one attempt at one logical side effect stands."""

    #: The intent and its idempotency key are durable; nothing has been sent.
    INTENT_RECORDED = "INTENT_RECORDED"
    #: Committed before the request leaves: the effect may have happened from here on.
    DISPATCHED = "DISPATCHED"
    #: The provider's lookup or a durable receipt shows exactly this effect.
    OUTCOME_CONFIRMED = "OUTCOME_CONFIRMED"
    #: The provider refused before applying anything and the request may succeed later.
    FAILED_RETRYABLE = "FAILED_RETRYABLE"
    #: Dispatched, outcome not known: only reconciliation against the provider can tell.
    UNKNOWN = "UNKNOWN"
    #: Reconciliation proved the effect absent at an idempotent provider: dispatch again
    #: with the same key.
    RECONCILED = "RECONCILED"
    #: Proven not to have happened, and it will not be tried again.
    FAILED = "FAILED"
    #: A person must decide: the effect cannot be proven either way, or the authority changed.
    MANUAL_REVIEW = "MANUAL_REVIEW"

    def __str__(self) -> str:
        return self.value


S = State

#: Every legal move; anything else raises :class:`~pytest_crashpoints.IllegalTransition`.
TRANSITIONS: dict[State, frozenset[State]] = {
    S.INTENT_RECORDED: frozenset({S.DISPATCHED, S.FAILED, S.MANUAL_REVIEW}),
    S.DISPATCHED: frozenset({S.OUTCOME_CONFIRMED, S.UNKNOWN, S.FAILED_RETRYABLE, S.FAILED}),
    S.UNKNOWN: frozenset({S.OUTCOME_CONFIRMED, S.RECONCILED, S.FAILED, S.MANUAL_REVIEW}),
    S.RECONCILED: frozenset({S.DISPATCHED, S.FAILED, S.MANUAL_REVIEW}),
    S.FAILED_RETRYABLE: frozenset({S.DISPATCHED, S.FAILED, S.MANUAL_REVIEW}),
    # An operator resolves a review by proving the outcome one way or the other.
    S.MANUAL_REVIEW: frozenset({S.OUTCOME_CONFIRMED, S.FAILED}),
    S.OUTCOME_CONFIRMED: frozenset(),
    S.FAILED: frozenset(),
}

#: States an attempt may end in (invariant 2).
FINAL_STATES: frozenset[State] = frozenset({S.OUTCOME_CONFIRMED, S.FAILED, S.MANUAL_REVIEW})
#: States that recovery must still resolve: they belong in the operator's queue with an owner.
IN_FLIGHT_STATES: frozenset[State] = frozenset(State) - FINAL_STATES


def is_legal(from_state: State, to_state: State) -> bool:
    """Whether the transition table allows ``from_state -> to_state``."""
    return to_state in TRANSITIONS[from_state]
