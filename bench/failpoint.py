"""Item 3: a disarmed fail point against an empty function call with the same arguments.

Outside a harness run ``crashpoint(...)`` must cost next to nothing: it stays in production
code. Both calls are timed with ``timeit`` in alternating rounds; the ratio is taken per round.
"""

from __future__ import annotations

import timeit

from pytest_crashpoints import crashpoint

from . import _stats

GOAL = 2.0


def _empty(name: str, /, **context: object) -> None:
    return None


def _rounds(stmt_point: str, stmt_empty: str, rounds: int, number: int) -> dict[str, object]:
    env = {"crashpoint": crashpoint, "empty": _empty}
    points, empties = [], []
    for _ in range(rounds):
        points.append(timeit.timeit(stmt_point, globals=env, number=number) / number)
        empties.append(timeit.timeit(stmt_empty, globals=env, number=number) / number)
    return {
        "fail point": _stats.summary(points),
        "empty call": _stats.summary(empties),
        "ratio": _stats.ratios(points, empties),
    }


def main() -> None:
    rounds, number = (5, 100_000) if _stats.quick() else (15, 500_000)
    with_context = _rounds(
        'crashpoint("A", tool="send_email", task_id="t-1")',
        'empty("A", tool="send_email", task_id="t-1")',
        rounds,
        number,
    )
    bare = _rounds('crashpoint("A")', 'empty("A")', rounds, number)
    ratio = max(with_context["ratio"]["median"], bare["ratio"]["median"])  # type: ignore[index]
    point_ns = with_context["fail point"]["median"] * 1e9  # type: ignore[index]
    empty_ns = with_context["empty call"]["median"] * 1e9  # type: ignore[index]
    _stats.emit(
        _stats.result(
            3,
            "disarmed fail point",
            goal=f"<= {GOAL:g}x an empty function call",
            met=ratio <= GOAL,
            figure=(
                f"{with_context['ratio']['median']:.2f}x with context ({point_ns:.0f} ns vs "  # type: ignore[index]
                f"{empty_ns:.0f} ns), {bare['ratio']['median']:.2f}x without"  # type: ignore[index]
            ),
            command="python -m bench.failpoint",
            details={"with context": with_context, "name only": bare},
        )
    )


if __name__ == "__main__":
    main()
