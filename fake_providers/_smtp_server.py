"""Loopback SMTP: a provider that speaks SMTP (:class:`~fake_providers.Smtp`) as a real SMTP
server on 127.0.0.1, for any SMTP client (``smtplib``, Django's SMTP backend, aiosmtplib).

The server is aiosmtpd's (an optional dependency: ``pip install 'pytest-crashpoints[smtp]'``),
with plain text on loopback, ``AUTH PLAIN`` and ``AUTH LOGIN`` (the API key as the password, any
user name) required before ``MAIL``: ``530 5.7.0`` without it, ``535 5.7.8`` for a key the
provider does not accept. Each transaction whose ``DATA`` ends becomes one request of the
provider's pipeline (``transaction_request``); its answer is the reply to the data.

It keeps the contract of the HTTP loopback server (``_server.py``), so a harness serves either
the same way:

- ``preamble(request, response) -> bytes`` is written just before the reply to the data, in the
  same write (never before the replies to other commands, which are the protocol's own
  traffic); not called when no reply is sent.
- A fault that says the client gets no answer (a lost answer, a write timeout) closes the
  connection without a reply. So does a lost answer whose gateway would answer an error: a
  relay that took a message never refuses it afterwards, so a client may rightly take a refusal
  for "not sent". A ``421`` closes the connection after the reply, as the protocol says.
- ``admit(request, client_address)`` is asked before each transaction reaches the provider; a
  reason refuses it with ``554 5.7.1`` and it is never journaled (:attr:`SmtpServer.refused`).
- :meth:`SmtpServer.settle` returns once every command that has reached the server is answered:
  no connection waiting to be accepted, none with bytes (or an end of input) not yet read, none
  whose command is being handled. A connection waiting for its client's next line does not hold
  it. :meth:`SmtpServer.held` keeps transactions from reaching the provider while it runs.
- ``read_timeout``: a connection on which no command arrives for that many seconds is closed.

Not served: ``STARTTLS`` and SMTPS (the wire hooks of a harness worker read the plain stream),
``BDAT``/``CHUNKING`` and ``PIPELINING`` (not advertised, so clients do not use them), ``VRFY``
and ``EXPN`` answer as aiosmtpd does.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import select
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from pytest_crashpoints.errors import CrashpointsError

from ._provider import Provider, ResponseInfo
from ._server import MAX_BODY, READ_TIMEOUT, Admit, Preamble
from ._smtp import transaction_request

__all__ = ["SmtpServer", "smtp_loopback"]

#: The name the server greets with (no DNS look-up of the machine's name).
HOSTNAME = "smtp.crashpoints.test"
#: How often :meth:`SmtpServer.settle` looks again while something is still moving.
_POLL = 0.002


@dataclasses.dataclass(frozen=True)
class _Answer:
    """The reply to a transaction's data, what goes before it, and what happens after."""

    reply: str
    preamble: bytes = b""
    #: ``"keep"`` the connection, ``"close"`` it after the reply, or ``"drop"`` it unanswered.
    then: str = "keep"


class _Listener(socket.socket):
    """The listening socket, counting the connections the loop has taken from it (an accepted
    connection gets its protocol a moment later, in a task of its own)."""

    accepted = 0

    def accept(self) -> tuple[socket.socket, Any]:
        connection, address = super().accept()
        self.accepted += 1
        return connection, address


class _Gate:
    """Holds transactions back while the harness copies or replaces the journal (the HTTP
    server's ``held``/``handling`` pair)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._holders = 0
        self._handling = 0

    @contextmanager
    def held(self) -> Iterator[None]:
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


def _aiosmtpd() -> Any:
    try:
        import aiosmtpd.smtp
    except ImportError as exc:
        raise CrashpointsError(
            "the smtp provider serves SMTP with aiosmtpd, which is not installed: install "
            "pytest-crashpoints[smtp] (or pip install aiosmtpd)."
        ) from exc
    # Its notices (AUTH without TLS, which is on purpose here; each login, each connection)
    # are not the test's business: only its errors are kept, for whoever listens.
    log = logging.getLogger("mail.log")
    log.addHandler(logging.NullHandler())
    log.setLevel(logging.ERROR)
    return aiosmtpd.smtp


class SmtpServer:
    """A provider served over SMTP on loopback (:func:`smtp_loopback`): its ``url``
    (``smtp://127.0.0.1:<port>``), ``host`` and ``port``, :meth:`settle`, :meth:`held`, and the
    transactions it refused."""

    def __init__(
        self, provider: Provider, *, preamble: Preamble | None, admit: Admit | None,
        read_timeout: float, data_size_limit: int,
    ) -> None:
        self.provider = provider
        self._preamble = preamble
        self._admit = admit
        self._gate = _Gate()
        self._refused: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._listener = _Listener(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._created = 0  # sessions made for accepted connections
        self.host, self.port = "127.0.0.1", int(self._listener.getsockname()[1])
        #: The base URL a client is given (``smtp://127.0.0.1:<port>``).
        self.url = f"smtp://{self.host}:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=8, thread_name_prefix=f"fake-{provider.name}-smtp"
        )
        self._sessions: set[Any] = set()
        self._server: asyncio.AbstractServer | None = None
        self._session_class = _session_class(_aiosmtpd(), self)
        self._options = {"read_timeout": read_timeout, "data_size_limit": data_size_limit}
        self._ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"fake-{provider.name}-smtp-server", daemon=True
        )

    # -- the harness's side -----------------------------------------------------------------

    def start(self) -> None:
        """Start serving (for a server made with ``start=False``); nothing if it serves."""
        if self._thread.ident is None:
            self._thread.start()
            self._ready.wait()

    def settle(self, timeout: float = 30.0) -> bool:
        """Block until every command that reached the server before this call is answered
        (see the module docstring); False if that takes more than ``timeout`` seconds."""
        if self._thread.ident is None or not self._thread.is_alive():
            return not _readable(self._listener.fileno())
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            check = asyncio.run_coroutine_threadsafe(self._still(), self._loop)
            try:
                if check.result(remaining):
                    return True
            except concurrent.futures.TimeoutError:
                check.cancel()
                return False
            time.sleep(_POLL)

    def held(self) -> contextlib.AbstractContextManager[None]:
        """While the block runs, no transaction reaches the provider (one being handled when
        it starts is finished first; later ones wait)."""
        return self._gate.held()

    @property
    def refused(self) -> list[tuple[str, str, str]]:
        """``("DATA", "/", reason)`` of every transaction ``admit`` refused, in order."""
        with self._lock:
            return list(self._refused)

    def close(self) -> None:
        """Stop serving: every connection is closed, the handlers finished, the port freed."""
        if self._thread.ident is not None:
            asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._executor.shutdown(wait=True)
        self._loop.close()
        self._listener.close()

    # -- the loop's side --------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            self._loop.create_server(self._session, sock=self._listener)
        )
        self._ready.set()
        self._loop.run_forever()

    def _session(self) -> Any:
        self._created += 1
        with warnings.catch_warnings():
            # AUTH without TLS: on loopback, on purpose (the wire hooks read the plain stream).
            warnings.simplefilter("ignore")
            session = self._session_class(
                _Handler(self), hostname=HOSTNAME, ident="crashpoints fake relay",
                auth_required=True, auth_require_tls=False, authenticator=self._authenticate,
                timeout=self._options["read_timeout"],
                data_size_limit=self._options["data_size_limit"], loop=self._loop,
            )
        self._sessions.add(session)  # from now until its connection is lost
        return session

    def _authenticate(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> Any:
        from aiosmtpd.smtp import AuthResult

        password = getattr(auth_data, "password", b"")
        key = password.decode("utf-8", "replace") if isinstance(password, bytes) else ""
        if not key or self.provider.keys.find(key) is None:
            return AuthResult(success=False, handled=False)
        return AuthResult(success=True, auth_data=key)

    async def _still(self) -> bool:
        """Whether nothing is moving now (runs on the loop, between its callbacks)."""
        if _readable(self._listener.fileno()) or self._listener.accepted != self._created:
            return False  # a connection waits to be accepted, or for its session
        for session in self._sessions:
            reader = getattr(session, "_reader", None)
            waiter = getattr(reader, "_waiter", None)
            if waiter is None or waiter.done():
                return False  # its command is being handled (or its handler about to run)
            sock = session.transport.get_extra_info("socket") if session.transport else None
            if sock is not None and _readable(sock.fileno()):
                return False  # bytes (or the end of input) the loop has not read yet
        return True

    async def _shut(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self._sessions):
            if session.transport is not None:
                session.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def answer(self, request: httpx.Request, peer: Any) -> _Answer:
        """The reply to one transaction (in a thread of the executor, not on the loop)."""
        if self._admit is not None:
            try:
                refusal = self._admit(request, tuple(peer) if peer else ("", 0))
            except Exception as exc:  # the hook's bug refuses, never admits by accident
                refusal = f"the admission hook raised {exc!r}"
            if refusal is not None:
                with self._lock:
                    self._refused.append(("DATA", "/", refusal))
                return _Answer(f"554 5.7.1 Not admitted: {' '.join(refusal.split())}")
        with self._gate.handling():
            try:
                response = self.provider.handle(request)
            except httpx.TransportError:
                return _Answer("", then="drop")  # no answer at all: the client sees it close
            except Exception as exc:  # a broken journal must not kill the server
                return _Answer(f"451 4.3.0 Fake provider error: {exc!r}")
        info = response.extensions.get("crashpoints")
        if isinstance(info, ResponseInfo) and info.effect_applied and response.status_code >= 400:
            return _Answer("", then="drop")  # a relay never refuses what it took
        extra = b""
        if self._preamble is not None:
            try:
                extra = self._preamble(request, response)
                if not isinstance(extra, (bytes, bytearray)):
                    raise TypeError(f"the preamble hook returned {type(extra).__name__}")
            except Exception as exc:
                return _Answer(f"451 4.3.0 Preamble hook failed: {exc!r}")
        reply = response.content.decode("utf-8", "replace")
        return _Answer(reply, bytes(extra), "close" if response.status_code == 421 else "keep")


class _Handler:
    """aiosmtpd's handler: a transaction whose data ended goes to the provider."""

    def __init__(self, server: SmtpServer) -> None:
        self._server = server

    async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:
        request = transaction_request(
            self._server.provider.base_url,
            mail_from=envelope.mail_from or "",
            rcpt_tos=list(envelope.rcpt_tos),
            content=bytes(envelope.original_content or b""),
            key=session.auth_data if isinstance(session.auth_data, str) else None,
        )
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(
            self._server._executor, self._server.answer, request, session.peer
        )
        smtp.crashpoints_answer = answer
        return answer.reply or "451 4.3.0 No answer"


def _session_class(smtp: Any, server: SmtpServer) -> Any:
    """aiosmtpd's ``SMTP`` protocol, with the preamble before the reply to the data and the
    server's record of its open connections (for :meth:`SmtpServer.settle`)."""

    class Session(smtp.SMTP):  # type: ignore[misc]
        crashpoints_answer: _Answer | None = None

        def connection_lost(self, error: Exception | None) -> None:
            server._sessions.discard(self)
            super().connection_lost(error)

        async def push(self, status: Any) -> None:
            answer, self.crashpoints_answer = self.crashpoints_answer, None
            if answer is None:
                await super().push(status)
                return
            if answer.then == "drop":
                self.transport.close()
                return
            text = status if isinstance(status, bytes) else str(status).encode("utf-8")
            # One write: the preamble reaches the client together with the reply.
            self._writer.write(answer.preamble + text + b"\r\n")
            if answer.then == "close":
                self.transport.close()
                return
            await self._writer.drain()

    return Session


def _readable(fd: int) -> bool:
    ready, _, _ = select.select([fd], [], [], 0)
    return bool(ready)


@contextmanager
def smtp_loopback(
    provider: Provider,
    *,
    preamble: Preamble | None = None,
    admit: Admit | None = None,
    read_timeout: float = READ_TIMEOUT,
    data_size_limit: int = MAX_BODY,
    start: bool = True,
) -> Iterator[SmtpServer]:
    """Serve ``provider`` (an SMTP provider: :class:`~fake_providers.Smtp`) over SMTP on
    ``127.0.0.1:<free port>`` in a background thread; yields its :class:`SmtpServer`.

    ``preamble`` and ``admit``: as for :func:`~fake_providers.loopback` (see the module
    docstring). ``read_timeout``: seconds a connection may send no command before it is
    closed. ``data_size_limit``: the largest message accepted, in bytes (larger: ``552``).
    ``start=False`` binds and listens, and serves from :meth:`SmtpServer.start` on. Raises
    :class:`~pytest_crashpoints.errors.CrashpointsError` when aiosmtpd is not installed."""
    server = SmtpServer(
        provider, preamble=preamble, admit=admit, read_timeout=read_timeout,
        data_size_limit=data_size_limit,
    )
    try:
        if start:
            server.start()
        yield server
    finally:
        server.close()
