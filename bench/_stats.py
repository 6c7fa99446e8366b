"""Medians and spreads of repeated measurements, and the result record every item prints."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def summary(samples: Sequence[float], *, unit: str = "s") -> dict[str, Any]:
    """Median and spread (min, max, interquartile range) of ``samples``."""
    ordered = sorted(samples)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
    else:
        q1, q3 = ordered[0], ordered[-1]
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "iqr": q3 - q1,
        "unit": unit,
    }


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Per-repetition ratios of paired measurements, summarized."""
    return summary([n / d for n, d in zip(numerators, denominators, strict=True)], unit="x")


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call of ``fn``."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed_case(run: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of one call of ``run``, and what it returned."""
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def result(
    item: int,
    name: str,
    *,
    goal: str,
    met: bool | None,
    figure: str,
    command: str,
    details: dict[str, Any],
    status: str | None = None,
) -> dict[str, Any]:
    """The record one benchmark item reports (``met=None``: not measurable)."""
    if status is None:
        status = "not measurable yet" if met is None else ("met" if met else "missed")
    return {
        "item": item,
        "name": name,
        "goal": goal,
        "status": status,
        "figure": figure,
        "command": command,
        "details": details,
    }


def emit(record: dict[str, Any]) -> None:
    """Print the item's record as the last line of stdout (the driver reads it)."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def quick() -> bool:
    """Whether the run asked for fewer repetitions (``--quick``: a smoke run of the bench)."""
    return "--quick" in sys.argv
