"""What a worker process runs: a plain callable, or a coroutine function on an event loop.

:func:`check_callable` says, in one line, why something cannot be a worker (a generator
function, a coroutine object, something that takes the wrong arguments); the harness calls it
before any process starts. :func:`call_to_completion` runs the callable in the worker
process: a plain function is called; a coroutine function (``async def``, also behind
``functools.partial`` or as an object's ``async def __call__``), or a plain function that
returns an awaitable, runs to its end with ``asyncio.run`` on a new event loop in this
process (anyio code runs on it as on any asyncio loop). Fail points work inside coroutines
as anywhere, and a kill lands wherever the process is, inside an ``await`` included.

Work that never ran must never pass for work done. So, inside the worker process:

- a coroutine created and never awaited (``agent.send(...)`` without ``await``: Python's
  ``RuntimeWarning: coroutine ... was never awaited``) fails the run with
  :class:`~pytest_crashpoints.errors.HarnessUsageError` naming it;
- so does an ``async def`` worker that returns while tasks it started are still pending
  (``asyncio.create_task(...)`` never awaited): ``asyncio.run`` would cancel them, and their
  tool calls would never happen.

The harness reports a run that raised ``HarnessUsageError`` as a harness error: the test
fails, whatever the invariants say.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import inspect
import re
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import HarnessUsageError

__all__ = ["call_to_completion", "check_callable"]

_NEVER_AWAITED = re.compile(r"coroutine '([^']*)' was never awaited")


def _name(fn: object) -> str:
    target = fn.func if isinstance(fn, functools.partial) else fn
    return getattr(target, "__qualname__", None) or repr(target)


def check_callable(fn: object, *, role: str, arguments: tuple[str, ...]) -> None:
    """Raise :class:`HarnessUsageError` (one line: what is wrong and what to do) unless ``fn``
    can be called as ``role(*arguments)`` and run to its end: a plain function or a coroutine
    function. ``arguments`` names what the harness passes, e.g. ``("message", "ctx")``."""
    call = f"{role}({', '.join(arguments)})"
    if inspect.iscoroutine(fn) or inspect.isawaitable(fn):
        raise HarnessUsageError(
            f"{role}={fn!r} is an awaitable, not a function: pass the async def function "
            f"itself ({role}=handle), not a call of it; the harness calls {call}."
        )
    if not callable(fn):
        raise HarnessUsageError(
            f"{role}={fn!r} is not callable; pass a function the harness calls as {call}."
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        kind = "an async generator" if inspect.isasyncgenfunction(fn) else "a generator"
        raise HarnessUsageError(
            f"{role}={_name(fn)} is {kind} function: calling it runs none of its body (a "
            f"yield makes it one); make it a plain function (def) or a coroutine function "
            f"(async def) that the harness calls as {call}."
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        raise HarnessUsageError(
            f"{role}={_name(fn)} cannot be called as {call} ({exc}); give it exactly those "
            "parameters."
        ) from None


@contextmanager
def _unawaited() -> Iterator[list[str]]:
    """Collect the coroutines this process creates and drops without awaiting them."""
    found: list[str] = []
    original = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        matched = _NEVER_AWAITED.search(str(message))
        if issubclass(category, RuntimeWarning) and matched:
            found.append(matched.group(1))
            return
        original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        # Whatever filters the test process set (an "error" filter would turn the warning
        # into an exception nobody can catch), these warnings come here.
        warnings.filterwarnings("always", message="coroutine .* was never awaited",
                                category=RuntimeWarning)
        warnings.showwarning = show
        try:
            yield found
        finally:
            gc.collect()  # a coroutine held in a reference cycle is dropped here


async def _to_the_end(awaitable: Awaitable[object], role: str) -> object:
    value = await awaitable
    current = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    if pending:
        names = ", ".join(sorted(_task_name(t) for t in pending))
        raise HarnessUsageError(
            f"the {role} returned while {len(pending)} asyncio task(s) it started were still "
            f"running ({names}): they would be cancelled with the event loop and their tool "
            "calls never made; await them (asyncio.gather, a TaskGroup) before returning."
        )
    return value


def _task_name(task: asyncio.Task[Any]) -> str:
    code = getattr(task.get_coro(), "__qualname__", None)
    return f"{code}()" if code else task.get_name()


def call_to_completion(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object], *,
    role: str = "worker",
) -> object:
    """Call ``fn(*args, **kwargs)`` in this (worker) process and run what it starts to its end.

    Returns what it returned (a coroutine's result). Raises what it raised, and
    :class:`HarnessUsageError` when a coroutine was never awaited or tasks were left pending.
    """
    with _unawaited() as unawaited:
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = asyncio.run(_to_the_end(value, role))
    if unawaited:
        names = ", ".join(f"{name}()" for name in sorted(set(unawaited)))
        raise HarnessUsageError(
            f"coroutine {names} was never awaited in this {role}: its code, and any tool call "
            "in it, never ran; await it (or make the caller async def and await it there)."
        )
    return value
