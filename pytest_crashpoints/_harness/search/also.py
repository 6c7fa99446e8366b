"""After the first failure: the other invariants the test breaks.

A bug can break two invariants in two different schedules, and the failure (the first
minimal failing schedule) shows one of them. After it, the rest of the budget looks for the
invariants not yet seen, and keeps one schedule for each (:class:`~.findings.AlsoBroken`),
minimal for its mode:

- exhaustive mode (and the coverage schedules) goes on through the rest of its schedules, in
  their order: the first schedule that breaks an invariant no schedule before it broke is
  kept for it (the failure is still the first failing schedule; schedules after it that
  break only what was seen are run and counted, not reported);
- Hypothesis mode gets half the test's ``max_examples`` (a shard's share; rounded up:
  :func:`also_budget`), spent in rounds: each round is a search of its own, from a seed
  derived from the test's and the invariants seen, whose property fails only on a case that
  breaks an invariant not yet seen, and Hypothesis shrinks that case; each round spends the
  examples it drew until that case (shrinking is not counted, as in Hypothesis itself). A
  round that finds nothing, an empty budget, or every invariant of the test seen, ends it.
  The budget does not depend on where the failure's own search found it, and the rounds
  use no example database: what the database replays first (the failure, at once) changes
  nothing here, so the same seed finds the same schedules.

A case that is no verdict on the agent (it timed out, or reached past the simulated world)
reports nothing here. The search runs only after a failure that broke an invariant: a
passing test costs what it cost before; a failing one in exhaustive mode at most what a
passing one costs, in Hypothesis mode at most half as many examples more (plus the
shrinking of what it finds, and a real kill to confirm each schedule the states engine
found).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator

from ..case.runner import CaseResult
from ..case.schedule import Schedule
from ..case.steps import INCONCLUSIVE, WORLD_LIMIT
from ..verdict.invariants import INVARIANTS, invariant_key
from .findings import AlsoBroken
from .token import replay_command, replay_token

__all__ = ["Draw", "OtherInvariants", "also_budget", "drawn_rounds"]

Invariant = int | str
#: A Hypothesis search the explorer builds: ``draw(prop, max_examples=, seed=, key=None)`` is
#: a callable that runs ``prop`` on up to ``max_examples`` drawn schedules (from ``seed``;
#: ``None``: Hypothesis's own; no example database) and raises what the property raised for
#: the shrunk failing one.
Draw = Callable[..., Callable[[], None]]


class OtherInvariants:
    """What the search for the other invariants has seen and found so far: the failure's
    invariants, then those of each schedule kept."""

    def __init__(
        self,
        failed: Iterable[Invariant],
        own: Iterable[str],
        *,
        nodeid: str,
        seed: int | None,
    ) -> None:
        self.seen: set[Invariant] = set(failed)
        #: Every invariant the test checks: the six, and its own by name.
        self.wanted: frozenset[Invariant] = frozenset([*INVARIANTS, *own])
        self.found: list[AlsoBroken] = []
        self.nodeid = nodeid
        self.seed = seed

    @property
    def complete(self) -> bool:
        """Whether every invariant the test checks is seen broken (nothing left to find)."""
        return self.wanted <= self.seen

    def new_in(self, result: CaseResult) -> tuple[Invariant, ...]:
        """The invariants ``result`` broke that no schedule kept so far broke; none for a
        case that is no verdict on the agent (timed out, or past the simulated world)."""
        if result.passed or any(e.startswith((INCONCLUSIVE, WORLD_LIMIT)) for e in result.errors):
            return ()
        broken = {v.invariant for v in result.violations}
        return tuple(sorted(broken - self.seen, key=invariant_key))

    def keep(self, result: CaseResult, *, index: int | None = None) -> bool:
        """Keep ``result`` for the invariants it broke that were not seen (and see them);
        whether it had any."""
        new = self.new_in(result)
        if not new:
            return False
        token = replay_token(result.schedule, seed=self.seed, nodeid=self.nodeid)
        violations = [v for v in result.violations if v.invariant in new]
        self.found.append(
            AlsoBroken(
                invariants=new,
                broken=tuple(sorted({v.invariant for v in result.violations}, key=invariant_key)),
                schedule=result.schedule,
                token=token,
                replay_command=replay_command(self.nodeid, token),
                violations=tuple(str(v) for v in violations),
                titles={v.invariant: v.says for v in violations if isinstance(v.invariant, str)},
                index=index,
            )
        )
        self.seen |= {v.invariant for v in result.violations}
        return True

    def round_seed(self, seed: int | None, round_number: int) -> int | None:
        """The seed of round ``round_number`` of the drawn search: derived from ``seed`` (the
        one the failure's search drew from) and the invariants seen, the same on every
        machine; ``None`` without a seed."""
        if seed is None:
            return None
        digest = hashlib.sha256(
            f"pytest-crashpoints also {round_number} after {self._seen_text()} of {seed}".encode()
        )
        return int.from_bytes(digest.digest()[:8], "big")

    def _seen_text(self) -> str:
        return ",".join(str(n) for n in sorted(self.seen, key=invariant_key))


def also_budget(max_examples: int) -> int:
    """The examples the Hypothesis rounds after a failure may draw in all: half the
    search's own ``max_examples``, rounded up."""
    return -(-max_examples // 2)


class _Found(AssertionError):
    """A drawn case broke an invariant not yet seen (what the round's property raises)."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(f"schedule breaks another invariant: {result.schedule}")
        self.result = result


def drawn_rounds(
    search: OtherInvariants,
    *,
    budget: int,
    seed: int | None,
    draw: Draw,
    run: Callable[[Schedule], CaseResult],
) -> Iterator[CaseResult]:
    """The Hypothesis rounds of the search: yield each round's shrunk case that breaks an
    invariant ``search`` has not seen. The caller keeps it (or not) before the next round
    starts, which then looks for what is still unseen. ``budget`` is the examples left;
    each round spends those it drew until its first failing case. What a round's case
    raised goes up (the caller says the search stopped)."""
    number = 0
    while budget > 0 and not search.complete:
        number += 1
        drawn = 0
        first: int | None = None

        def prop(schedule: Schedule) -> None:
            nonlocal drawn, first
            drawn += 1
            result = run(schedule)
            if search.new_in(result):
                first = first or drawn
                raise _Found(result)

        test = draw(prop, max_examples=budget, seed=search.round_seed(seed, number), key=None)
        try:
            test()
        except _Found as exc:  # Hypothesis re-raises the shrunk failing case last
            yield exc.result
        else:
            return  # nothing more within the budget
        budget -= first or budget
