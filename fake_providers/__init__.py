"""Simulated providers: external reality for crash tests (SPEC section 5).

Each provider is a request handler (``provider.handle(httpx.Request) -> httpx.Response``) over
its own SQLite journal, reachable in-process (``mock(...)``/``transport(...)``, inherited by
forked workers) and over loopback (``serve(provider)``), with the same answers both ways:

- :class:`Payments`: idempotent, a subset of Stripe's API;
- :class:`Email`: not idempotent, a subset of SendGrid's v3 mail send and email activity API;
- :class:`Tickets`: not idempotent, a subset of GitHub's REST API (repos, issues, search);
- :class:`Deploy`: not idempotent, no lookup at all.

The harness configures keys (``provider.keys``), settings (``provider.settings``) and faults
(``provider.faults``) between steps, and checks invariants against ``provider.journal``.
"""

from ._deploy import Deploy
from ._email import Email
from ._faults import ActiveFault, Faults
from ._journal import EffectRecord, Journal, RequestRecord
from ._keys import ApiKey, Keys
from ._mock import mock, transport
from ._payments import Payments
from ._provider import ATTEMPT_HEADER, CORRELATION_HEADER, TENANT_HEADER, Provider
from ._server import serve
from ._settings import ProviderSettings, Settings
from ._tickets import Tickets

__all__ = [
    "ATTEMPT_HEADER",
    "CORRELATION_HEADER",
    "TENANT_HEADER",
    "ActiveFault",
    "ApiKey",
    "Deploy",
    "Email",
    "EffectRecord",
    "Faults",
    "Journal",
    "Keys",
    "Payments",
    "Provider",
    "ProviderSettings",
    "RequestRecord",
    "Settings",
    "Tickets",
    "mock",
    "serve",
    "transport",
]
