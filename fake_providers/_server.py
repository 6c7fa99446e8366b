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

One strict request reader, so a broken, stalled or hostile client cannot hold the server or
its memory: a body larger than ``max_body`` (default 10 MiB) is answered 413 without being read
(a chunked one as soon as its chunks pass the limit); a ``Content-Length`` that is not plain
ASCII digits (at most 18), two of them, or one beside ``Transfer-Encoding`` is answered 400; a
``Transfer-Encoding`` other than ``chunked``, a chunk size that is not 1 to 8 hex digits, a
chunk not followed by its line end, or more than 64 trailer lines, 400; a body that ends before
its length is answered 400 and never handled; a connection on which no byte arrives for
``read_timeout`` seconds (default 10) is closed without an answer, and so is one whose request
is not whole ``request_deadline`` seconds (default 30) after its first byte (one byte every few
seconds does not hold it); beyond ``max_connections`` (default 256) connections at once, a new
one is closed at once. A request's line and headers are limited as ``http.server`` limits them
(64 KiB, 100 headers); a handler that meets a JSON body nested too deep answers 400. Leaving
``serve()`` does not wait for stalled clients: the connections still sending their request are
shut, and what they had sent is dropped unhandled. None of these reaches the provider: its
journal records only requests that arrived whole.

Any handler (``serve(handle)``): besides a :class:`Provider`, ``serve`` takes a plain
``handle(request) -> response`` callable, as httpx's ``MockTransport`` does, and serves it the
same way: raising ``httpx.TransportError`` closes the connection without an answer. With
``prefix`` (a secret first path segment, e.g. ``"/s3cret"``), a request whose path does not
begin with it is answered 401 before its body is read, and the handler sees the path without
it (the URL :func:`serve` yields ends in it).

Settling (:meth:`Server.settle`): a harness that copies or replaces a provider's journal, or
reads it as evidence, must know that no request is still being answered. ``settle()`` returns
once every request that has reached the server is answered or dropped: no connection waits in
the listening backlog, none has unread bytes (or an unread end of input), none is being read
or handled. A connection whose client sent nothing yet (a live client that is stopped before
its request) does not hold it. A request from a client that has died is still answered first
(its bytes are in the kernel's buffers): a provider applies what reached it, whoever waits for
the answer.

Admission (``serve(provider, admit=...)``): ``admit(request) -> str | None`` is asked before a
whole request is handled; a reason string refuses it with a 401 that says so, and the request
never reaches the provider (nothing is journaled; :attr:`Server.refused` counts them). A harness
uses it to keep requests that are not its own run's (another run's process on a reused port, a
process of the run that has already ended) out of the ground truth.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import math
import re
import select
import selectors
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from ._provider import Provider

__all__ = ["Admit", "Handle", "Preamble", "Server", "loopback", "serve"]

#: ``preamble(request, response) -> bytes``: what to write before the status line of ``response``.
Preamble = Callable[[httpx.Request, httpx.Response], bytes]
#: ``admit(request) -> None`` to let a request through, or the reason it is refused.
Admit = Callable[[httpx.Request, "tuple[str, int]"], "str | None"]

_HOP_BY_HOP = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
#: A Content-Length is plain decimal digits, few enough to be a size (no sign, "_", spaces).
_LENGTH = re.compile(r"[0-9]{1,18}")
#: ``serve``'s default body limit.
MAX_BODY = 10 * 1024 * 1024
#: ``serve``'s default read timeout, in seconds.
READ_TIMEOUT = 10.0
#: ``serve``'s default time a request may take to arrive whole, from its first byte (seconds).
REQUEST_DEADLINE = 30.0
#: ``serve``'s default cap on connections open at once.
MAX_CONNECTIONS = 256
#: A chunk size: 1 to 8 hex digits (a chunk of at most 4 GiB; the body limit is lower), then
#: chunk extensions, which are ignored.
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,8})(;[^\r\n]*)?\r?\n")
#: At most this many trailer lines after a chunked body.
_MAX_TRAILERS = 64
#: ``handle(request) -> response``: what a server answers (a provider's ``handle``).
Handle = Callable[[httpx.Request], httpx.Response]


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins request threads: nothing outlives serve()
    block_on_close = True

    def __init__(
        self, handle: Handle, name: str, preamble: Preamble | None, *, max_body: int,
        read_timeout: float, request_deadline: float, max_connections: int,
        admit: Admit | None = None, prefix: str = "", join_threads: bool = True,
    ) -> None:
        self.handle = handle
        self.name = name
        self.preamble = preamble
        self.admit = admit
        self.prefix = prefix
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.request_deadline = request_deadline
        self.max_connections = max_connections
        # A server whose handlers may wait without end (a fail point held at a gate) lets
        # their threads go when it closes; a provider's joins them (nothing outlives it).
        self.daemon_threads = not join_threads
        self.block_on_close = join_threads
        #: When each connection's request began to arrive (its deadline runs from there).
        self._first_byte: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._reading: set[socket.socket] = set()  # connections still sending their request
        #: Every accepted connection not yet shut, and those whose thread waits for bytes.
        self._open: set[socket.socket] = set()
        self._blocked: set[socket.socket] = set()
        #: Accepts in progress in the serving thread; connections accepted so far, and the
        #: number each one got.
        self._accepting = 0
        self._accepted = 0
        self._number: dict[socket.socket, int] = {}
        self._closing = False
        #: Requests refused by ``admit`` (never handled, never journaled), with the reason.
        self.refused: list[tuple[str, str, str]] = []
        #: Holders of :meth:`held`, and requests being handled (admitted, then answered).
        self._holders = 0
        self._handling = 0
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
                with self._lock:
                    self._accepting += 1  # settle() waits for it
                try:
                    self.handle_request()  # the listening socket is ready: this does not block
                finally:
                    with self._changed:
                        self._accepting -= 1
                        self._changed.notify_all()

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
        # serve_forever has returned, every accepted connection is known to close_stalled,
        # and settle() knows it before the accept counts as done. Its thread has read nothing
        # yet: it counts as waiting for bytes.
        with self._lock:
            full = len(self._open) >= self.max_connections
            if not full:
                self._reading.add(request)
                self._open.add(request)
                self._blocked.add(request)
                self._accepted += 1
                self._number[request] = self._accepted
        if full:  # too many at once: this one is closed unanswered, no thread is started
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._changed:
            self._reading.discard(request)
            self._open.discard(request)
            self._blocked.discard(request)
            self._number.pop(request, None)
            self._first_byte.pop(request, None)
            self._changed.notify_all()
        super().shutdown_request(request)

    def wait_for_bytes(self, connection: socket.socket) -> bool:
        """Block until ``connection`` has bytes (or the end of input) to read; False after
        ``read_timeout`` seconds with nothing. Meanwhile the connection does not hold settle()
        unless something arrives; it holds it again from the moment this returns, before a
        byte is taken: what settle() sees of a connection is never stale."""
        with self._lock:
            self._blocked.add(connection)
            began = self._first_byte.get(connection)
        wait = self.read_timeout
        if began is not None:  # the request has begun: it must be whole by its deadline
            wait = min(wait, began + self.request_deadline - time.monotonic())
        try:
            ready = wait > 0 and _wait_readable(connection, wait)
        finally:
            with self._changed:
                self._blocked.discard(connection)
                if ready:
                    self._first_byte.setdefault(connection, time.monotonic())
                self._changed.notify_all()
        return ready

    @contextmanager
    def held(self) -> Iterator[None]:
        """No request is handled while the block runs: one being handled when it starts is
        finished first, and later ones wait (their clients see a slower answer)."""
        with self._changed:
            self._holders += 1
            while self._handling:
                self._changed.wait()
        try:
            yield
        finally:
            with self._changed:
                self._holders -= 1
                self._changed.notify_all()

    @contextmanager
    def handling(self) -> Iterator[None]:
        """A whole request is admitted and answered (waits while the server is held)."""
        with self._changed:
            while self._holders:
                self._changed.wait()
            self._handling += 1
        try:
            yield
        finally:
            with self._changed:
                self._handling -= 1
                self._changed.notify_all()

    def settle(self, timeout: float) -> bool:
        """Wait until every request that reached the server before this call is answered or
        dropped (see the module docstring); False if that takes longer than ``timeout``
        seconds. Requests that arrive meanwhile are not waited for: a client that never
        stops sending cannot hold it."""
        deadline = time.monotonic() + timeout
        with self._changed:
            # The connections in the listening backlog now are part of "before this call":
            # wait until the serving thread has accepted them.
            # (An accept in progress is counted: its connection may have left the queue.)
            target = self._accepted + self._accepting + _backlog(self.socket)
            while self._accepted < target and (
                self._accepting or _readable([self])
            ):
                if not self._wait(deadline):
                    return False
            last = self._accepted
            while True:
                waiting = [c for c, n in self._number.items() if n <= last]
                working = [c for c in waiting if c not in self._blocked]
                if not working and not _readable(waiting):
                    return True
                if not self._wait(deadline):
                    return False

    def _wait(self, deadline: float) -> bool:
        """Wait (holding the condition) for a change, or a moment; False past ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        # A connection's bytes arriving wakes no one here: look again soon.
        self._changed.wait(min(remaining, 0.002))
        return True


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


def _backlog(listening: socket.socket) -> int:
    """How many connections wait in ``listening``'s accept queue (Linux: ``TCP_INFO``'s
    ``tcpi_unacked`` of a listening socket); 0 where that cannot be read (the caller then
    looks at whether the socket is readable)."""
    try:
        info = listening.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (OSError, AttributeError):
        return 0
    if len(info) < 28:
        return 0
    return int.from_bytes(info[24:28], sys.byteorder)


def _readable(sockets: list[Any]) -> bool:
    """Whether any of ``sockets`` has something to read now (bytes, the end of input, or a
    connection to accept)."""
    poller = select.poll()
    for sock in sockets:
        try:
            poller.register(sock, select.POLLIN)
        except (OSError, ValueError):  # closed meanwhile: its handler is finishing
            return True
    return bool(poller.poll(0))


def _wait_readable(sock: socket.socket, timeout: float) -> bool:
    try:
        ready, _, _ = select.select([sock], [], [], timeout)
    except (OSError, ValueError):
        return True  # let the read itself meet the error
    return bool(ready)


class _TrackedSocketReader(io.RawIOBase):
    """The raw reader under a handler's ``rfile``: it waits for bytes through
    :meth:`_Server.wait_for_bytes` before taking any, so settle() always knows whether the
    handler is waiting for its client or working."""

    def __init__(self, server: _Server, connection: socket.socket) -> None:
        self._server = server
        self._connection = connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._server.wait_for_bytes(self._connection):
            raise TimeoutError("the request did not arrive in time")
        return self._connection.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: closing it is unambiguous
    # A request line it cannot read still gets a status line (not an HTTP/0.9 bare body).
    default_request_version = "HTTP/1.0"
    # The server's own answers (a malformed request, no credential) are JSON, as every
    # provider's and the fail-point protocol's are (http.server escapes the texts for HTML,
    # which keeps them inside the JSON strings).
    error_content_type = "application/json"
    error_message_format = '{"error": "%(message)s: %(explain)s", "status": %(code)d}\n'

    def setup(self) -> None:
        super().setup()
        # Each server has its own read timeout (the class attribute ``timeout`` is shared).
        self.connection.settimeout(self.server.read_timeout)
        self.rfile = io.BufferedReader(_TrackedSocketReader(self.server, self.connection))

    def _serve(self) -> None:
        path = self._admitted_path()
        if path is None:
            return
        body = self._body()
        if body is None:
            return
        if not self.server.read_whole(self.connection):
            self.close_connection = True  # the server is closing: what was read may be partial
            return
        self.path = path
        host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_address[1]}"
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]
        try:
            request = httpx.Request(
                self.command, f"http://{host}{self.path}", headers=headers, content=body
            )
        except (httpx.InvalidURL, ValueError):
            self.send_error(400, "Invalid request line")
            return
        with self.server.handling():
            response = self._answer(request)
        if response is None:
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

    def _admitted_path(self) -> str | None:
        """The request's path, without the server's secret prefix; None (a 401 answered,
        the body never read) when it does not begin with it."""
        prefix = self.server.prefix
        if not prefix:
            return self.path
        given, rest = self.path[: len(prefix)], self.path[len(prefix) :]
        if hmac.compare_digest(given.encode(), prefix.encode()) and (not rest or rest[0] in "/?"):
            return rest or "/"
        with self.server._lock:
            self.server.refused.append(
                (self.command, urllib.parse.urlsplit(self.path).path[:200], "no credential")
            )
        self.send_error(401, "Not admitted", "use the URL the harness gave this process")
        return None

    def _body(self) -> bytes | None:
        """The request's body, read strictly (see the module docstring); None when it was
        refused (the error already answered) or the connection must close unanswered."""
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or ()}
        codings = self.headers.get_all("Transfer-Encoding") or ()
        if codings:
            if lengths:
                self.send_error(400, "Content-Length beside Transfer-Encoding")
                return None
            if [c.strip().lower() for c in codings] != ["chunked"]:
                self.send_error(400, "Unsupported Transfer-Encoding", "only chunked is read")
                return None
            return self._chunked()
        if len(lengths) > 1:
            self.send_error(400, "Conflicting Content-Length headers")
            return None
        text = lengths.pop() if lengths else "0"
        if not _LENGTH.fullmatch(text):
            self.send_error(400, "Invalid Content-Length", f"{text[:40]!r} is not a body size")
            return None
        length = int(text)
        if length > self.server.max_body:
            self._too_large()
            return None
        # A read that times out raises TimeoutError, which http.server answers by hanging up.
        body = self.rfile.read(length) if length else b""
        if len(body) < length:
            self._incomplete(f"the body ended after {len(body)} of {length} bytes")
            return None
        return body

    def _incomplete(self, what: str) -> None:
        """The body ended early: a 400, unless the server is closing and cut it short (then
        the connection closes unanswered, as for any stalled client)."""
        if self.server._closing:
            self.close_connection = True
            return
        self.send_error(400, "Incomplete body", what)

    def _chunked(self) -> bytes | None:
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            found = _CHUNK_SIZE.fullmatch(line)
            if found is None:
                if not line:
                    self._incomplete("the body ended before its last chunk")
                else:
                    self.send_error(400, "Invalid chunk size", "a chunk size is 1 to 8 hex digits")
                return None
            size = int(found.group(1), 16)
            if size == 0:
                break
            if len(body) + size > self.server.max_body:
                self._too_large()
                return None
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                self._incomplete("a chunk ended early")
                return None
            body += chunk
        for _ in range(_MAX_TRAILERS):
            if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                return bytes(body)
        self.send_error(400, "Too many trailer lines")
        return None

    def _too_large(self) -> None:
        self.send_error(
            413, "Request body too large",
            f"this server takes bodies of at most {self.server.max_body} bytes",
        )

    def _answer(self, request: httpx.Request) -> httpx.Response | None:
        """The provider's response to an admitted request; None when the client gets none
        (refused, or a fault that closes the connection) or the server's own error answer
        was sent."""
        if self.server.admit is not None:
            try:
                refusal = self.server.admit(request, self.client_address)
            except Exception as exc:  # the hook's bug refuses, never admits by accident
                refusal = f"the admission hook raised {exc!r}"
            if refusal is not None:
                with self.server._lock:
                    self.server.refused.append((self.command, self.path, refusal))
                self.send_error(401, "Not admitted", refusal)
                return None
        try:
            return self.server.handle(request)
        except httpx.TransportError:
            self.close_connection = True  # no response at all: the client sees the socket close
            return None
        except Exception as exc:  # a broken journal must not kill the server thread silently
            self.send_error(500, "Fake provider error", f"{self.server.name} raised {exc!r}")
            return None

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


class Server:
    """A request handler served on loopback (:func:`loopback`): its ``url``, :meth:`settle`,
    :meth:`held`, and the requests it refused."""

    def __init__(self, server: _Server, url: str, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        #: The base URL to point a client at (ending in the server's prefix, if any).
        self.url = url

    def start(self) -> None:
        """Start serving, for a server made with ``start=False`` (until then its clients'
        connections wait in the listening backlog); nothing if it serves already."""
        if not self._thread.is_alive() and self._thread.ident is None:
            self._thread.start()

    def settle(self, timeout: float = 30.0) -> bool:
        """Block until every request that reached the server before this call is answered or
        dropped (no connection waiting to be accepted, none with unread bytes, none being
        answered); return False if that takes more than ``timeout`` seconds."""
        return self._server.settle(timeout)

    def held(self) -> contextlib.AbstractContextManager[None]:
        """A context manager: while it runs, the server handles no request (a request
        being handled when it starts is finished first; later ones wait). For copying or
        replacing a provider's journal with no thread of this process writing it."""
        return self._server.held()

    @property
    def refused(self) -> list[tuple[str, str, str]]:
        """``(method, path, reason)`` of every request refused by ``admit`` or for want of
        the prefix, in order."""
        with self._server._lock:
            return list(self._server.refused)


def serve(
    provider: Provider | Handle,
    *,
    preamble: Preamble | None = None,
    max_body: int = MAX_BODY,
    read_timeout: float = READ_TIMEOUT,
) -> contextlib.AbstractContextManager[str]:
    """Serve ``provider`` on ``http://127.0.0.1:<free port>`` in a background thread; yields
    the base URL to point a client at. :func:`loopback` with fewer options.

    ``provider`` is a :class:`Provider`, or any ``handle(request) -> response`` callable.
    ``preamble(request, response) -> bytes``, if given, is called with every response the
    provider produces; what it returns is written before the status line, in the same write as
    the response (see the module docstring). ``max_body``: the largest body accepted, in bytes
    (larger: 413, unread). ``read_timeout``: seconds a connection may send nothing before it is
    closed unanswered. Raises ValueError for a negative or non-integer ``max_body``, or a
    ``read_timeout`` that is not a positive finite number.
    """
    return _urls(loopback(provider, preamble=preamble, max_body=max_body,
                          read_timeout=read_timeout))


@contextmanager
def _urls(served: contextlib.AbstractContextManager[Server]) -> Iterator[str]:
    with served as server:
        yield server.url


@contextmanager
def loopback(
    target: Provider | Handle,
    *,
    preamble: Preamble | None = None,
    admit: Admit | None = None,
    prefix: str = "",
    max_body: int = MAX_BODY,
    read_timeout: float = READ_TIMEOUT,
    request_deadline: float = REQUEST_DEADLINE,
    max_connections: int = MAX_CONNECTIONS,
    join_threads: bool = True,
    name: str | None = None,
    start: bool = True,
) -> Iterator[Server]:
    """Serve ``target`` (a :class:`Provider`, or any ``handle(request) -> response``) on
    ``http://127.0.0.1:<free port>`` in a background thread; yields its :class:`Server`.

    On exit the server stops accepting, the connections still sending a request are shut
    (their request is dropped), the request threads are joined (unless ``join_threads`` is
    false: then a handler that waits without end, a fail point held at a gate, does not hold
    the exit) and the listening socket is closed.

    ``preamble``: as for :func:`serve`. ``admit(request, client_address)``, if given, is asked
    before each whole request is handled: ``None`` lets it through, a string refuses it (401
    with that reason; never handled or journaled). ``prefix`` (``"/<secret>"``): a request
    whose path does not begin with it is answered 401 before its body is read; the handler
    sees the path without it, and the URL ends in it. ``max_body``, ``read_timeout``,
    ``request_deadline`` (seconds from a request's first byte until it must be whole) and
    ``max_connections``: the reader's limits (module docstring). ``name`` names the server's
    thread and its 500 answers (default: the provider's name). ``start=False`` binds and
    listens, and serves only from :meth:`Server.start` on (a process that forks a program
    right after, before any thread of the server runs). Raises ValueError for a limit
    that is not a positive number, or a prefix that is not ``"/"`` and URL-safe characters.
    """
    handle = target.handle if isinstance(target, Provider) else target
    label = name or (target.name if isinstance(target, Provider) else "handler")
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
        raise ValueError(f"max_body must be a number of bytes >= 0, not {max_body!r}.")
    for what, value in (("read_timeout", read_timeout), ("request_deadline", request_deadline)):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise ValueError(f"{what} must be a finite number of seconds > 0, not {value!r}.")
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or (
        max_connections < 1
    ):
        raise ValueError(f"max_connections must be 1 or more, not {max_connections!r}.")
    if prefix and not re.fullmatch(r"/[A-Za-z0-9_-]+", prefix):
        raise ValueError(f"prefix must be '/' and URL-safe characters, not {prefix!r}.")
    server = _Server(
        handle, label, preamble, max_body=max_body, read_timeout=read_timeout,
        request_deadline=request_deadline, max_connections=max_connections, admit=admit,
        prefix=prefix, join_threads=join_threads,
    )
    thread = threading.Thread(
        target=server.serve_until_stopped, name=f"fake-{label}-server", daemon=True
    )
    handle_ = Server(server, f"http://127.0.0.1:{server.server_address[1]}{prefix}", thread)
    if start:
        thread.start()
    try:
        yield handle_
    finally:
        if thread.ident is not None:
            server.stop()
            thread.join()
        server.close_stalled()
        server.server_close()
