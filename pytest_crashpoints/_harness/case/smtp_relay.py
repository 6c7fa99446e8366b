"""B and C for a program in any language that sends mail over SMTP: a byte relay in the bridge.

The case's SMTP server writes a preamble line before its reply to a message's data
(``fake_providers/_smtp_server.py``); a program in another language would read it as a reply.
So the bridge (``bridge.py``) gives the command an :class:`SmtpRelay` as the relay's address:
each connection of the command is copied byte for byte to a connection of the bridge's own to
the SMTP server, whose socket carries the wire hooks (``_inject/wire.py``). ``http.write`` and
the automatic A fire in the bridge before the command's ``MAIL FROM`` leaves, B when the reply
to the data reaches the bridge (a kill there kills the bridge and the command with it), C is
deferred to the bridge's next fail point; the preamble never reaches the command. When the
server closes its side, the relay closes the command's; and the other way round.

Unlike the HTTP relay it needs no credential in its address: it listens on loopback for the
bridge's own command, and the server still asks every connection for its key.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from types import TracebackType

__all__ = ["SmtpRelay"]


class SmtpRelay:
    """Copies each connection to ``127.0.0.1:<port>`` to ``target`` (the SMTP server), through
    this process's hooked sockets. A context manager; :meth:`start` begins accepting."""

    def __init__(self, target: tuple[str, int], *, timeout: float) -> None:
        self._target = target
        self._timeout = timeout
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.host, self.port = "127.0.0.1", int(port)
        #: The address to give the command (``smtp://127.0.0.1:<port>``).
        self.url = f"smtp://{self.host}:{self.port}"
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._closed = False

    def start(self) -> None:
        self._spawn(self._accept)

    def __enter__(self) -> SmtpRelay:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in list(self._threads):
            thread.join(self._timeout)
        for sock in self._sockets:
            sock.close()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True,  # type: ignore[arg-type]
                                  name="crashpoints-smtp-relay")
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                # Made in this process after the wire hooks: it carries them.
                server = socket.create_connection(self._target, timeout=self._timeout)
            except OSError:
                client.close()
                continue
            client.settimeout(self._timeout)
            self._sockets += [client, server]
            self._spawn(self._pump, client, server)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Pass bytes both ways until either side ends, in one thread: the server's socket is
        read only once it has bytes, so its hooks see every reply after the command that
        asked for it (a thread blocked in its read meanwhile would take a reply for the
        rest of the last one)."""
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, server)
            selector.register(server, selectors.EVENT_READ, client)
            try:
                while not self._closed:
                    for key, _ in selector.select(self._timeout):
                        source = key.fileobj
                        assert isinstance(source, socket.socket)
                        data = source.recv(65536)
                        if not data:
                            return
                        key.data.sendall(data)
            except OSError:
                return
            finally:
                for sock in (client, server):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
