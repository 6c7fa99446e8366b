"""Loopback access: a provider as a real HTTP server on 127.0.0.1, for clients that do not use
httpx (``requests``, ``urllib``: stripe-python's default client, PyGithub, sendgrid).

The server turns each HTTP request into an ``httpx.Request`` and calls the same
``provider.handle`` as the in-process routes, so the same requests get the same answers. When a
fault says the client gets no response (a lookup timeout, a lost response), the server closes the
connection without answering: the client sees a connection error at once (there is no real wait,
so a lookup timeout and a lost response look alike to the client; both mean "unknown").

The preamble hook (``serve(provider, preamble=...)``) lets the harness reach the process that sent
a request at the moment its answer leaves: ``preamble(request, response) -> bytes`` is called
with the provider's response (its ``extensions["crashpoints"]`` is the :class:`ResponseInfo`), and
the bytes it returns are written immediately before the status line, in the same write as the
response. A client hooked to expect them strips them (e.g. a worker that crashes itself when told
to); a client that is not hooked sees a malformed response, so only return bytes to clients that
expect them (``b""`` writes nothing extra). It is never called when no response is sent (a lost
response, a lookup timeout) nor for the server's own error answers. A hook that raises, or returns
something other than bytes, does not take the server down: the client gets a 500 instead of the
provider's answer, and nothing more is journaled (the provider already recorded the request).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from ._provider import Provider

__all__ = ["Preamble", "serve"]

#: ``preamble(request, response) -> bytes``: what to write before the status line of ``response``.
Preamble = Callable[[httpx.Request, httpx.Response], bytes]

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins request threads: nothing outlives serve()
    block_on_close = True

    def __init__(self, provider: Provider, preamble: Preamble | None) -> None:
        self.provider = provider
        self.preamble = preamble
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: closing it is unambiguous
    timeout = 30

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError(length)
        except ValueError:
            self.send_error(400, "Invalid Content-Length")
            return
        body = self.rfile.read(length) if length else b""
        host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
        try:
            request = httpx.Request(
                self.command, f"http://{host}{self.path}", headers=headers, content=body
            )
        except (httpx.InvalidURL, ValueError):
            self.send_error(400, "Invalid request line")
            return
        try:
            response = self.server.provider.handle(request)
        except httpx.TransportError:
            self.close_connection = True  # no response at all: the client sees the socket close
            return
        except Exception as exc:  # a broken journal must not kill the server thread silently
            self.send_error(500, f"fake provider error: {exc!r}")
            return
        extra = b""
        if self.server.preamble is not None:
            try:
                extra = self.server.preamble(request, response)
                if not isinstance(extra, (bytes, bytearray)):
                    raise TypeError(f"the preamble hook returned {type(extra).__name__}, not bytes")
            except Exception as exc:  # the hook's bug is answered, not fatal to the server
                self.send_error(500, "Preamble hook failed", f"the preamble hook raised {exc!r}")
                return
        # One write: the preamble reaches the client together with the answer, never alone.
        self.wfile.write(bytes(extra) + self._head(response) + response.content)

    def _head(self, response: httpx.Response) -> bytes:
        """Status line and headers, the provider's headers spelled as it wrote them."""
        lines = [
            f"{self.protocol_version} {response.status_code} {response.reason_phrase}".encode(
                "latin-1"
            ),
            f"Server: {self.version_string()}".encode("latin-1"),
            f"Date: {self.date_time_string()}".encode("latin-1"),
            *(
                name + b": " + value
                for name, value in response.headers.raw
                if name.decode("latin-1").lower() not in _HOP_BY_HOP
            ),
            f"Content-Length: {len(response.content)}".encode("latin-1"),
        ]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass  # the journal is the log


@contextmanager
def serve(provider: Provider, *, preamble: Preamble | None = None) -> Iterator[str]:
    """Serve ``provider`` on ``http://127.0.0.1:<free port>`` in a background thread.

    Yields the base URL to point a client at. On exit the server stops, every request thread is
    joined and the listening socket is closed.

    ``preamble(request, response) -> bytes``, if given, is called with every response the
    provider produces; what it returns is written before the status line, in the same write as
    the response (see the module docstring).
    """
    server = _Server(provider, preamble)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05},
        name=f"fake-{provider.name}-server", daemon=True,
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
