"""In-process access: the providers as httpx/respx routes.

The routes live in process memory, so a worker forked while they are active inherits them: its
httpx clients reach the providers without a network, and the providers' journals (files) record
what it did even if it is killed.

respx is optional (``pip install 'pytest-crashpoints[respx]'``): it is imported by ``mock()``
alone, so that installing the plugin does not add respx's pytest plugin to every session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from ._provider import Provider

if TYPE_CHECKING:
    import respx

__all__ = ["mock", "transport"]


def mock(*providers: Provider, assert_all_mocked: bool = True) -> respx.MockRouter:
    """A respx router sending each provider's ``base_url`` to its handler.

    Use it as a context manager (``with mock(payments, email):``) to patch every httpx client,
    including ones the code under test (or an SDK such as stripe-python's ``HTTPXClient``)
    creates itself. Requests to other hosts raise unless ``assert_all_mocked=False``, in which
    case they pass through to the network (e.g. to a loopback server).

    Needs respx (``pip install 'pytest-crashpoints[respx]'``); without it, ``ImportError``
    says so. ``transport(...)`` needs nothing more than httpx.
    """
    try:
        import respx
    except ImportError:
        raise ImportError(
            "fake_providers.mock(...) needs respx, which is not installed: "
            "pip install 'pytest-crashpoints[respx]' (or use transport(...), which needs only "
            "httpx)."
        ) from None
    router = respx.mock(assert_all_called=False, assert_all_mocked=assert_all_mocked)
    for provider in providers:
        router.route(url__startswith=provider.base_url + "/").mock(side_effect=provider.handle)
    if not assert_all_mocked:
        router.route().pass_through()
    return router


def transport(*providers: Provider) -> httpx.MockTransport:
    """An ``httpx.MockTransport`` dispatching on the providers' base URLs.

    For clients you construct yourself: ``httpx.Client(transport=transport(payments))``. A URL no
    provider serves raises ``httpx.ConnectError``.
    """

    def dispatch(request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        for provider in providers:
            if url.startswith(provider.base_url + "/"):
                return provider.handle(request)
        served = ", ".join(p.base_url for p in providers) or "nothing"
        raise httpx.ConnectError(
            f"no fake provider serves {url}; this transport serves {served}. Point the client "
            "at a provider's base_url.",
            request=request,
        )

    return httpx.MockTransport(dispatch)
