"""Crash points at the wire: A, B and C around the HTTP requests of any Python client.

Inside a harness worker, :func:`install_wire_hooks` patches ``socket.socket`` so that every
connection to one of the harness's loopback servers gets, without a line of user code:

**B and C, from the preamble.** Before the HTTP response to a request, the harness's server
writes one line, the *preamble* (:func:`encode_preamble`)::

    b"\\x00CRASHPOINTS " + b'{"context":{...},"points":["B","C"]}' + b"\\n"

When a response on a hooked connection begins with it, the receiving thread reads up to the
newline (the line may arrive in pieces, or in one piece with the response), then calls
``crashpoint("B", **context)`` for ``"B"`` and ``crashpoint_deferred("C", **context)`` for
``"C"``, in that order, and hands the client only what follows the line. A kill at B leaves the
provider's effect applied and the client without a byte of the answer; a C deferred there fires
at the worker's next fail point of any name (with the commit hooks installed: its next durable
write). A receive never returns ``b""`` because the preamble was all it got (that would read
as the end of the connection): it reads on, and a non-blocking socket raises
``BlockingIOError`` as it would with nothing to read. A response is told by its first bytes
after a request was sent (and the first bytes of the connection); an HTTP response never
begins with ``b"\\x00"``, so a response without a preamble passes untouched.

**The model's point.** A preamble may also carry ``"model.tool_call"`` (``MODEL_POINT``): the
server of a model writes it before an answer that calls a tool, and it fires at once, like B:
the process holds the model's choice and nothing of it is recorded or dispatched yet.

**Automatic A.** When the first bytes of a request (its request line) are about to be sent and
the method is POST, PUT, PATCH or DELETE, to an address not installed as ``reads`` (a model,
whose POSTs only ask), ``crashpoint("A", source="auto", method=...,
path=...)`` fires before anything is sent, but only if this process made a durable commit
(``commits.py``) since its last write request to a provider (reads in between, such as an
"is it done already?", do not count) and did not call ``crashpoint("A")`` itself since then
(an agent that marks A keeps its own). Every request line sent to a hooked address, from any
thread, is "a request to a provider". ``path`` is the request target without
its query, as far as the first ``send`` call carries it (every client above sends the request
line whole).

**SMTP.** A connection to an address installed as ``smtp`` (a relay the harness serves over
SMTP) speaks commands, not requests: a transaction begins with ``MAIL FROM``, and that is its
write (the automatic A and ``http.write`` fire before it, with ``method="MAIL"`` and
``path=""``); every other command (``EHLO``, ``AUTH``, ``RCPT``, ``DATA``, ``QUIT``) passes,
and so does the message sent after ``DATA``'s ``354``. The server writes the preamble before
its reply to the message's data only: B and C fire there, as for an HTTP answer.

**Before every write.** ``crashpoint("http.write", method=..., path=...)``
(``WRITE_POINT``) fires after an automatic A, before the first byte of every POST, PUT,
PATCH or DELETE to an address not installed as ``reads``, committed or not: a duplicate
delivery may wait there while another runs (an agent that looked "already done?" up and has
not yet acted), and a C deferred from an earlier answer fires there, before the write leaves.

A connection is hooked when ``connect`` or ``connect_ex`` is given one of the addresses (so
``socket.create_connection`` and asyncio's ``sock_connect`` too); its state lives in a table
keyed by the socket object (checked through a weak reference, so neither a reused file
descriptor nor a reused object id inherits it) and is dropped when the socket is really closed
(``_real_close``: ``close()`` while a ``makefile()`` reader is still open does not close) or
detached. Connections to other addresses only pass through the patched methods.

Covered, on Linux (each reads and writes through the patched ``socket.socket`` methods):

- ``http.client`` and what stands on it: ``urllib.request``, sendgrid's
  ``python_http_client``; its ``makefile()`` reader uses ``recv_into``, requests go out with
  ``sendall``;
- urllib3 and ``requests`` (and the SDKs on them: stripe-python's default client, PyGithub);
- httpx's ``Client`` (httpcore's sync backend: ``recv``, ``send``);
- httpx's ``AsyncClient`` and anything else on asyncio's selector event loop (anyio, asyncio
  streams): the transports' ``recv``, ``recv_into``, ``send`` and ``sendmsg``.
- ``smtplib`` (and Django's SMTP backend on it: ``makefile()`` reads, ``sendall``) and
  aiosmtplib (asyncio streams), to an address installed as ``smtp``.

Not covered: clients that do their socket I/O in C (pycurl, uvloop's loop, grpc), TLS (an
``SSLSocket`` reads through OpenSSL, and the preamble would be inside the encrypted stream:
the loopback servers speak plain HTTP), sockets made from a file descriptor (``socket.dup``,
``socket.fromfd``, ``socket.socket(fileno=...)``), reads with ``recvfrom``, ``recvmsg`` or
``MSG_PEEK`` (passed through untouched; no HTTP client above uses them for a response),
connections opened before the hooks were installed, HTTP/2, and pipelined requests. A Raise
action at B leaves the connection in the middle of a response: the client's error discards it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from ..errors import HarnessError, HarnessUsageError
from .failpoints import (
    MODEL_POINT,
    WRITE_POINT,
    automatic_crashpoint,
    crashpoint,
    crashpoint_deferred,
    since_last_request,
)

__all__ = ["MARKER", "decode_preamble", "encode_preamble", "install_wire_hooks"]

#: The bytes a preamble begins with. No HTTP response begins with a NUL byte.
MARKER = b"\x00CRASHPOINTS "

# A preamble longer than this is a broken server, not a slow one.
_PREAMBLE_LIMIT = 64 * 1024

_WIRE_POINTS = ("B", "C", MODEL_POINT)
# How many of a request's first bytes are read for its request line.
_HEAD = 1024
_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_REQUEST_LINE = re.compile(rb"([A-Z]+) ([^ ?\r\n]*)")
# The command that begins an SMTP transaction (its write).
_MAIL = b"MAIL FROM:"


def encode_preamble(points: Sequence[str], context: Mapping[str, object]) -> bytes:
    """The preamble line a loopback server writes before a response.

    ``points`` is a subset of ``("B", "C", "model.tool_call")`` in that order; ``context`` a
    flat mapping of string keys to JSON scalars (``None``, ``bool``, ``int``, ``float``,
    ``str``). Raises :class:`HarnessUsageError` for anything else.
    """
    chosen = list(points)
    if any(point not in _WIRE_POINTS for point in chosen) or chosen != [
        point for point in _WIRE_POINTS if point in chosen
    ]:
        raise HarnessUsageError(
            f"preamble points {chosen!r} are not a subset of {list(_WIRE_POINTS)!r} in that "
            "order; the wire can fire only those."
        )
    plain = dict(context)
    for key, value in plain.items():
        if not isinstance(key, str) or not (
            value is None or isinstance(value, str | int | float | bool)
        ):
            raise HarnessUsageError(
                f"preamble context item {key!r}: {value!r} is not a string key with a JSON "
                "scalar value (None, bool, int, float or str)."
            )
    body = json.dumps({"points": chosen, "context": plain}, separators=(",", ":"), sort_keys=True)
    return MARKER + body.encode("ascii") + b"\n"


def decode_preamble(line: bytes) -> tuple[tuple[str, ...], dict[str, object]]:
    """The points and context of a preamble line (with or without its newline).

    The inverse of :func:`encode_preamble`. Raises :class:`HarnessError` for bytes that are not
    a preamble.
    """
    if not line.startswith(MARKER):
        raise HarnessError(f"{line[:40]!r} is not a crashpoints preamble (no marker)")
    try:
        data = json.loads(line[len(MARKER) :].rstrip(b"\n"))
        points = tuple(data["points"])
        context = dict(data["context"])
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError(
            f"the crashpoints preamble {line[:200]!r} is not valid ({exc}); the loopback "
            "server must write it with encode_preamble()."
        ) from exc
    if not set(points) <= set(_WIRE_POINTS) or not all(isinstance(k, str) for k in context):
        raise HarnessError(
            f"the crashpoints preamble {line[:200]!r} names points the wire cannot fire or has "
            "a context that is not a flat object; write it with encode_preamble()."
        )
    return points, context


class _Connection:
    """The state of one hooked connection."""

    __slots__ = (
        "content_next", "preamble", "reads", "ref", "request_start", "response_start",
        "sent_data", "smtp",
    )

    def __init__(
        self, ref: weakref.ref[socket.socket], *, reads: bool = False, smtp: bool = False
    ) -> None:
        self.ref = ref
        # Every request to this address is a read, whatever its method (a model's POST).
        self.reads = reads
        # The address speaks SMTP: commands, the message after DATA's 354, replies.
        self.smtp = smtp
        self.sent_data = False  # the last command was DATA
        self.content_next = False  # the next bytes sent are the message, not a command
        # The next bytes sent begin a request; the next bytes received begin a response.
        self.request_start = True
        self.response_start = True
        # The preamble read so far, while one is being read.
        self.preamble: bytearray | None = None


_addresses: set[tuple[str, int]] = set()
_reads: set[tuple[str, int]] = set()
_smtp: set[tuple[str, int]] = set()
_connections: dict[int, _Connection] = {}
_original: dict[str, Any] = {}


def _canonical(host: str) -> str:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_ntop(family, socket.inet_pton(family, host))
        except (OSError, ValueError):
            continue
    return host.lower()


def _key(address: object) -> tuple[str, int] | None:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        if isinstance(host, str) and isinstance(port, int):
            return _canonical(host), port
    return None


def _state(sock: socket.socket) -> _Connection | None:
    state = _connections.get(id(sock))
    if state is None or state.ref() is not sock:
        return None
    return state


def _forget(key: int, ref: weakref.ref[socket.socket]) -> None:
    state = _connections.get(key)
    if state is not None and state.ref is ref:
        del _connections[key]


def _track(sock: socket.socket, address: object) -> None:
    key = id(sock)
    where = _key(address)
    if where in _addresses and sock.family in (socket.AF_INET, socket.AF_INET6):
        ref = weakref.ref(sock, lambda ref: _forget(key, ref))
        _connections[key] = _Connection(ref, reads=where in _reads, smtp=where in _smtp)
    elif _state(sock) is not None:
        del _connections[key]


def _drop(sock: socket.socket) -> None:
    if _state(sock) is not None:
        del _connections[id(sock)]


# -- sending: the automatic A ------------------------------------------------------------------


def _head(data: object) -> bytes:
    try:
        with memoryview(data) as view:  # type: ignore[arg-type]
            return view.cast("B")[:_HEAD].tobytes()
    except (TypeError, ValueError):
        return b""


def _sending(state: _Connection, head: bytes) -> None:
    """Called before bytes go out on a hooked connection (``head``: their first bytes)."""
    if not state.request_start or not head:
        return
    if state.smtp:
        _sending_command(state, head)
    else:
        request = _REQUEST_LINE.match(head)
        if request is not None:
            method = request.group(1).decode("ascii")
            if method in _WRITE_METHODS and not state.reads:
                _write_leaves(method, request.group(2).decode("latin-1"))
    state.request_start = False
    state.response_start = True


def _sending_command(state: _Connection, head: bytes) -> None:
    """An SMTP client's next bytes: a command, or the message after DATA's ``354``."""
    if state.content_next:
        state.content_next = False
        return
    command = head.split(b"\r", 1)[0].split(b"\n", 1)[0]
    state.sent_data = command.strip().upper() == b"DATA"
    if command[: len(_MAIL)].upper() == _MAIL:
        _write_leaves("MAIL", "")


def _write_leaves(method: str, path: str) -> None:
    """A write request is about to leave: the automatic A, then ``http.write``."""
    activity = since_last_request
    if activity.committed and not activity.marked_a:
        automatic_crashpoint("A", source="auto", method=method, path=path)
    # Before every write, committed or not: where a duplicate delivery waits while
    # another runs (an agent that looked "already done?" up and is about to act),
    # and where a C deferred from an earlier answer fires, before this write leaves.
    automatic_crashpoint(WRITE_POINT, method=method, path=path)
    # Reads in between (an "is it done already?" before the write) do not end it.
    activity.committed = False
    activity.marked_a = False


def _send(self: socket.socket, data: Any, flags: int = 0, /) -> int:
    state = _state(self)
    if state is not None and state.request_start:
        _sending(state, _head(data))
    result: int = _original["send"](self, data, flags)
    return result


def _sendall(self: socket.socket, data: Any, flags: int = 0, /) -> None:
    state = _state(self)
    if state is not None and state.request_start:
        _sending(state, _head(data))
    _original["sendall"](self, data, flags)


def _sendmsg(self: socket.socket, buffers: Iterable[Any], /, *args: Any) -> int:
    state = _state(self)
    if state is not None and state.request_start:
        buffers = list(buffers)
        head = b""
        for buffer in buffers:
            if len(head) >= _HEAD:
                break
            head += _head(buffer)
        _sending(state, head)
    result: int = _original["sendmsg"](self, buffers, *args)
    return result


# -- receiving: B and C ------------------------------------------------------------------------


def _receive(
    sock: socket.socket, state: _Connection, size: int, flags: int, recv: Callable[..., bytes]
) -> bytes:
    """The first bytes of a response for the client, after any preamble (fired and dropped).

    Reads at most ``size`` bytes at a time, so every byte read after the preamble fits what
    the client asked for: nothing is held back from a selector that waits on the socket.
    """
    while True:
        data = recv(sock, size, flags)  # BlockingIOError, timeouts: the state is kept
        if state.preamble is None:
            if not data or data[0] != 0:
                state.response_start = False
                state.request_start = True
                if state.smtp:  # after DATA's 354, the client sends the message
                    state.content_next, state.sent_data = state.sent_data and (
                        data[:3] == b"354"
                    ), False
                return data
            state.preamble = bytearray()
        if not data:  # the server closed the connection inside the preamble
            state.preamble = None
            state.response_start = False
            return data
        state.preamble += data
        end = state.preamble.find(b"\n")
        if end < 0:
            if len(state.preamble) > _PREAMBLE_LIMIT:
                raise HarnessError(
                    f"a crashpoints preamble longer than {_PREAMBLE_LIMIT} bytes arrived "
                    "without its newline; the loopback server must write it with "
                    "encode_preamble()."
                )
            continue
        line, rest = bytes(state.preamble[: end + 1]), bytes(state.preamble[end + 1 :])
        state.preamble = None
        state.response_start = False
        state.request_start = True
        points, context = decode_preamble(line)
        for point in points:
            if point == "C":
                crashpoint_deferred("C", **context)
            else:
                crashpoint(point, **context)
        if rest:
            return rest
        # The preamble was all there was: read on (a non-blocking socket raises
        # BlockingIOError until the response arrives).
        return recv(sock, size, flags)


def _recv(self: socket.socket, bufsize: int, flags: int = 0, /) -> bytes:
    state = _state(self)
    if state is None or not state.response_start or bufsize <= 0 or flags & socket.MSG_PEEK:
        result: bytes = _original["recv"](self, bufsize, flags)
        return result
    return _receive(self, state, bufsize, flags, _original["recv"])


def _recv_into(self: socket.socket, buffer: Any, nbytes: int = 0, flags: int = 0, /) -> int:
    state = _state(self)
    if state is None or not state.response_start or flags & socket.MSG_PEEK:
        result: int = _original["recv_into"](self, buffer, nbytes, flags)
        return result
    with memoryview(buffer) as view, view.cast("B") as target:
        size = nbytes or len(target)
        if size <= 0:
            result = _original["recv_into"](self, buffer, nbytes, flags)
            return result
        data = _receive(self, state, size, flags, _original["recv"])
        target[: len(data)] = data
        return len(data)


def _real_close(self: socket.socket, *args: Any) -> None:
    _drop(self)
    _original["_real_close"](self, *args)


def _detach(self: socket.socket) -> int:
    _drop(self)
    result: int = _original["detach"](self)
    return result


def _connect(self: socket.socket, address: Any, /) -> None:
    _track(self, address)
    _original["connect"](self, address)


def _connect_ex(self: socket.socket, address: Any, /) -> int:
    _track(self, address)
    result: int = _original["connect_ex"](self, address)
    return result


_PATCHES: dict[str, Callable[..., Any]] = {
    "connect": _connect,
    "connect_ex": _connect_ex,
    "send": _send,
    "sendall": _sendall,
    "sendmsg": _sendmsg,
    "recv": _recv,
    "recv_into": _recv_into,
    "_real_close": _real_close,
    "detach": _detach,
}


def install_wire_hooks(
    addresses: Collection[tuple[str, int]],
    *,
    reads: Collection[tuple[str, int]] = (),
    smtp: Collection[tuple[str, int]] = (),
) -> None:
    """Hook this process's connections to ``addresses`` (see the module docstring).

    ``addresses`` are ``(host, port)`` pairs of loopback HTTP servers that write preambles. A
    host name is also matched by the addresses it resolves to. ``reads`` (hooked too) are
    servers every request to which is a read, whatever its method (a model: its POSTs ask, and
    change nothing): no automatic A before them, and they do not end "since the last write
    request". ``smtp`` (hooked too) are servers that speak SMTP: their write is the
    ``MAIL FROM`` that begins a transaction (see the module docstring). Idempotent: a second
    call adds addresses. Only connections made after the call are hooked. Raises
    :class:`HarnessUsageError` for an address that is not a ``(host, port)`` pair.
    """
    hooked, only_reads, relays = _resolved(addresses), _resolved(reads), _resolved(smtp)
    _addresses.update(hooked | only_reads | relays)
    _reads.update(only_reads)
    _smtp.update(relays)
    if _original:
        return
    for name, hook in _PATCHES.items():
        _original[name] = getattr(socket.socket, name)
        setattr(socket.socket, name, hook)


def _is_ip(host: object) -> bool:
    try:
        ipaddress.ip_address(str(host))
    except ValueError:
        return False
    return True


def _resolved(addresses: Collection[tuple[str, int]]) -> set[tuple[str, int]]:
    keys = set()
    for address in addresses:
        key = _key(address)
        if key is None or len(address) != 2:
            raise HarnessUsageError(
                f"wire hook address {address!r} is not a (host, port) pair such as "
                "('127.0.0.1', 8080)."
            )
        keys.add(key)
        if _is_ip(address[0]):
            continue  # an address already: nothing to resolve
        try:
            infos = socket.getaddrinfo(address[0], address[1], type=socket.SOCK_STREAM)
        except OSError:
            continue
        keys.update(k for info in infos if (k := _key(info[4])) is not None)
    return keys
