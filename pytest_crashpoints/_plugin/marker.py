"""The ``@pytest.mark.crashpoints(...)`` marker: one typed, keyword-only constructor.

Cheap to import (the plugin validates markers at collection).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from .._harness.case.context import ProviderSpec
from .._harness.verdict.invariants import invariant_key
from .._inject.failpoints import CRASH_POINTS
from ..errors import CrashpointsError
from .options import ENGINES, MODES, START_METHODS

__all__ = ["CrashMarker", "parse_marker"]


@dataclasses.dataclass(frozen=True)
class CrashMarker:
    """The settings a test's marker gives; ``None`` means "not set: use the options"."""

    points: tuple[str, ...] = CRASH_POINTS
    providers: tuple[ProviderSpec, ...] = ()
    mode: str | None = None
    max_examples: int | None = None
    max_faults: int | None = None
    timeout: float | None = None
    start_method: str = "fork"
    strict_coverage: bool | None = None
    expect: tuple[int | str, ...] = ()
    #: ``"processes"`` for a worker whose durable state lives outside the run directory (a
    #: broker, a database server): the states engine only snapshots files there.
    engine: str | None = None
    #: The kinds of fault to inject (``FAULT_KINDS``); ``None``: every kind ``points`` allows.
    faults: tuple[str, ...] | None = None
    #: The kinds left out of every kind ``points`` allows (``faults=["-kind", ...]``).
    faults_left_out: tuple[str, ...] = ()


#: Fields of :class:`CrashMarker` that are read from another keyword, not keywords themselves.
_DERIVED = frozenset({"faults_left_out"})


def _points(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        # "ABCDEF" is six points; a string with a dot or longer name is one user point.
        items: Iterable[object] = list(value) if value.isalpha() and value.isupper() else [value]
    elif isinstance(value, Iterable):
        items = value
    else:
        raise CrashpointsError(f"points={value!r} is not a string or a list of point names")
    points: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item:
            raise CrashpointsError(f"point {item!r} is not a point name")
        if len(item) == 1 and item not in CRASH_POINTS:
            raise CrashpointsError(
                f"point {item!r} is not a crash point; the crash points are "
                f"{', '.join(CRASH_POINTS)} (longer names are your own fail points)"
            )
        points.append(item)
    return _distinct(points, "points is empty; name at least one crash point")


def _distinct(chosen: list[str], empty: str) -> tuple[str, ...]:
    """``chosen`` in order without repeats; ``CrashpointsError(empty)`` when it is empty."""
    if not chosen:
        raise CrashpointsError(empty)
    return tuple(dict.fromkeys(chosen))


def _providers(value: object) -> tuple[ProviderSpec, ...]:
    from fake_providers import PROVIDERS, HttpApi, McpServer

    if isinstance(value, (str, ProviderSpec, HttpApi, McpServer)):
        value = [value]
    if not isinstance(value, Iterable):
        raise CrashpointsError(f"providers={value!r} is not a list of provider names")
    specs: list[ProviderSpec] = []
    for item in value:
        if isinstance(item, HttpApi | McpServer):
            spec: object = ProviderSpec(item.name, api=item)
        else:
            spec = ProviderSpec(item) if isinstance(item, str) else item
        if isinstance(spec, ProviderSpec) and spec.api is not None:
            if spec.name in PROVIDERS:
                raise CrashpointsError(
                    f"provider {spec.api!r} takes the name of the bundled provider "
                    f"{spec.name!r}; name your API otherwise"
                )
        elif not isinstance(spec, ProviderSpec) or spec.name not in PROVIDERS:
            raise CrashpointsError(
                f"provider {item!r} is not one of {', '.join(PROVIDERS)} (or a "
                "ProviderSpec of one, or an HttpApi or McpServer of your own)"
            )
        if any(s.name == spec.name for s in specs):
            raise CrashpointsError(f"provider {spec.name!r} is named twice")
        specs.append(spec)
    return tuple(specs)


def _positive_int(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CrashpointsError(f"{name}={value!r} is not a whole number of 1 or more")
    return value


def _expect(value: object) -> tuple[int | str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, int | str) else value
    if not isinstance(items, Iterable):
        raise CrashpointsError(f"expect={value!r} is not an invariant number or a list of them")
    out: list[int | str] = []
    for item in items:
        if isinstance(item, str) and item.strip() and not item.isdigit():
            out.append(item)  # an invariant of your own, by name (checked when run is called)
        elif isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= 6:
            raise CrashpointsError(
                f"expect={value!r}: {item!r} is not an invariant (1 to 6); your own "
                "invariants go by their names"
            )
        else:
            out.append(item)
    return tuple(sorted(set(out), key=invariant_key))


def _faults(
    value: object, points: tuple[str, ...]
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """``faults=``: the kinds chosen (each allowed by ``points``), or, when every entry is
    ``"-kind"``, the kinds left out of the default; ``(chosen or None, left out)``."""
    from .._harness.case.schedule import FAULT_KINDS

    if value is None:
        return None, ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, Iterable):
        raise CrashpointsError(f"faults={value!r} is not a list of fault kinds")
    items = list(items)
    dashed = [isinstance(item, str) and item.startswith("-") for item in items]
    if any(dashed) and not all(dashed):
        raise CrashpointsError(
            f"faults={value!r} mixes kinds to try with kinds to leave out ('-kind'); name "
            "only the kinds to try, or only the kinds to leave out, each with a '-'"
        )
    kinds = [item[1:] if leave else item for item, leave in zip(items, dashed, strict=True)]
    for kind, item in zip(kinds, items, strict=True):
        if not isinstance(kind, str) or kind not in FAULT_KINDS:
            raise CrashpointsError(
                f"faults={value!r}: {item!r} is not a kind of fault; the kinds are "
                f"{', '.join(FAULT_KINDS)} (each may be left out as '-kind')"
            )
        if not _allowed(kind, points):
            needs = " or ".join(sorted(FAULT_KINDS[kind]))
            raise CrashpointsError(
                f"faults={value!r}: {item!r} leaves out {kind}, which points "
                f"{_shown(points)} never try (it needs point(s) {needs}); drop {item!r}"
                if dashed[0]
                else f"faults={value!r}: {item!r} needs point(s) {needs} in points, which "
                f"are {_shown(points)}"
            )
    if not (items and dashed[0]):
        chosen = _distinct(kinds, "faults is empty; name at least one kind of fault, or leave "
                           "it out")
        return chosen, ()
    return None, _left_out(value, tuple(dict.fromkeys(kinds)), points)


def _allowed(kind: str, points: tuple[str, ...]) -> bool:
    from .._harness.case.schedule import FAULT_KINDS

    own = kind == "kill" and any(p not in ("D", "E", "F") for p in points)
    return bool(FAULT_KINDS[kind] & set(points)) or own


def _shown(points: tuple[str, ...]) -> str:
    return "".join(points) if all(len(p) == 1 for p in points) else repr(points)


#: Kinds of fault tried only when a test chooses them (``faults=[...]``): a machine restored
#: from a backup, a disk that stays full.
ONLY_WHEN_CHOSEN = frozenset({"backup_restore", "disk_full"})


def _left_out(value: object, left: tuple[str, ...], points: tuple[str, ...]) -> tuple[str, ...]:
    """Kinds left out of the default: each one the default tries, and some kind left."""
    from .._harness.case.schedule import FAULT_KINDS

    chosen_only = [k for k in left if k in ONLY_WHEN_CHOSEN]
    if chosen_only:
        kind = chosen_only[0]
        raise CrashpointsError(
            f"faults={value!r}: {kind} is tried only when chosen, so there is nothing "
            f"to leave out; drop '-{kind}'"
        )
    tried = [k for k in FAULT_KINDS if k not in ONLY_WHEN_CHOSEN and _allowed(k, points)]
    if not set(tried) - set(left):
        raise CrashpointsError(
            f"faults={value!r} leaves out every kind of fault points {_shown(points)} allow; "
            "leave some kind in, or drop the test's marker"
        )
    return left


def parse_marker(args: tuple[Any, ...], kwargs: dict[str, Any]) -> CrashMarker:
    """Build the marker's settings; raise CrashpointsError saying what is wrong."""
    if len(args) > 1:
        raise CrashpointsError(
            f"takes at most one positional argument (points), got {len(args)}: {args!r}"
        )
    known = {field.name for field in dataclasses.fields(CrashMarker)} - _DERIVED
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise CrashpointsError(
            f"unknown keyword(s) {', '.join(unknown)}; the marker takes {', '.join(sorted(known))}"
        )
    if args and "points" in kwargs:
        raise CrashpointsError("points is given twice (positionally and as a keyword)")
    raw_points = args[0] if args else kwargs.get("points", CRASH_POINTS)
    mode = kwargs.get("mode")
    if mode is not None and mode not in MODES:
        raise CrashpointsError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    start_method = kwargs.get("start_method", "fork")
    if start_method not in START_METHODS:
        raise CrashpointsError(
            f"start_method={start_method!r} is not one of {', '.join(START_METHODS)}"
        )
    timeout = kwargs.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not (timeout > 0 and math.isfinite(timeout))
    ):
        raise CrashpointsError(f"timeout={timeout!r} is not a positive, finite number of seconds")
    engine = kwargs.get("engine")
    if engine is not None and engine not in ENGINES:
        raise CrashpointsError(
            f"engine={engine!r} is not one of {', '.join(ENGINES)}; use engine='processes' "
            "when the worker keeps durable state outside the case's run directory"
        )
    strict = kwargs.get("strict_coverage")
    if strict is not None and not isinstance(strict, bool):
        raise CrashpointsError(f"strict_coverage={strict!r} is not True or False")
    points = _points(raw_points)
    faults, faults_left_out = _faults(kwargs.get("faults"), points)
    return CrashMarker(
        points=points,
        providers=_providers(kwargs.get("providers", ())),
        mode=mode,
        max_examples=_positive_int("max_examples", kwargs.get("max_examples")),
        max_faults=_positive_int("max_faults", kwargs.get("max_faults")),
        timeout=None if timeout is None else float(timeout),
        start_method=start_method,
        strict_coverage=strict,
        expect=_expect(kwargs.get("expect")),
        engine=engine,
        faults=faults,
        faults_left_out=faults_left_out,
    )
