"""A, B and C at the wire: any Python HTTP client, a loopback server that writes preambles."""

from __future__ import annotations

import asyncio
import http.client
import json
import select
import socket
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import pytest
import requests

from pytest_crashpoints import crashpoint
from pytest_crashpoints._inject.failpoints import Fault, Hit, Kill
from pytest_crashpoints._process.outcome import Completed, Killed, Outcome
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessError, HarnessUsageError
from pytest_crashpoints.harness import (
    decode_preamble,
    encode_preamble,
    install_commit_hooks,
    install_wire_hooks,
)

Address = tuple[str, int]


class PreambleServer:
    """A loopback HTTP/1.1 server (keep-alive) that answers every request with a preamble
    (points B and C; context: the method and path) and then a JSON echo of the request.

    ``split``: write the preamble one byte per send, then the response. ``hold``: after the
    preamble, wait for one byte from the client before the response. ``preamble=False``: a
    plain server.
    """

    def __init__(self, *, split: bool = False, hold: bool = False, preamble: bool = True) -> None:
        self.split, self.hold, self.preamble = split, hold, preamble
        self.requests: list[tuple[str, str, bytes]] = []
        self.connections = 0
        self.received: list[bytes] = []  # all a connection sent, one item per connection
        self._listener = socket.create_server(("127.0.0.1", 0))
        host, port = self._listener.getsockname()[:2]
        self.address: Address = (host, port)
        self.url = f"http://{host}:{port}"
        self._threads: list[threading.Thread] = []
        self._start(self._serve)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            self._start(self._answer, conn)

    def _answer(self, conn: socket.socket) -> None:
        received = b""
        try:
            with conn, conn.makefile("rb") as reader:
                received = self._answer_requests(conn, reader)
        finally:
            self.received.append(received)

    def _answer_requests(self, conn: socket.socket, reader: BinaryIO) -> bytes:
        received = b""
        while line := reader.readline():
            received += line
            method, target, _ = line.decode().split(" ", 2)
            length = 0
            while (header := reader.readline()) not in (b"\r\n", b""):
                received += header
                name, _, value = header.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            body = reader.read(length)
            received += b"\r\n" + body
            self.requests.append((method, target, body))
            payload = json.dumps({"method": method, "path": target}).encode()
            response = (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            if not self.preamble:
                conn.sendall(response)
                continue
            context = {"method": method, "path": target, "status_code": 200}
            preamble = encode_preamble(["B", "C"], context)
            if self.split:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for byte in preamble:
                    conn.sendall(bytes([byte]))
                    time.sleep(0.001)  # so that the bytes arrive in separate segments
                conn.sendall(response)
            elif self.hold:
                conn.sendall(preamble)
                reader.read(1)
                conn.sendall(response)
            else:
                conn.sendall(preamble + response)
        return received

    def close(self) -> None:
        if self._listener.fileno() < 0:
            return
        self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() in _serve
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=10)
            assert not thread.is_alive(), "a server thread outlived its clients"


@pytest.fixture
def server() -> Iterator[PreambleServer]:
    server = PreambleServer()
    yield server
    server.close()


def echo(method: str, path: str) -> bytes:
    return json.dumps({"method": method, "path": path}).encode()


# -- calls with each client, on one connection where the client keeps it alive ----------------

Call = tuple[str, str]  # method, path


def with_http_client(url: str, calls: Sequence[Call]) -> list[bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    bodies = []
    try:
        for method, path in calls:
            conn.request(method, path, body=None if method == "GET" else b"{}")
            bodies.append(conn.getresponse().read())
    finally:
        conn.close()
    return bodies


def with_urllib(url: str, calls: Sequence[Call]) -> list[bytes]:
    bodies = []
    for method, path in calls:
        data = None if method == "GET" else b"{}"
        request = urllib.request.Request(url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            bodies.append(response.read())
    return bodies


def with_requests(url: str, calls: Sequence[Call]) -> list[bytes]:
    with requests.Session() as session:
        return [session.request(m, url + p, data=b"{}", timeout=10).content for m, p in calls]


def with_httpx(url: str, calls: Sequence[Call]) -> list[bytes]:
    with httpx.Client(timeout=10) as client:
        return [client.request(m, url + p, content=b"{}").content for m, p in calls]


def with_httpx_async(url: str, calls: Sequence[Call]) -> list[bytes]:
    async def main() -> list[bytes]:
        async with httpx.AsyncClient(timeout=10) as client:
            return [(await client.request(m, url + p, content=b"{}")).content for m, p in calls]

    return asyncio.run(main())


Client = Callable[[str, Sequence[Call]], list[bytes]]
CLIENTS: dict[str, Client] = {
    "http.client": with_http_client,
    "urllib": with_urllib,
    "requests": with_requests,
    "httpx": with_httpx,
    "httpx-async": with_httpx_async,
}


@pytest.fixture(params=sorted(CLIENTS))
def client(request: pytest.FixtureRequest) -> Client:
    return CLIENTS[request.param]


def call_then_note(
    client: Client, server: Address, url: str, tmp: str, *, paths: Sequence[str] = ("/v1/a",)
) -> list[str]:
    """A worker: hooks installed, the calls made, what the client got written to a file, then
    a fail point of its own."""
    install_wire_hooks([server])
    bodies = client(url, [("POST", path) for path in paths])
    Path(tmp, "got").write_bytes(b"\n".join(bodies))
    crashpoint("after")
    Path(tmp, "after").write_text("yes")
    return [body.decode() for body in bodies]


def note_calls(client: Client, server: PreambleServer, tmp: Path, **options: Any) -> Outcome:
    """:func:`call_then_note` run in a worker against ``server`` (``options`` go to
    ``run_worker``): its outcome."""
    return run_worker(
        call_then_note, args=(client, server.address, server.url, str(tmp)), **options
    )


def killed_at(point: str, client: Client, server: PreambleServer, tmp: Path) -> Killed:
    """:func:`note_calls` with a kill at ``point``: its outcome, checked to be that kill."""
    outcome = note_calls(client, server, tmp, faults=[Fault(point, Kill())])
    assert isinstance(outcome, Killed), outcome
    assert outcome.point == point
    return outcome


def points(hits: Sequence[Hit]) -> list[str]:
    return [hit.point for hit in hits]


def test_without_a_fault_the_client_sees_the_response_and_b_and_c_are_hit(
    client: Client, server: PreambleServer, tmp_path: Path
) -> None:
    # Two calls: on a kept-alive connection, a preamble comes before each response.
    outcome = note_calls(client, server, tmp_path, kwargs={"paths": ("/v1/a", "/v1/b?x=1")})
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == [echo("POST", "/v1/a").decode(), echo("POST", "/v1/b?x=1").decode()]
    # http.write before each POST leaves (where a duplicate delivery may wait).
    assert points(outcome.hits) == ["http.write", "B", "C", "http.write", "B", "C", "after"]
    assert outcome.hits[0].context == {"method": "POST", "path": "/v1/a"}
    assert outcome.hits[1].context == {"method": "POST", "path": "/v1/a", "status_code": 200}
    assert [path for _, path, _ in server.requests] == ["/v1/a", "/v1/b?x=1"]
    assert server.connections == (2 if client is with_urllib else 1)


def test_a_kill_at_b_comes_before_the_client_saw_a_byte(
    client: Client, server: PreambleServer, tmp_path: Path
) -> None:
    outcome = killed_at("B", client, server, tmp_path)
    assert outcome.fired_at == "B"
    assert outcome.context["path"] == "/v1/a"
    assert len(server.requests) == 1  # the provider has the request
    assert not (tmp_path / "got").exists()  # the client never returned


def test_a_kill_at_c_comes_at_the_next_fail_point_after_the_whole_response(
    client: Client, server: PreambleServer, tmp_path: Path
) -> None:
    outcome = killed_at("C", client, server, tmp_path)
    assert outcome.fired_at == "after"
    assert (tmp_path / "got").read_bytes() == echo("POST", "/v1/a")
    assert not (tmp_path / "after").exists()


def call_then_commit(server: Address, url: str, database: str) -> None:
    install_wire_hooks([server])
    install_commit_hooks()
    (body,) = with_requests(url, [("POST", "/v1/charges")])
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS outcomes (body TEXT)")  # commits by itself
        db.execute("INSERT INTO outcomes VALUES (?)", (body.decode(),))


def test_a_kill_at_c_comes_at_the_next_commit(server: PreambleServer, tmp_path: Path) -> None:
    database = tmp_path / "agent.sqlite3"
    outcome = run_worker(
        call_then_commit,
        args=(server.address, server.url, str(database)),
        faults=[Fault("C", Kill())],
    )
    assert isinstance(outcome, Killed), outcome
    assert (outcome.point, outcome.fired_at) == ("C", "db.commit")
    with closing(sqlite3.connect(database)) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []


def test_a_preamble_split_byte_by_byte_still_works(client: Client, tmp_path: Path) -> None:
    server = PreambleServer(split=True)
    try:
        outcome = note_calls(client, server, tmp_path)
    finally:
        server.close()
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == [echo("POST", "/v1/a").decode()]
    assert points(outcome.hits) == ["http.write", "B", "C", "after"]


def nonblocking_read(server: Address) -> tuple[bool, bytes]:
    """A raw non-blocking client: after the preamble alone, recv must raise BlockingIOError."""
    install_wire_hooks([server])
    sock = socket.create_connection(server, timeout=10)
    with sock:
        sock.sendall(b"GET /v1/x HTTP/1.1\r\nHost: provider\r\n\r\n")
        sock.setblocking(False)
        select.select([sock], [], [], 10)  # the preamble is there
        try:
            sock.recv(4096)
        except BlockingIOError:
            blocked = True
        else:
            blocked = False
        sock.setblocking(True)
        sock.sendall(b"!")  # the server answers now
        return blocked, sock.recv(4096)


def test_a_nonblocking_socket_raises_blocking_io_error_after_the_preamble() -> None:
    server = PreambleServer(hold=True)
    try:
        outcome = run_worker(nonblocking_read, args=(server.address,))
    finally:
        server.close()
    assert isinstance(outcome, Completed), outcome
    blocked, response = outcome.value
    assert blocked
    assert response.startswith(b"HTTP/1.1 200 OK\r\n")
    assert points(outcome.hits) == ["B", "C"]


def raw_exchange(hooked: Address | None, target: Address) -> bytes:
    if hooked is not None:
        install_wire_hooks([hooked])
    with socket.create_connection(target, timeout=10) as sock:
        sock.sendall(b"POST /v1/x HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\n\r\n")
        data = b""
        while not data.endswith(echo("POST", "/v1/x")):
            data += sock.recv(4096)
        return data


def test_a_connection_to_another_address_is_untouched(server: PreambleServer) -> None:
    other = PreambleServer()
    try:
        outcome = run_worker(raw_exchange, args=(other.address, server.address))
    finally:
        other.close()
    assert isinstance(outcome, Completed), outcome
    assert outcome.value.startswith(b"\x00CRASHPOINTS {")
    assert outcome.hits == ()


def test_without_hooks_nothing_changes(server: PreambleServer) -> None:
    plain = PreambleServer(preamble=False)
    try:
        unhooked = run_worker(raw_exchange, args=(None, plain.address), faults=[Fault("B")])
        raw = run_worker(raw_exchange, args=(None, server.address), faults=[Fault("B")])
    finally:
        plain.close()
    assert isinstance(unhooked, Completed) and unhooked.value.startswith(b"HTTP/1.1 200 OK")
    assert isinstance(raw, Completed) and raw.value.startswith(b"\x00CRASHPOINTS ")
    assert unhooked.hits == raw.hits == ()
    assert socket.socket.recv is socket.SocketType.recv  # nothing patched in this process


def test_hooks_without_an_armed_plan_only_strip_the_preamble(
    server: PreambleServer, tmp_path: Path
) -> None:
    import subprocess
    import sys

    host, port = server.address
    code = (
        "import http.client, sqlite3, sys\n"
        "from pytest_crashpoints.harness import install_commit_hooks, install_wire_hooks\n"
        f"install_wire_hooks([{server.address!r}])\n"
        "install_commit_hooks()\n"
        f"sqlite3.connect({str(tmp_path / 'x.sqlite3')!r}).execute('CREATE TABLE t (x)')\n"
        f"conn = http.client.HTTPConnection({host!r}, {port})\n"
        "conn.request('POST', '/v1/p', body=b'{}')\n"
        "sys.stdout.buffer.write(conn.getresponse().read())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert done.stdout == echo("POST", "/v1/p")


# -- automatic A -------------------------------------------------------------------------------


def commit_then_call(
    server: Address, url: str, database: str, steps: Sequence[str], tmp: str
) -> None:
    """A worker that does ``steps`` in order: "commit" (an INSERT), "A" (its own
    crashpoint("A")), or "METHOD /path" (a request with requests)."""
    install_wire_hooks([server])
    install_commit_hooks()
    for n, step in enumerate(steps):
        if step == "commit":
            with closing(sqlite3.connect(database)) as db, db:
                db.execute("INSERT INTO intents VALUES (?)", (n,))
        elif step == "A":
            crashpoint("A", tool="send_email")
        else:
            method, path = step.split()
            with_requests(url, [(method, path)])
        Path(tmp, f"step-{n}").write_text("done")


def a_hits(hits: Sequence[Hit]) -> list[dict[str, object]]:
    return [dict(hit.context) for hit in hits if hit.point == "A"]


def run_steps(
    server: PreambleServer, tmp_path: Path, *steps: str, faults: Sequence[Fault] = ()
) -> Outcome:
    database = tmp_path / "agent.sqlite3"
    # Made here: a commit in the worker would count.
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS intents (n INTEGER)")
    return run_worker(
        commit_then_call,
        args=(server.address, server.url, str(database), steps, str(tmp_path)),
        faults=faults,
    )


def test_a_commit_then_a_post_hits_a_before_the_post_leaves(
    server: PreambleServer, tmp_path: Path
) -> None:
    killed = run_steps(server, tmp_path, "commit", "POST /v1/charges", faults=[Fault("A")])
    assert isinstance(killed, Killed), killed
    assert killed.context == {"source": "auto", "method": "POST", "path": "/v1/charges"}
    assert server.requests == []  # the request never left
    assert (tmp_path / "step-0").exists() and not (tmp_path / "step-1").exists()

    completed = run_steps(server, tmp_path, "commit", "POST /v1/charges")
    assert isinstance(completed, Completed), completed
    assert points(completed.hits) == ["db.commit", "db.committed", "A", "http.write", "B", "C"]
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(("commit", "GET /v1/issues", "POST /v1/issues"), id="a check in between"),
        pytest.param(
            ("commit", "POST /v1/issues", "GET /v1/issues", "POST /v1/issues"),
            id="a second POST with no new commit",
        ),
    ],
)
def test_reads_between_the_commit_and_the_write_keep_the_automatic_a(
    server: PreambleServer, tmp_path: Path, steps: Sequence[str]
) -> None:
    outcome = run_steps(server, tmp_path, *steps)
    assert isinstance(outcome, Completed), outcome
    assert a_hits(outcome.hits) == [{"source": "auto", "method": "POST", "path": "/v1/issues"}]
    sent_before = len(server.requests)
    killed = run_steps(server, tmp_path, *steps, faults=[Fault("A")])
    assert isinstance(killed, Killed), killed
    # Killed before the first POST left: what came before it went out, the POST did not.
    first_post = steps.index("POST /v1/issues")
    expected = [step.split()[0] for step in steps[:first_post] if step != "commit"]
    assert [method for method, *_ in server.requests[sent_before:]] == expected


@pytest.mark.parametrize(
    ("steps", "a"),
    [
        pytest.param(("commit", "GET /v1/charges/ch_1"), [], id="a GET"),
        pytest.param(("POST /v1/a",), [], id="a POST with no commit before it"),
        pytest.param(
            ("commit", "A", "commit", "POST /v1/a"),
            [{"tool": "send_email"}],
            id="an agent that marks A itself",
        ),
    ],
)
def test_no_automatic_a(
    server: PreambleServer, tmp_path: Path, steps: Sequence[str], a: list[dict[str, object]]
) -> None:
    outcome = run_steps(server, tmp_path, *steps)
    assert isinstance(outcome, Completed), outcome
    assert a_hits(outcome.hits) == a
    assert len(server.requests) == 1


REQUEST = b"POST /v1/charges?x=1 HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n\r\n{}"


def send_raw(server: Address, database: str, how: str) -> bytes:
    """A commit, then a POST written to a raw socket in one of the ways a client may."""
    install_wire_hooks([server])
    install_commit_hooks()
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("INSERT INTO intents VALUES (1)")
    with socket.create_connection(server, timeout=10) as sock:
        if how == "sendall":
            sock.sendall(REQUEST)
        elif how == "send":
            view = memoryview(REQUEST)
            while view:
                view = view[sock.send(view[:20]) :]
        elif how == "sendmsg":
            sock.sendmsg([REQUEST[:10], REQUEST[10:]])
        else:
            with sock.makefile("wb") as writer:
                writer.write(REQUEST)
        with sock.makefile("rb") as reader:
            return reader.readline()


@pytest.mark.parametrize("how", ["sendall", "send", "sendmsg", "makefile"])
def test_automatic_a_comes_before_the_first_byte_however_it_is_sent(
    server: PreambleServer, tmp_path: Path, how: str
) -> None:
    database = tmp_path / "agent.sqlite3"
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("CREATE TABLE intents (n INTEGER)")
    args = (server.address, str(database), how)
    killed = run_worker(send_raw, args=args, faults=[Fault("A", Kill())])
    assert isinstance(killed, Killed), killed
    assert killed.context == {"source": "auto", "method": "POST", "path": "/v1/charges"}
    completed = run_worker(send_raw, args=args)
    assert isinstance(completed, Completed), completed
    assert completed.value == b"HTTP/1.1 200 OK\r\n"  # the preamble was taken off
    assert points(completed.hits) == ["db.commit", "db.committed", "A", "http.write", "B", "C"]
    server.close()
    assert sorted(server.received) == [b"", REQUEST]  # the killed worker sent no byte


def test_automatic_a_once_per_commit_then_request(server: PreambleServer, tmp_path: Path) -> None:
    outcome = run_steps(
        server,
        tmp_path,
        "commit",
        "POST /v1/a",  # A
        "PUT /v1/b",  # no commit since the last request: no A
        "commit",
        "GET /v1/c",  # a read ("is it done already?") does not end the commit's turn
        "DELETE /v1/d",  # A
        "commit",
        "PATCH /v1/e",  # A
    )
    assert isinstance(outcome, Completed), outcome
    assert [(a["method"], a["path"]) for a in a_hits(outcome.hits)] == [
        ("POST", "/v1/a"),
        ("DELETE", "/v1/d"),
        ("PATCH", "/v1/e"),
    ]


# -- the preamble ------------------------------------------------------------------------------


def test_the_preamble_is_one_compact_line_and_decodes_back() -> None:
    line = encode_preamble(["B", "C"], {"path": "/v1/charges", "status_code": 200, "ok": True})
    assert line == (
        b'\x00CRASHPOINTS {"context":{"ok":true,"path":"/v1/charges","status_code":200},'
        b'"points":["B","C"]}\n'
    )
    assert decode_preamble(line) == (
        ("B", "C"),
        {"ok": True, "path": "/v1/charges", "status_code": 200},
    )
    assert decode_preamble(encode_preamble(["C"], {})) == (("C",), {})


@pytest.mark.parametrize(
    ("points", "context"),
    [(["A"], {}), (["C", "B"], {}), (["B"], {"nested": {"a": 1}}), (["B"], {"list": [1]})],
)
def test_a_bad_preamble_is_refused(points: list[str], context: dict[str, object]) -> None:
    with pytest.raises(HarnessUsageError):
        encode_preamble(points, context)


def test_bytes_that_are_not_a_preamble_are_refused() -> None:
    with pytest.raises(HarnessError, match="not a crashpoints preamble"):
        decode_preamble(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(HarnessError, match="not valid"):
        decode_preamble(b"\x00CRASHPOINTS {oops\n")


def test_a_bad_address_is_refused() -> None:
    with pytest.raises(HarnessUsageError, match="not a \\(host, port\\) pair"):
        install_wire_hooks(["127.0.0.1:8080"])  # type: ignore[list-item]
