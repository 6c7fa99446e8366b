"""B and C for a program in any language: a relay in front of each provider's server.

A case's loopback servers write a preamble line before each answer to a process of the case
(``wire.py``); a Python worker's hooked sockets strip it and fire B and C. A program in
another language would choke on it. So the bridge that runs a command (``_harness/command.py``)
puts a :class:`Relay` in front of each provider and gives the command the relay's address as
the provider's: a transparent HTTP/1.1 forwarder that sends the command's request (method,
path, query, headers, the command's own key, body) on to the provider's server with
``http.client``, inside the bridge, whose sockets carry the wire hooks:

- **B** fires when the provider's answer to a write it accepted reaches the bridge, before
  the relay has passed a byte of it to the command. A kill there kills the bridge and its
  process group, the command with it, while the command waits for its answer;
- **C** is counted there and deferred to the bridge's next fail point: the command's next
  ``POST /failpoint/...`` (``protocol.py``), or the next answer the relay gets;
- a pause at B holds the answer until the harness releases the gate.

What the server does not answer (a lookup timeout, a lost response) the relay does not answer
either: it closes the command's connection. The answer's status, headers and body pass on
unchanged (no content decoding), except the hop-by-hop headers; every answer closes its
connection (HTTP/1.0), as the servers' own do.
"""

from __future__ import annotations

import http.client
import urllib.parse
from http.server import BaseHTTPRequestHandler

from .protocol import LoopbackServer, read_body

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
    }
)
#: The largest request body the relay forwards (the servers' own limit is 10 MiB).
MAX_BODY = 10 * 1024 * 1024


class _Server(LoopbackServer):
    def __init__(self, upstream: str, timeout: float, credential: str | None) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.netloc = parts.netloc
        self.timeout = timeout
        super().__init__(_Handler, credential=credential)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def _relay(self) -> None:
        path = self.server.admitted_path(self)
        if path is None:
            return
        body = read_body(self, limit=MAX_BODY)
        if body is None:
            self.send_error(400, "Malformed or oversized request body")
            return
        server = self.server
        upstream = http.client.HTTPConnection(server.host, server.port, timeout=server.timeout)
        try:
            upstream.putrequest(self.command, path, skip_host=True, skip_accept_encoding=True)
            upstream.putheader("Host", server.netloc)
            for name, value in self.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    upstream.putheader(name, value)
            if body or self.command in ("POST", "PUT", "PATCH"):
                upstream.putheader("Content-Length", str(len(body)))
            upstream.endheaders(body or None)
            response = upstream.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException):
            # The server hung up without an answer: so does the relay.
            self.close_connection = True
            return
        finally:
            upstream.close()
        lines = [f"HTTP/1.0 {response.status} {response.reason}".encode("latin-1")]
        lines += [
            f"{name}: {value}".encode("latin-1")
            for name, value in response.getheaders()
            if name.lower() not in _HOP_BY_HOP
        ]
        lines.append(f"Content-Length: {len(content)}".encode("latin-1"))
        self.wfile.write(b"\r\n".join(lines) + b"\r\n\r\n" + content)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _relay

    def log_message(self, format: str, *args: object) -> None:
        pass  # the provider's journal is the log


class Relay:
    """A relay to the provider server at ``upstream`` on ``http://127.0.0.1:<free port>``.

    Bound and listening once made; it serves from :meth:`start` on, until :meth:`close`.
    ``timeout`` bounds each forwarded request (seconds). ``url``, the provider's address to
    give the one process that may use it, ends in its secret ``credential`` (a new random one
    when not given): a request without it is answered ``401`` and never forwarded.
    """

    def __init__(
        self, upstream: str, *, timeout: float = 10.0, credential: str | None = None
    ) -> None:
        self._server = _Server(upstream, timeout, credential)
        self.url = self._server.url

    @property
    def refused(self) -> list[tuple[str, str]]:
        """``(method, path)`` of each request refused for want of the credential."""
        return list(self._server.refused)

    def start(self) -> None:
        self._server.start(f"crashpoints-relay-{self._server.server_address[1]}")

    def close(self) -> None:
        self._server.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
