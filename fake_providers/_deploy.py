"""deploy: a non-idempotent provider with no lookup at all.

One endpoint (JSON; ``X-Request-Id`` on every response)::

    POST /v1/deployments   {"service": str, "version": str, "environment": str,
                            "metadata": {str: str}?}            deploy:write

It answers ``202 {"status": "accepted"}``: no id, nothing to query back, so a client that lost
the answer can never find out whether the deployment happened (recovery must go to
MANUAL_REVIEW). Every accepted request is a deployment: the same body twice deploys twice.

``metadata["crashpoints_correlation_id"]`` (or the ``X-Correlation-Id`` header) is recorded as the
correlation id, ``metadata["crashpoints_args_hash"]`` as the declared args hash. Payload hash:
``args_hash`` of the JSON body as sent. Logical operation: the correlation id, or the payload hash.

Aliases (journal ``aliases``): the deployment's object id (``deploy_...``, never shown to the
client) and the request id (``X-Request-Id``), which is all the client ever sees of it.
"""

from __future__ import annotations

import re
from typing import Any

from ._provider import (
    CORRELATION_HEADER,
    Call,
    EffectDraft,
    Provider,
    Reply,
    Route,
    json_body,
    json_document,
    payload_hash,
)

__all__ = ["Deploy"]

_FIELDS = ("service", "version", "environment")


class Deploy(Provider):
    """The deploy provider: not idempotent, no lookup. See the module docstring."""

    name = "deploy"
    default_base_url = "https://deploy.crashpoints.test"
    request_id_prefix = "dep_req_"
    has_lookup = False
    has_search = False

    def routes(self) -> list[Route]:
        return [
            Route("POST", re.compile(r"/v1/deployments"), "deployments.create", "write",
                  "deploy:write", self._create),
        ]

    def error(self, status: int, message: str, *, code: str | None = None) -> Reply:
        body = {"error": {"code": code or _default_code(status), "message": message}}
        return Reply(status, json_body(body), {"Content-Type": "application/json"})

    def _create(self, call: Call) -> Reply:
        request = call.request
        content_type = call.media_type
        if content_type != "application/json":
            return self.error(
                400, f"Send the deployment as application/json, not {content_type or 'nothing'}.",
                code="unsupported_content_type",
            )
        try:
            data = json_document(request.content)
        except ValueError:
            return self.error(400, "The request body is not valid JSON.", code="malformed_body")
        if not isinstance(data, dict):
            return self.error(400, "The request body must be a JSON object.", code="malformed_body")
        for name in _FIELDS:
            if not isinstance(data.get(name), str) or not data[name]:
                return self.error(400, f"Missing required field {name!r} (a non-empty string).",
                                  code="missing_field")
        unknown = sorted(set(data) - {*_FIELDS, "metadata"})
        if unknown:
            return self.error(400, f"Unknown field {unknown[0]!r}.", code="unknown_field")
        metadata = data.get("metadata", {})
        if not isinstance(metadata, dict) or not all(
            isinstance(v, str) for v in metadata.values()
        ):
            return self.error(400, "metadata must be an object of strings.", code="invalid_field")
        phash = payload_hash(data)
        if phash is None:
            return self.error(400, "The request body is not valid JSON.", code="malformed_body")
        correlation = metadata.get("crashpoints_correlation_id") or request.headers.get(
            CORRELATION_HEADER
        )
        deployment: dict[str, Any] = {**data, "deployed_at": call.now}
        deployment_id = f"deploy_{call.seq:014d}"
        return Reply(
            202,
            json_body({"status": "accepted"}),
            {"Content-Type": "application/json"},
            effect=EffectDraft("deployment", deployment_id, deployment),
            correlation_id=correlation,
            operation_key=correlation or phash,
            payload_hash=phash,
            args_hash=metadata.get("crashpoints_args_hash"),
            aliases=(deployment_id, call.request_id),
        )


def _default_code(status: int) -> str:
    return {401: "unauthorized", 403: "forbidden", 404: "not_found", 429: "rate_limited"}.get(
        status, "server_error" if status >= 500 else "bad_request"
    )
