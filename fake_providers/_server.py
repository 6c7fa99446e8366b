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

Limits, so a broken or stalled client cannot hold the server: a body larger than ``max_body``
(default 10 MiB) is answered 413 without being read; a ``Content-Length`` that is not a plain
decimal number of at most 18 digits, or two different ones, is answered 400; a body that ends
before its ``Content-Length`` is answered 400 and never handled; a connection on which no byte
arrives for ``read_timeout`` seconds (default 10) is closed without an answer. Leaving ``serve()``
does not wait for stalled clients: the connections still sending their request are shut, and
what they had sent is dropped unhandled. None of these reaches the provider: its journal records
only requests that arrived whole.
"""

from __future__ import annotations

import contextlib
import math
import re
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from ._provider import Provider

__all__ = ["Preamble", "serve"]

#: ``preamble(request, response) -> bytes``: what to write before the status line of ``response``.
Preamble = Callable[[httpx.Request, httpx.Response], bytes]

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
#: A Content-Length is plain decimal digits, few enough to be a size (no sign, "_", spaces).
_LENGTH = re.compile(r"[0-9]{1,18}")
#: ``serve``'s default body limit.
MAX_BODY = 10 * 1024 * 1024
#: ``serve``'s default read timeout, in seconds.
READ_TIMEOUT = 10.0


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins request threads: nothing outlives serve()
    block_on_close = True

    def __init__(
        self, provider: Provider, preamble: Preamble | None, *, max_body: int,
        read_timeout: float,
    ) -> None:
        self.provider = provider
        self.preamble = preamble
        self.max_body = max_body
        self.read_timeout = read_timeout
        self._lock = threading.Lock()
        self._reading: set[socket.socket] = set()  # connections still sending their request
        self._closing = False
        # Written to by stop(): the serving loop wakes at once (a harness starts and stops
        # servers for every crash case, so waiting out a poll interval adds up).
        self._wake_read, self._wake_write = socket.socketpair()
        super().__init__(("127.0.0.1", 0), _Handler)

    def serve_until_stopped(self) -> None:
        """Accept and hand off requests until :meth:`stop` is called."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is self._wake_read for key, _ in ready):
                    return
                self.handle_request()  # the listening socket is ready: this does not block

    def stop(self) -> None:
        """Make :meth:`serve_until_stopped` return now (from any thread)."""
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")

    def server_close(self) -> None:
        super().server_close()
        self._wake_read.close()
        self._wake_write.close()

    def process_request(self, request: Any, client_address: Any) -> None:
        # Registered here, in the serving thread, before the handler's thread starts: once
        # serve_forever has returned, every accepted connection is known to close_stalled.
        with self._lock:
            self._reading.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._lock:
            self._reading.discard(request)
        super().shutdown_request(request)

    def read_whole(self, connection: socket.socket) -> bool:
        """Mark the request on ``connection`` as read; False if the server is closing, in which
        case what was read may be a stalled request cut short: drop it."""
        with self._lock:
            self._reading.discard(connection)
            return not self._closing

    def close_stalled(self) -> None:
        """Wake every handler still reading a request: its next read sees the end of input."""
        with self._lock:
            self._closing = True
            for connection in self._reading:
                # Shut only the reading side: a thread that already read its request whole
                # can still write its answer.
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RD)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: closing it is unambiguous

    def setup(self) -> None:
        super().setup()
        # Each server has its own read timeout (the class attribute ``timeout`` is shared).
        self.connection.settimeout(self.server.read_timeout)

    def _serve(self) -> None:
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        if len(lengths) > 1:
            self.send_error(400, "Conflicting Content-Length headers")
            return
        text = lengths.pop() if lengths else "0"
        if not _LENGTH.fullmatch(text):
            self.send_error(400, "Invalid Content-Length", f"{text[:40]!r} is not a body size")
            return
        length = int(text)
        if length > self.server.max_body:
            self.send_error(
                413, "Request body too large",
                f"this server takes bodies of at most {self.server.max_body} bytes",
            )
            return
        # A read that times out raises TimeoutError, which http.server answers by hanging up.
        body = self.rfile.read(length) if length else b""
        if not self.server.read_whole(self.connection):
            self.close_connection = True  # the server is closing: what was read may be partial
            return
        if len(body) < length:
            self.send_error(400, "Incomplete body",
                            f"the body ended after {len(body)} of {length} bytes")
            return
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
            self.send_error(500, "Fake provider error", f"the fake provider raised {exc!r}")
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
def serve(
    provider: Provider,
    *,
    preamble: Preamble | None = None,
    max_body: int = MAX_BODY,
    read_timeout: float = READ_TIMEOUT,
) -> Iterator[str]:
    """Serve ``provider`` on ``http://127.0.0.1:<free port>`` in a background thread.

    Yields the base URL to point a client at. On exit the server stops accepting, the
    connections still sending a request are shut (their request is dropped), every request
    thread is joined and the listening socket is closed: it does not wait for stalled clients.

    ``preamble(request, response) -> bytes``, if given, is called with every response the
    provider produces; what it returns is written before the status line, in the same write as
    the response (see the module docstring). ``max_body``: the largest body accepted, in bytes
    (larger: 413, unread). ``read_timeout``: seconds a connection may send nothing before it is
    closed unanswered. Raises ValueError for a negative or non-integer ``max_body``, or a
    ``read_timeout`` that is not a positive finite number.
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        raise ValueError(f"max_body must be a number of bytes >= 0, not {max_body!r}.")
    if (
        isinstance(read_timeout, bool)
        or not isinstance(read_timeout, (int, float))
        or not math.isfinite(read_timeout)
        or read_timeout <= 0
    ):
        raise ValueError(
            f"read_timeout must be a finite number of seconds > 0, not {read_timeout!r}."
        )
    server = _Server(provider, preamble, max_body=max_body, read_timeout=read_timeout)
    thread = threading.Thread(
        target=server.serve_until_stopped, name=f"fake-{provider.name}-server", daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stop()
        thread.join()
        server.close_stalled()
        server.server_close()
