"""The fail-point protocol: fail points for a program in any language, over loopback HTTP.

A worker the harness runs as a command (see ``_harness/command.py``) marks a fail point with one
request, and waits for the answer before it goes on::

    POST $CRASHPOINTS_URL/failpoint/{name}        body: nothing, or a JSON object (the context)

:class:`FailpointServer` serves it inside the *bridge*, the harness worker that started the
command and is armed with the schedule's faults. Each request calls ``crashpoint(name,
**context)`` in the bridge, in the thread that serves it, and the answer says what happened:

- nothing to do: ``200 {"action": "continue", "now": <harness seconds>}``, at once;
- a kill: no answer, ever. The bridge is SIGKILLed with its process group, which holds the
  command: the caller dies waiting, as a Python worker dies inside ``crashpoint()``;
- a pause: the answer waits until the harness releases the gate, then ``200 continue``;
- a raise: ``500 {"action": "raise", "error": "..."}``: the caller should throw.

A ``C`` deferred at the bridge's relay (``relay.py``) fires at the bridge's next fail point:
the command's next request here, or the next answer it gets from a provider.

Two reads, for programs that need harness time or their current credentials:

    GET $CRASHPOINTS_URL/now            {"now": <harness seconds>, "time": <its Unix time>}
    GET $CRASHPOINTS_URL/tasks/{task}   {"task_id", "authority": {...} or null, "keys": {...}}

Anything else is answered ``404``; a body that is not a JSON object of string keys and JSON
scalar values, ``400``. Every answer is JSON, HTTP/1.0, and closes the connection.

Only the process the harness started may use it: ``$CRASHPOINTS_URL`` ends in a secret path
segment (``http://127.0.0.1:PORT/<credential>``, 32 random bytes, made for that one process
and given only in its environment), and a request whose path does not begin with it is
answered ``401`` without a fail point firing or a key leaving (:attr:`LoopbackServer.refused`
counts them). Another process on the machine can find the port, not the credential. The
relays (``relay.py``) take the same credential the same way.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import secrets
import selectors
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import CrashpointsError
from .failpoints import crashpoint

__all__ = ["FailpointServer", "LoopbackServer", "read_body"]

#: The largest request body either server reads (fail point context is a few fields).
MAX_BODY = 1024 * 1024
#: A Content-Length: ASCII digits, few enough to be a size.
_LENGTH = re.compile(r"[0-9]{1,18}")


def read_body(handler: BaseHTTPRequestHandler, *, limit: int = MAX_BODY) -> bytes | None:
    """The body of the request ``handler`` serves (``Content-Length`` or chunked), or
    ``None`` when it is malformed or larger than ``limit`` bytes."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        body = bytearray()
        while True:
            size_line = handler.rfile.readline(64)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                return None
            if size == 0:
                while handler.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            if len(body) + size > limit:
                return None
            chunk = handler.rfile.read(size)
            if len(chunk) < size:
                return None
            body += chunk
            handler.rfile.readline(8)  # the chunk's CRLF
    given = {value.strip() for value in handler.headers.get_all("Content-Length") or ()}
    if len(given) > 1:
        return None  # two different lengths: which body is meant cannot be told
    text = given.pop() if given else "0"
    if not _LENGTH.fullmatch(text) or int(text) > limit:
        return None  # only ASCII digits ("²" is a digit to str.isdigit, not to int)
    length = int(text)
    body_bytes = handler.rfile.read(length) if length else b""
    return body_bytes if len(body_bytes) == length else None


class LoopbackServer(ThreadingHTTPServer):
    """A threaded HTTP server on ``127.0.0.1:<free port>``, bound and listening once made.

    :meth:`start` serves in a background thread; :meth:`close` stops at once (a wake-up
    socket, not a poll interval) and closes the socket. Request threads are daemons: one held
    at a pause gate when the program ends must not keep the bridge from reporting.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(
        self, handler: type[BaseHTTPRequestHandler], *, credential: str | None = None
    ) -> None:
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread: threading.Thread | None = None
        super().__init__(("127.0.0.1", 0), handler)
        #: The secret first path segment every request must carry.
        self.credential = credential or secrets.token_urlsafe(32)
        #: The base URL to give the one process allowed to use this server.
        self.url = f"http://127.0.0.1:{self.server_address[1]}/{self.credential}"
        #: ``(method, path)`` of the requests refused for want of the credential.
        self.refused: list[tuple[str, str]] = []
        self._refused_lock = threading.Lock()

    def admitted_path(self, handler: BaseHTTPRequestHandler) -> str | None:
        """The request's path without the credential, or None (and a ``401`` answered) when
        it does not begin with it."""
        prefix = f"/{self.credential}"
        path = handler.path
        given = path[: len(prefix)]
        rest = path[len(prefix) :]
        if hmac.compare_digest(given.encode(), prefix.encode()) and (
            not rest or rest[0] in "/?"
        ):
            return rest or "/"
        with self._refused_lock:
            self.refused.append((handler.command, urllib.parse.urlsplit(path).path[:200]))
        data = b'{"error": "not admitted: use the URL the harness gave this process"}'
        handler.send_response(401)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        return None

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is self._wake_read for key, _ in ready):
                    return
                self.handle_request()  # the listening socket is ready: this does not block

    def start(self, name: str) -> None:
        """Serve requests in a background thread until :meth:`close`."""
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and close the sockets."""
        if self._thread is not None:
            with contextlib.suppress(OSError):
                self._wake_write.send(b"x")
            self._thread.join()
            self._thread = None
        self.server_close()
        self._wake_read.close()
        self._wake_write.close()


class _Server(LoopbackServer):
    def __init__(
        self,
        now: Callable[[], float],
        epoch: float,
        tasks: Callable[[str], Mapping[str, object]] | None,
        credential: str | None,
    ) -> None:
        self.now = now
        self.epoch = epoch
        self.tasks = tasks
        super().__init__(_Handler, credential=credential)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def _answer(self, status: int, body: Mapping[str, object]) -> None:
        data = json.dumps(body, sort_keys=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, text: str) -> None:
        self._answer(status, {"error": text})

    def do_POST(self) -> None:
        admitted = self.server.admitted_path(self)
        if admitted is None:
            return
        path = urllib.parse.urlsplit(admitted).path
        if not path.startswith("/failpoint/"):
            self._error(404, f"no such endpoint: POST {path}; POST /failpoint/{{name}}")
            return
        name = urllib.parse.unquote(path[len("/failpoint/") :])
        if not name or "/" in name:
            self._error(400, f"{name!r} is not a fail point name: POST /failpoint/{{name}}")
            return
        body = read_body(self)
        if body is None:
            self._error(400, "the body could not be read (malformed, or over 1 MiB)")
            return
        context, problem = _context(body)
        if problem:
            self._error(400, problem)
            return
        try:
            crashpoint(name, **context)  # a kill never returns; a pause returns when released
        except Exception as exc:
            self._answer(500, {"action": "raise", "error": f"{type(exc).__name__}: {exc}"})
            return
        self._answer(200, {"action": "continue", "now": self.server.now()})

    def do_GET(self) -> None:
        admitted = self.server.admitted_path(self)
        if admitted is None:
            return
        path = urllib.parse.urlsplit(admitted).path
        if path == "/now":
            now = self.server.now()
            self._answer(200, {"now": now, "time": self.server.epoch + now})
            return
        if path.startswith("/tasks/") and self.server.tasks is not None:
            task = urllib.parse.unquote(path[len("/tasks/") :])
            try:
                info = self.server.tasks(task)
            except (CrashpointsError, KeyError) as exc:
                self._error(404, f"task {task!r}: {exc}")
                return
            self._answer(200, info)
            return
        self._error(404, f"no such endpoint: GET {path}; GET /now or /tasks/{{task_id}}")

    def log_message(self, format: str, *args: object) -> None:
        pass  # the fail points are traced by the harness


def _context(body: bytes) -> tuple[dict[str, Any], str]:
    """The context in a fail point request's body, or an error text."""
    if not body.strip():
        return {}, ""
    try:
        data = json.loads(body)
    except ValueError as exc:
        return {}, f"the body is not JSON ({exc}); send a JSON object, or nothing"
    except RecursionError:
        return {}, "the body is nested too deep; send a flat JSON object of scalars, or nothing"
    if not isinstance(data, dict):
        return {}, f"the body is {type(data).__name__} JSON; send a JSON object, or nothing"
    for key, value in data.items():
        if not (value is None or isinstance(value, str | int | float | bool)):
            return {}, f"context {key!r} is {type(value).__name__}: values are JSON scalars"
    return data, ""


class FailpointServer:
    """The fail-point protocol on ``http://127.0.0.1:<free port>`` (see the module docstring).

    The socket is bound and listening once this is made; requests are served from
    :meth:`start` on, in threads (a program started before can connect at once: its requests
    wait in the backlog). ``now`` is harness time; ``epoch`` the Unix time of harness second 0;
    ``tasks(task_id)`` the current authority and keys of a task (raises ``KeyError`` or
    :class:`CrashpointsError` for one the case does not have). ``url`` is the base URL to give
    the one process that may use it: it ends in its secret credential (``credential``: a new
    random one when not given); a request without it is answered ``401`` (``refused``).
    """

    def __init__(
        self,
        *,
        now: Callable[[], float],
        epoch: float = 0.0,
        tasks: Callable[[str], Mapping[str, object]] | None = None,
        credential: str | None = None,
    ) -> None:
        self._server = _Server(now, epoch, tasks, credential)
        self.url = self._server.url

    @property
    def refused(self) -> list[tuple[str, str]]:
        """``(method, path)`` of each request refused for want of the credential."""
        return list(self._server.refused)

    def start(self) -> None:
        """Serve requests in a background thread until :meth:`close`."""
        self._server.start("crashpoints-failpoints")

    def close(self) -> None:
        """Stop serving and close the socket (a request held at a gate is left to its end)."""
        self._server.close()

    def __enter__(self) -> FailpointServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
