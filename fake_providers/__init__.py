"""Simulated providers: external reality for crash tests.

Each provider is a request handler (``provider.handle(httpx.Request) -> httpx.Response``) over
its own SQLite journal, reachable in-process (``mock(...)``/``transport(...)``, inherited by
forked workers) and over loopback (``serve(provider)``: a real HTTP server with body and time
limits, whose optional :data:`Preamble` hook writes bytes just before an answer's status line),
with the same answers both ways:

- :class:`Payments`: idempotent, a subset of Stripe's API;
- :class:`Email`: not idempotent, a subset of SendGrid's v3 mail send and email activity API;
- :class:`Tickets`: not idempotent, a subset of GitHub's REST API (repos, issues, search);
- :class:`Deploy`: not idempotent, no lookup at all;
- :class:`Smtp`: not idempotent, no lookup, a mail relay reached over SMTP
  (``smtp_loopback(provider)``: a real SMTP server, aiosmtpd's, in front of the same pipeline);
- :class:`Model`: a language model behind the OpenAI and Anthropic APIs, answering from a
  :class:`Script` (its answers are reads, never effects).

The harness configures keys (``provider.keys``), settings (``provider.settings``) and faults
(``provider.faults``) between steps, and checks invariants against ``provider.journal``. It can
hand each process its own credential without configuring anything per process:
``derive_key(base_secret, label, signing_secret=...)`` is accepted as the base key by every
provider whose journal holds that signing secret (``provider.keys.set_signing_secret``), and the
journal records the label with each request and effect, so the journals say which process sent
what, whatever the payloads say.

Every response a provider produces carries a :class:`ResponseInfo` in
``response.extensions["crashpoints"]``: operation, kind, status, whether an effect was applied or
a saved answer replayed, request id, key label, idempotency key and provider name.

:data:`PROVIDERS` maps each provider's name to its class: the harness reads it, and this
package imports nothing of the harness.

Your own provider: :class:`HttpApi` describes any HTTP API as routes (:class:`Effect`,
:class:`Lookup`, :class:`Search`) and builds its fake with all of the above;
``HttpApi.recording(name)`` fakes any REST API with no routes described, and
:func:`openapi` builds one from an OpenAPI 3 document. :class:`McpServer` fakes an MCP
server (its tools, :class:`McpTool`) for agents that call tools over the Model Context
Protocol.
"""

from ._deploy import Deploy
from ._email import Email
from ._exports import EXPORT_FORMAT, Exported, ExportError, read_export
from ._faults import ActiveFault, Faults
from ._http_api import Effect, HttpApi, Lookup, Search
from ._journal import EffectRecord, Journal, RequestRecord
from ._keys import ApiKey, Keys, derive_key, derived_label
from ._mcp import McpProvider, McpServer, McpTool
from ._mock import mock, transport
from ._model import Model, ModelCall
from ._openapi import openapi
from ._payments import Payments
from ._provider import ATTEMPT_HEADER, CORRELATION_HEADER, TENANT_HEADER, Provider, ResponseInfo
from ._script import Conversation, Message, ModelTurn, Script, ToolCall, call, say
from ._server import Admit, Handle, Preamble, Server, loopback, serve
from ._settings import ProviderSettings, Settings
from ._smtp import Smtp
from ._smtp_server import SmtpServer, smtp_loopback
from ._tickets import Tickets

#: Every simulated provider, by name.
PROVIDERS: dict[str, type[Provider]] = {
    provider.name: provider for provider in (Payments, Email, Tickets, Deploy, Model, Smtp)
}

__all__ = [
    "ATTEMPT_HEADER",
    "EXPORT_FORMAT",
    "ExportError",
    "Exported",
    "CORRELATION_HEADER",
    "TENANT_HEADER",
    "ActiveFault",
    "Admit",
    "ApiKey",
    "Conversation",
    "Deploy",
    "Email",
    "Effect",
    "EffectRecord",
    "HttpApi",
    "McpProvider",
    "McpServer",
    "McpTool",
    "Lookup",
    "Search",
    "PROVIDERS",
    "Faults",
    "Handle",
    "Preamble",
    "Journal",
    "Keys",
    "Message",
    "Model",
    "ModelCall",
    "ModelTurn",
    "Payments",
    "Provider",
    "ProviderSettings",
    "RequestRecord",
    "ResponseInfo",
    "Script",
    "Server",
    "Settings",
    "Smtp",
    "SmtpServer",
    "Tickets",
    "ToolCall",
    "call",
    "derive_key",
    "derived_label",
    "loopback",
    "mock",
    "read_export",
    "openapi",
    "say",
    "serve",
    "smtp_loopback",
    "transport",
]
