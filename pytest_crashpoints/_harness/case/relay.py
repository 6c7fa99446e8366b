"""B and C for a program in any language: a relay in front of each provider's server.

A case's loopback servers write a preamble line before each answer to a process of the case
(``_inject/wire.py``); a Python worker's hooked sockets strip it and fire B and C. A program in
another language would choke on it. So the bridge that runs a command (``bridge.py``) puts a
:class:`Relay` in front of each provider and gives the command the relay's address as the
provider's: a transparent HTTP forwarder that sends the command's request (method, path,
query, headers, the command's own key, body) on to the provider's server with
``http.client``, inside the bridge, whose sockets carry the wire hooks:

- **B** fires when the provider's answer to a write it accepted reaches the bridge, before
  the relay has passed a byte of it to the command. A kill there kills the bridge and its
  process group, the command with it, while the command waits for its answer;
- **C** is counted there and deferred to the bridge's next fail point: the command's next
  ``POST /failpoint/...`` (``failpoint_server.py``), or the next answer the relay gets;
- a pause at B holds the answer until the harness releases the gate.

What the server does not answer (a lookup timeout, a lost response) the relay does not answer
either: it closes the command's connection. The answer's status, headers and body pass on
unchanged (no content decoding), except the hop-by-hop headers; every answer closes its
connection (HTTP/1.0), as the servers' own do. Like the fail-point server, a relay answers only
requests under the secret credential its URL ends in (``401`` for anything else, never
forwarded), and reads them with the providers' one strict reader.
"""

from __future__ import annotations

import http.client
import urllib.parse

import httpx

from .failpoint_server import Endpoint

__all__ = ["Relay"]

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "content-length",
        "host",
        # The relay's own server writes these for its answer.
        "server",
        "date",
    }
)
#: The largest request body the relay forwards (the servers' own limit).
MAX_BODY = 10 * 1024 * 1024


class _Forward:
    """The relay as a request handler: forward, answer what came back."""

    def __init__(self, upstream: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.netloc = parts.netloc
        self.timeout = timeout

    def __call__(self, request: httpx.Request) -> httpx.Response:
        target = request.url.raw_path.decode("ascii")
        upstream = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            upstream.putrequest(request.method, target, skip_host=True, skip_accept_encoding=True)
            upstream.putheader("Host", self.netloc)
            for name, value in request.headers.multi_items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            body = request.content
            if body or request.method in ("POST", "PUT", "PATCH"):
                upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException) as exc:
            # The server hung up without an answer: so does the relay.
            raise httpx.RemoteProtocolError(f"the provider gave no answer: {exc}") from None
        finally:
            upstream.close()
        headers = [(n, v) for n, v in response.getheaders() if n.lower() not in _HOP_BY_HOP]
        return httpx.Response(
            response.status,
            headers=headers,
            content=content,
            extensions={"reason_phrase": response.reason.encode("latin-1")},
        )


class Relay(Endpoint):
    """A relay to the provider server at ``upstream``, on ``http://127.0.0.1:<free port>``.

    Bound and listening once made; it serves from :meth:`start` on, until :meth:`close`.
    ``timeout`` bounds each forwarded request (seconds). ``url``, the provider's address to
    give the one process that may use it, ends in its secret ``credential`` (a new random one
    when not given): a request without it is answered ``401`` and never forwarded.
    """

    def __init__(
        self, upstream: str, *, timeout: float = 10.0, credential: str | None = None
    ) -> None:
        super().__init__(
            _Forward(upstream, timeout),
            credential=credential,
            max_body=MAX_BODY,
            name=f"relay-{urllib.parse.urlsplit(upstream).port}",
        )
