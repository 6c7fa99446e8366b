"""The fail-point protocol: fail points for a program in any language, over loopback HTTP.

A worker the harness runs as a command (see ``bridge.py``) marks a fail point with one
request, and waits for the answer before it goes on::

    POST $CRASHPOINTS_URL/failpoint/{name}        body: nothing, or a JSON object (the context)

:class:`FailpointServer` serves it inside the *bridge*, the harness worker that started the
command and is armed with the schedule's faults. Each request calls ``crashpoint(name,
**context)`` in the bridge, in the thread that serves it, and the answer says what happened:

- nothing to do: ``200 {"action": "continue", "now": <harness seconds>}``, at once;
- a kill: no answer, ever. The bridge is SIGKILLed with its process group, which holds the
  command: the caller dies waiting, as a Python worker dies inside ``crashpoint()``;
- a pause: the answer waits until the harness releases the gate, then ``200 continue``;
- a raise: ``500 {"action": "raise", "error": "Type: message", "type": "module.Type",
  "message": "..."}``: the caller should throw (a Python program, that class).

``POST $CRASHPOINTS_URL/failpoint/{name}?deferred=1`` counts the call now and holds its action
until the bridge's next fail point (the wire's C, for a program that fires it itself). A call of
``db.committed`` (a program's durable commit, made) marks the bridge as having committed since
its last write request: the next write a relay forwards gets the automatic A there
(``_inject/wire.py``), as a Python worker's next write does.

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
answered ``401`` without a fail point firing or a key leaving (:attr:`FailpointServer.refused`).
Another process on the machine can find the port, not the credential. The relays
(``relay.py``) take the same credential the same way. Requests are read by the providers' one
strict reader (``fake_providers.loopback``): its limits hold here too, with bodies of at most
1 MiB.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from ..._inject.failpoints import (
    COMMIT_POINTS,
    crashpoint,
    crashpoint_deferred,
    since_last_request,
)
from ...errors import CrashpointsError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["Endpoint", "FailpointServer", "served"]

#: The largest request body the fail-point server reads (a context is a few fields).
MAX_BODY = 1024 * 1024
#: Seconds a bridge's servers wait for the bytes of a request (its command may be slow to
#: start on a busy machine), and for the whole of one once it began.
READ_TIMEOUT = 60.0


@contextlib.contextmanager
def served(
    handle: Callable[[httpx.Request], httpx.Response],
    *,
    credential: str | None,
    max_body: int,
    name: str,
) -> Iterator[Any]:
    """``handle`` on a loopback server of its own that answers only requests under the secret
    ``credential`` (a new random one when not given); yields its ``fake_providers.Server``."""
    from fake_providers import loopback

    secret = credential or secrets.token_urlsafe(32)
    with loopback(
        handle,
        prefix=f"/{secret}",
        max_body=max_body,
        read_timeout=READ_TIMEOUT,
        request_deadline=READ_TIMEOUT,
        # A request held at a pause gate when the program ends must not hold the bridge.
        join_threads=False,
        name=name,
        # Served from start() on: the bridge forks its program first, before any thread.
        start=False,
    ) as server:
        yield server


def _json(status: int, body: Mapping[str, object]) -> httpx.Response:
    return httpx.Response(
        status,
        content=json.dumps(body, sort_keys=True).encode(),
        headers={"Content-Type": "application/json"},
    )


def _error(status: int, text: str) -> httpx.Response:
    return _json(status, {"error": text})


class _Protocol:
    """The fail-point protocol as a request handler."""

    def __init__(
        self,
        now: Callable[[], float],
        epoch: float,
        tasks: Callable[[str], Mapping[str, object]] | None,
    ) -> None:
        self.now = now
        self.epoch = epoch
        self.tasks = tasks

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST":
            deferred = request.url.params.get("deferred") == "1"
            return self._failpoint(path, request.content, deferred=deferred)
        if request.method == "GET":
            return self._read(path)
        return _error(405, f"no such endpoint: {request.method} {path}")

    def _failpoint(self, path: str, body: bytes, *, deferred: bool) -> httpx.Response:
        if not path.startswith("/failpoint/"):
            return _error(404, f"no such endpoint: POST {path}; POST /failpoint/{{name}}")
        name = urllib.parse.unquote(path[len("/failpoint/") :])
        if not name or "/" in name:
            return _error(400, f"{name!r} is not a fail point name: POST /failpoint/{{name}}")
        context, problem = _context(body)
        if problem:
            return _error(400, problem)
        if name == COMMIT_POINTS[1]:
            # The program committed: its next write request, which the relay forwards from
            # this process, gets the automatic A (``wire.py``), as a Python worker's does.
            since_last_request.committed = True
        try:
            # A kill never returns; a pause returns when released.
            (crashpoint_deferred if deferred else crashpoint)(name, **context)
        except Exception as exc:
            kind = type(exc)
            return _json(500, {
                "action": "raise",
                "error": f"{kind.__name__}: {exc}",
                "type": f"{kind.__module__}.{kind.__qualname__}",
                "message": str(exc),
            })
        return _json(200, {"action": "continue", "now": self.now()})

    def _read(self, path: str) -> httpx.Response:
        if path == "/now":
            now = self.now()
            return _json(200, {"now": now, "time": self.epoch + now})
        if path.startswith("/tasks/") and self.tasks is not None:
            task = urllib.parse.unquote(path[len("/tasks/") :])
            try:
                return _json(200, self.tasks(task))
            except (CrashpointsError, KeyError) as exc:
                return _error(404, f"task {task!r}: {exc}")
        return _error(404, f"no such endpoint: GET {path}; GET /now or /tasks/{{task_id}}")


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


class Endpoint:
    """A handler on a loopback server of its own, under a secret credential (``served``):
    the base of :class:`FailpointServer` and the relays. Bound and listening once made; it
    serves from :meth:`start` on, until :meth:`close`."""

    def __init__(
        self,
        handle: Callable[[httpx.Request], httpx.Response],
        *,
        credential: str | None,
        max_body: int,
        name: str,
    ) -> None:
        self._stack = contextlib.ExitStack()
        self._server = self._stack.enter_context(
            served(handle, credential=credential, max_body=max_body, name=name)
        )
        #: The base URL to give the one process allowed to use it (it ends in the credential).
        self.url: str = self._server.url

    @property
    def refused(self) -> list[tuple[str, str]]:
        """``(method, path)`` of each request refused for want of the credential."""
        return [(method, path) for method, path, _ in self._server.refused]

    def start(self) -> None:
        """Serve requests in background threads until :meth:`close`."""
        self._server.start()

    def close(self) -> None:
        """Stop serving and close the socket (a request held at a gate is left to its end)."""
        self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FailpointServer(Endpoint):
    """The fail-point protocol on ``http://127.0.0.1:<free port>/<credential>`` (see the
    module docstring).

    The socket is bound and listening once this is made; requests are served from
    :meth:`start` on, in threads (a program started before can connect at once: its requests
    wait in the backlog). ``now`` is harness time; ``epoch`` the Unix time of harness second 0;
    ``tasks(task_id)`` the current authority and keys of a task (raises ``KeyError`` or
    :class:`CrashpointsError` for one the case does not have). ``url`` is the base URL to give
    the one process that may use it: it ends in its secret ``credential`` (a new random one
    when not given); a request without it is answered ``401`` (``refused``).
    """

    def __init__(
        self,
        *,
        now: Callable[[], float],
        epoch: float = 0.0,
        tasks: Callable[[str], Mapping[str, object]] | None = None,
        credential: str | None = None,
    ) -> None:
        super().__init__(
            _Protocol(now, epoch, tasks),
            credential=credential,
            max_body=MAX_BODY,
            name="failpoints",
        )
