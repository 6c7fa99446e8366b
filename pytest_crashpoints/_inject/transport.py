"""B and C without user code: an httpx transport that crashes the worker around a response.

Wrap the transport that reaches the provider (an ``httpx.MockTransport`` around a fake
provider, a ``respx`` router's mock transport, or a real ``httpx.HTTPTransport``) and give the
wrapper to the worker's client::

    client = httpx.Client(transport=CrashTransport(provider_transport))

For every request, exactly in this order:

1. the request goes to the inner transport; the provider handles it (applies and commits the
   effect in its journal) and answers;
2. the whole response body is read from the inner transport;
3. **B** fires: ``crashpoint("B", source="transport", method=..., host=..., path=...,
   status_code=..., idempotency_key=...)``. A kill here leaves the effect applied and the worker
   without any of the response;
4. **C** is counted with the same context and, if a C fault matches, *deferred*: the response
   is returned to the client and the action fires at the start of the worker's next
   ``crashpoint()`` call of any name (in the reference ledger: the next write transaction,
   ``"ledger.write"``);
5. the response is returned.

``idempotency_key`` is the request's ``Idempotency-Key`` header, or ``None``. Context set with
``crashpoint_context(...)`` around the call (e.g. ``tool="send_email"``) is added, so faults can
target one tool. A request whose inner transport raises reaches neither point.

If your own code already calls ``crashpoint("C")`` after the response, pass
``points=("B",)`` so the two are not counted as separate hits of C. Outside a harness run the
wrapper only reads the response body before returning it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Generic, TypeVar

import httpx

from ..errors import HarnessUsageError
from .failpoints import crashpoint, crashpoint_deferred

__all__ = ["AsyncCrashTransport", "CrashTransport"]

ContextOf = Callable[[httpx.Request, httpx.Response], Mapping[str, object]]
_Inner = TypeVar("_Inner", httpx.BaseTransport, httpx.AsyncBaseTransport)


def default_context(request: httpx.Request, response: httpx.Response) -> dict[str, object]:
    """The context the transport's points carry (see the module docstring)."""
    return {
        "source": "transport",
        "method": request.method,
        "host": request.url.host,
        "path": request.url.path,
        "status_code": response.status_code,
        "idempotency_key": request.headers.get("Idempotency-Key"),
    }


def _check_points(points: Collection[str]) -> frozenset[str]:
    chosen = frozenset(points)
    if not chosen <= {"B", "C"}:
        raise HarnessUsageError(
            f"the transport can fire only B and C, not {sorted(chosen - {'B', 'C'})!r}; "
            "put other points in your own code with crashpoint()."
        )
    return chosen


class _CrashingTransport(Generic[_Inner]):
    """What the sync and the async transport share: the transport they wrap, the points they
    fire and the context those carry, and how a response, once read, fires them."""

    _inner: _Inner

    def __init__(
        self,
        inner: _Inner,
        *,
        points: Collection[str] = ("B", "C"),
        context: ContextOf = default_context,
    ) -> None:
        self._inner = inner
        self._points = _check_points(points)
        self._context = context

    def _fire(self, request: httpx.Request, response: httpx.Response) -> None:
        context = self._context(request, response)
        if "B" in self._points:
            crashpoint("B", **context)
        if "C" in self._points:
            crashpoint_deferred("C", **context)


class CrashTransport(_CrashingTransport[httpx.BaseTransport], httpx.BaseTransport):
    """Wraps ``inner`` and fires B and C around each response (see the module docstring).

    ``points`` chooses which of B and C it fires; ``context`` replaces the default context
    function. Raises :class:`HarnessUsageError` for a point other than B or C.
    """

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        response.read()
        self._fire(request, response)
        return response

    def close(self) -> None:
        self._inner.close()


class AsyncCrashTransport(_CrashingTransport[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """The async twin of :class:`CrashTransport`, for ``httpx.AsyncClient``."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        await response.aread()
        self._fire(request, response)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
