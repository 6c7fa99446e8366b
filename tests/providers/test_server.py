"""The loopback server, byte by byte: the preamble hook (and, below, its limits)."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import ExitStack
from urllib.parse import urlsplit

import httpx
import pytest

from fake_providers import Provider, ResponseInfo, loopback, serve

from .conftest import issue_derived

CRASH = b"CRASHPOINT kill\n"


def http(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """An HTTP/1.0 request as bytes (Content-Length added when there is a body)."""
    lines = [f"{method} {path} HTTP/1.0", "Host: 127.0.0.1"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def charge(secret: str = "payments-writer-a") -> bytes:
    return http("POST", "/v1/charges", {
        "Authorization": f"Bearer {secret}",
        "Content-Type": "application/x-www-form-urlencoded",
    }, b"amount=5&currency=usd")


def connect_raw(url: str, timeout: float = 5.0) -> socket.socket:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def exchange(url: str, raw: bytes) -> bytes:
    with connect_raw(url) as sock:
        sock.sendall(raw)
        return read_all(sock)


class Hook:
    """A preamble hook that records its calls and answers ``CRASH`` to one label."""

    def __init__(self, label: str | None = "worker-1") -> None:
        self.label = label
        self.calls: list[tuple[httpx.Request, ResponseInfo]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request, response: httpx.Response) -> bytes:
        info = response.extensions["crashpoints"]
        with self.lock:
            self.calls.append((request, info))
        return CRASH if info.label == self.label else b""


def test_the_preamble_reaches_the_client_before_the_status_line(payments: Provider) -> None:
    secret = issue_derived(payments, "worker-1")
    hook = Hook()
    with serve(payments, preamble=hook) as url, connect_raw(url) as sock:
        sock.sendall(charge(secret))
        first = sock.recv(65536)  # one write: preamble and answer arrive together
        answer = first + read_all(sock)
    assert first.startswith(CRASH + b"HTTP/1.0 200 ")
    head, _, body = answer[len(CRASH):].partition(b"\r\n\r\n")
    assert b'"object": "charge"' in body
    [(request, info)] = hook.calls
    assert (request.method, request.url.path) == ("POST", "/v1/charges")
    assert (info.operation, info.status, info.effect_applied, info.label) == (
        "charges.create", 200, True, "worker-1")
    [effect] = payments.journal.effects()
    assert effect.request_id == info.request_id
    assert f"Request-Id: {info.request_id}".encode() in head


def test_an_empty_preamble_leaves_the_answer_as_it_is(payments: Provider) -> None:
    hook = Hook()
    with serve(payments, preamble=hook) as url:
        assert exchange(url, charge()).startswith(b"HTTP/1.0 200 ")
        with httpx.Client(base_url=url) as client:  # a client that knows nothing of preambles
            got = client.get("/v1/charges/ch_x", headers={"Authorization": "Bearer nope"})
            assert got.status_code == 401
    assert [info.status for _, info in hook.calls] == [200, 401]  # refusals too


def test_no_preamble_for_a_lost_response(payments: Provider) -> None:
    hook = Hook(label=None)  # would answer CRASH to every plain key
    payments.faults.lose_responses(1)
    with serve(payments, preamble=hook) as url:
        assert exchange(url, charge()) == b""  # closed without a byte
        assert exchange(url, charge()).startswith(CRASH + b"HTTP/1.0 200 ")
    assert len(payments.journal.effects()) == 2
    assert len(hook.calls) == 1


def test_no_preamble_for_a_lookup_timeout(payments: Provider) -> None:
    hook = Hook(label=None)
    payments.faults.lookup_timeouts(1)
    lookup = http("GET", "/v1/charges/ch_x", {"Authorization": "Bearer payments-reader-a"})
    with serve(payments, preamble=hook) as url:
        assert exchange(url, lookup) == b""
        assert exchange(url, lookup).startswith(CRASH + b"HTTP/1.0 404 ")
    assert [r.fault for r in payments.journal.requests()] == ["lookup_timeout", None]
    assert len(hook.calls) == 1


@pytest.mark.parametrize("broken", ["raises", "returns-str"])
def test_a_broken_preamble_is_a_500_and_the_server_carries_on(
    payments: Provider, broken: str
) -> None:
    calls = []

    def hook(request: httpx.Request, response: httpx.Response) -> bytes:
        calls.append(response.extensions["crashpoints"])
        if len(calls) == 1:
            if broken == "raises":
                raise RuntimeError("hook bug")
            return "not bytes"  # type: ignore[return-value]
        return b""

    with serve(payments, preamble=hook) as url:
        failed = exchange(url, charge())
        assert failed.startswith(b"HTTP/1.0 500 ")
        assert (b"hook bug" if broken == "raises" else b"not bytes") in failed
        assert exchange(url, charge()).startswith(b"HTTP/1.0 200 ")
    # The provider journaled each request once (the first was applied before the hook ran);
    # the hook's failure added nothing.
    assert [(r.status, r.effect_applied) for r in payments.journal.requests()] == [
        (200, True), (200, True)]
    assert len(calls) == 2


# -- limits -------------------------------------------------------------------------------------
# Each of these failed before the server checked the length, the body and the clock itself: the
# server read a huge or lying Content-Length, handled a truncated body, held a stalled connection
# for 30 s, and made leaving serve() wait for it.


def head_only(length: str) -> bytes:
    return (
        "POST /v1/charges HTTP/1.0\r\nHost: 127.0.0.1\r\n"
        "Authorization: Bearer payments-writer-a\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_body_over_the_limit_is_a_413_without_reading_it(payments: Provider) -> None:
    body = b"amount=5&currency=usd"
    with serve(payments, max_body=len(body)) as url:
        assert exchange(url, charge()).startswith(b"HTTP/1.0 200 ")  # at the limit: fine
        with connect_raw(url, timeout=3) as sock:
            sock.sendall(head_only(str(len(body) + 1)))  # the body never comes
            assert read_all(sock).startswith(b"HTTP/1.0 413 ")
    with serve(payments) as url, connect_raw(url, timeout=3) as sock:  # default: 10 MiB
        sock.sendall(head_only(str(10 * 1024 * 1024 + 1)))
        assert read_all(sock).startswith(b"HTTP/1.0 413 ")
    assert len(payments.journal.requests()) == 1


@pytest.mark.parametrize(
    "length", ["99999999999999999999999", "-1", "abc", "1_0", "+5", "5 5", "0x10"]
)
def test_a_content_length_that_is_not_a_sane_number_is_a_400(
    payments: Provider, length: str
) -> None:
    with serve(payments) as url, connect_raw(url, timeout=3) as sock:
        sock.sendall(head_only(length) + b"amount=5&currency=usd")
        assert read_all(sock).startswith(b"HTTP/1.0 400 ")
    assert payments.journal.requests() == []


def test_conflicting_content_lengths_are_a_400(payments: Provider) -> None:
    raw = head_only("21").replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n")
    with serve(payments) as url, connect_raw(url, timeout=3) as sock:
        sock.sendall(raw + b"amount=5&currency=usd")
        assert read_all(sock).startswith(b"HTTP/1.0 400 ")
    assert payments.journal.requests() == []


def test_a_truncated_body_is_never_handled(payments: Provider) -> None:
    with serve(payments) as url, connect_raw(url, timeout=3) as sock:
        sock.sendall(head_only("21") + b"amount=5")
        sock.shutdown(socket.SHUT_WR)  # the client gives up half way
        assert read_all(sock).startswith(b"HTTP/1.0 400 ")
    assert payments.journal.requests() == []


#: A client that stops sending half way through its request's head, or through its body.
STALLED = pytest.mark.parametrize(
    "sent",
    [b"POST /v1/charges HTTP/1.0\r\nContent-Le", head_only("21") + b"amount=5"],
    ids=["in-the-head", "in-the-body"],
)


@STALLED
def test_a_stalled_request_is_dropped_after_the_read_timeout(
    payments: Provider, sent: bytes
) -> None:
    with serve(payments, read_timeout=0.3) as url, connect_raw(url, timeout=5) as sock:
        sock.sendall(sent)
        started = time.monotonic()
        assert read_all(sock) == b""  # the server hung up on the stalled client
        assert time.monotonic() - started < 3
    assert payments.journal.requests() == []


@STALLED
def test_leaving_serve_does_not_wait_for_a_stalled_client(
    payments: Provider, sent: bytes
) -> None:
    with ExitStack() as stack:
        with serve(payments) as url:  # the default read timeout, 10 s
            sock = stack.enter_context(connect_raw(url))
            sock.sendall(sent)
            assert exchange(url, charge()).startswith(b"HTTP/1.0 200 ")  # it was accepted
            started = time.monotonic()
        assert time.monotonic() - started < 1.5
        assert read_all(sock) == b""  # closed without an answer, and without handling it
    assert len(payments.journal.requests()) == 1


@pytest.mark.parametrize("bad", [{"max_body": -1}, {"max_body": 1.5}, {"read_timeout": 0},
                                 {"read_timeout": float("inf")}])
def test_bad_limits_are_refused(payments: Provider, bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))), serve(payments, **bad):  # type: ignore[arg-type]
        pass


# -- settling: no request still being answered ------------------------------------------------


def test_settle_waits_for_a_request_whose_client_is_gone(payments: Provider) -> None:
    """A request that reached the server is answered before ``settle`` returns, even when
    its client left at once (a worker that died): the journal holds it afterwards. Here the
    provider is held up on its journal's lock, as a loaded machine holds it up."""
    import sqlite3

    with loopback(payments) as server:
        blocker = sqlite3.connect(payments.journal.path, timeout=30, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # the provider cannot journal until this ends
        try:
            with connect_raw(server.url) as sock:
                sock.sendall(charge())
            # The client is gone; the server is answering (it waits for the lock).
            assert not server.settle(timeout=0.3)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert server.settle(timeout=30)
        assert [r.operation for r in payments.journal.requests()] == ["charges.create"]


def test_settle_is_not_held_by_a_client_that_sent_nothing_yet(payments: Provider) -> None:
    """A connected client that has not sent its request (a live worker stopped before it)
    does not hold ``settle``: nothing of it can reach the journal until it sends."""
    with loopback(payments) as server, connect_raw(server.url) as idle:
        assert server.settle(timeout=5)
        started = time.monotonic()
        assert server.settle(timeout=5)
        assert time.monotonic() - started < 1.0
        idle.sendall(charge())
        assert server.settle(timeout=30)
        assert read_all(idle).startswith(b"HTTP/1.0 200 ")
    assert len(payments.journal.requests()) == 1


def test_settle_waits_for_a_request_sent_in_pieces_once_it_is_whole(
    payments: Provider,
) -> None:
    raw = charge()
    with loopback(payments) as server, connect_raw(server.url) as sock:
        sock.sendall(raw[:20])
        # Half a request from a live client: nothing to answer yet, nothing journaled.
        assert server.settle(timeout=5)
        assert payments.journal.requests() == []
        sock.sendall(raw[20:])
        assert server.settle(timeout=30)
        assert len(payments.journal.requests()) == 1


# -- admission: only the run's own processes reach the ground truth -----------------------------


def test_a_request_the_admission_hook_refuses_is_never_journaled(payments: Provider) -> None:
    seen: list[tuple[str, tuple[str, int]]] = []

    def admit(request: httpx.Request, client: tuple[str, int]) -> str | None:
        seen.append((request.headers.get("Authorization", ""), client))
        if request.headers.get("Authorization") == "Bearer payments-writer-a":
            return None
        return "not this run's"

    with loopback(payments, admit=admit) as server:
        assert b" 200 " in exchange(server.url, charge("payments-writer-a"))
        refused = exchange(server.url, charge("payments-writer-b"))
        assert refused.startswith(b"HTTP/1.0 401 ") and b"not this run's" in refused
        assert server.settle(timeout=30)
        assert server.refused == [("POST", "/v1/charges", "not this run's")]
    assert [r.tenant_id for r in payments.journal.requests()] == ["tenant-a"]
    assert seen[0][1][0] == "127.0.0.1"  # the hook is told where the request came from


def test_an_admission_hook_that_raises_refuses(payments: Provider) -> None:
    def admit(request: httpx.Request, client: tuple[str, int]) -> str | None:
        raise RuntimeError("broken hook")

    with loopback(payments, admit=admit) as server:
        answer = exchange(server.url, charge())
        assert answer.startswith(b"HTTP/1.0 401 ") and b"broken hook" in answer
    assert payments.journal.requests() == []
