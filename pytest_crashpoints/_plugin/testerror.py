"""A crash test that ended in an error: its entry in every report, beside the verdicts.

A crash test whose ``crashpoints.run`` raised (its ledger view raised, the harness died
inside, the marker was bad) has no exploration report, yet it must not vanish from the JSON
report, the HTML page, the Markdown summary or the gate's table: it gets the verdict
``error``, the exception's first line, where it was raised, and whether that place is the
user's code or the harness's own (``origin``).
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ERROR", "crash_test_error", "error_result", "origin_of"]

#: The verdict of a crash test that ended in an error.
ERROR = "error"

_PACKAGE = Path(__file__).resolve().parents[1]
#: The harness's own code: this package and the simulated providers beside it.
_OURS = (f"{_PACKAGE}{os.sep}", f"{_PACKAGE.parent / 'fake_providers'}{os.sep}")


def _libraries() -> tuple[str, ...]:
    """Folders of code that is neither the user's nor the harness's: the standard library
    and installed packages."""
    paths = sysconfig.get_paths()
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    found = {paths[name] for name in names if name in paths}
    return tuple(str(Path(p).resolve()) + os.sep for p in found)


def _innermost(exc: BaseException) -> BaseException:
    """The exception that started it: follow explicit causes (``raise ... from exc``)."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def origin_of(exc: BaseException) -> tuple[str, str | None]:
    """Whose code raised ``exc``: ``("harness", where)`` or ``("user code", where)``, with
    ``where`` as ``"path:line in function"`` (None without a traceback).

    The innermost frame that is neither the standard library nor an installed package
    decides: inside ``pytest_crashpoints`` or ``fake_providers``, the harness; anywhere else,
    the user's code (a ledger view, a worker, the test). A traceback entirely in libraries
    is put on the innermost frame's caller outside them, or on the harness if none.
    """
    exc = _innermost(exc)
    frames = _frames(exc.__traceback__)
    libraries = _libraries()
    for filename, line, function in reversed(frames):
        path = str(Path(filename).resolve()) if filename and not filename.startswith("<") else ""
        if any(path.startswith(ours) for ours in _OURS):
            return "harness", f"{_short(path)}:{line} in {function}"
        if path and not any(path.startswith(lib) for lib in libraries):
            return "user code", f"{_short(path)}:{line} in {function}"
    if frames:
        filename, line, function = frames[-1]
        return "harness", f"{_short(str(Path(filename).resolve()))}:{line} in {function}"
    return "harness", None


def _frames(tb: TracebackType | None) -> list[tuple[str, int, str]]:
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb)]


def _short(path: str) -> str:
    """The harness's files from the package's folder (``fake_providers/_journal.py``), the
    user's from the current folder where they are under it, others in full."""
    if any(path.startswith(ours) for ours in _OURS):
        return os.path.relpath(path, _PACKAGE.parent)
    here = os.getcwd() + os.sep
    return os.path.relpath(path) if path.startswith(here) else path


def first_line(exc: BaseException) -> str:
    """``Type: message``, the message's first line only."""
    exc = _innermost(exc)
    text = str(exc).strip().splitlines()
    name = type(exc).__qualname__
    if type(exc).__module__ not in ("builtins", "__main__"):
        name = f"{type(exc).__module__}.{name}"
    return f"{name}: {text[0]}" if text else name


def error_result(
    nodeid: str,
    exc: BaseException,
    *,
    when: str,
    partial: dict[str, Any] | None = None,
    expect: list[Any] | None = None,
    origin: tuple[str, str | None] | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """The report entry of crash test ``nodeid`` that ended with ``exc`` in pytest's phase
    ``when`` (``setup`` or ``call``). ``partial``: the exploration report so far, if any
    case ran (its cases and coverage are kept). ``origin``: whose code raised, if already
    known (else read from ``exc``'s traceback). ``message``: the line to show (else the
    exception's first line)."""
    where_from, where = origin if origin is not None else origin_of(exc)
    data: dict[str, Any] = dict(partial or {})
    data.update(
        {
            "nodeid": nodeid,
            "verdict": ERROR,
            "cases": int(data.get("cases", 0)),
            "coverage": data.get("coverage", {}),
            "failure": None,
            "error": message or first_line(exc),
            "error_origin": where_from,
            "error_phase": when,
        }
    )
    if where is not None:
        data["error_at"] = where
    if expect:
        data["expect"] = list(expect)
    return data


def crash_test_error(
    nodeid: str,
    *,
    when: str,
    passed: bool,
    exc: BaseException | None,
    fixture: Any,
    expect: list[Any],
    seed: int | None = None,
) -> dict[str, Any] | None:
    """The report entry of crash test ``nodeid`` whose pytest phase ``when`` ended without an
    exploration report: it raised ``exc`` (the fixture's own record of what ``run`` raised
    wins), or it passed without calling ``crashpoints.run``. None when there is nothing to
    say (a passing set-up)."""
    import pytest

    partial: dict[str, Any] = {"seed": seed} if seed is not None else {}
    if fixture is not None and fixture.partial is not None:
        partial = fixture.partial.to_json()
    if passed:
        if when != "call" or fixture is None or fixture.ran or fixture.consulted:
            return None
        return error_result(
            nodeid,
            RuntimeError("the test never called crashpoints.run: it ran no crash case"),
            when=when,
            partial=partial,
            expect=expect,
            origin=("user code", None),
        )
    if fixture is not None and fixture.error is not None:
        from ..errors import CrashpointsError

        said = None  # the harness's own account of it (a case that raised, and where)
        if isinstance(fixture.error, CrashpointsError):
            said = str(fixture.error).splitlines()[0]
        return error_result(
            nodeid, fixture.error, when=when, partial=partial, expect=expect,
            origin=fixture.error_origin, message=said,
        )
    if exc is None:
        return None
    if isinstance(exc, pytest.fail.Exception) and str(exc).startswith("crashpoints: "):
        # A mistake in how the test is set up, said in one line (a bad marker, a missing
        # argument): the user's to fix.
        text = str(exc).splitlines()[0].removeprefix("crashpoints: ")
        text = text.removeprefix(f"{nodeid}: ").removeprefix(f"bad marker on {nodeid}: ")
        return error_result(
            nodeid, exc, when=when, partial=partial, expect=expect,
            origin=("user code", None), message=f"set-up: {text}",
        )
    return error_result(nodeid, exc, when=when, partial=partial, expect=expect)
