"""The loopback server, byte by byte: the preamble hook (and, below, its limits)."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit

import httpx
import pytest

from fake_providers import Provider, ResponseInfo, derive_key, serve

from .conftest import SIGNING_SECRET

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
    payments.keys.set_signing_secret(SIGNING_SECRET)
    secret = derive_key("payments-writer-a", "worker-1", signing_secret=SIGNING_SECRET)
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
