"""Loopback access: a provider as a real HTTP server on 127.0.0.1, for clients that do not use
httpx (``requests``, ``urllib``: stripe-python's default client, PyGithub, sendgrid).

The server turns each HTTP request into an ``httpx.Request`` and calls the same
``provider.handle`` as the in-process routes, so the same requests get the same answers. When a
fault says the client gets no response (a lookup timeout, a lost response), the server closes the
connection without answering: the client sees a connection error at once (there is no real wait,
so a lookup timeout and a lost response look alike to the client; both mean "unknown").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from ._provider import Provider

__all__ = ["serve"]

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins request threads: nothing outlives serve()
    block_on_close = True

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
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
        self.send_response(response.status_code)
        for name, value in response.headers.multi_items():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

    def log_message(self, format: str, *args: object) -> None:
        pass  # the journal is the log


@contextmanager
def serve(provider: Provider) -> Iterator[str]:
    """Serve ``provider`` on ``http://127.0.0.1:<free port>`` in a background thread.

    Yields the base URL to point a client at. On exit the server stops, every request thread is
    joined and the listening socket is closed.
    """
    server = _Server(provider)
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
