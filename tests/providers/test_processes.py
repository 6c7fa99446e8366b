"""Real processes: racing workers, and a worker SIGKILLed right after the provider applied."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from fake_providers import Provider, mock, serve

from .conftest import auth
from .test_faults import WRITES

FRESH, REPLAYED, IN_USE, OTHER = 10, 11, 12, 13


@contextmanager
def reachable(provider: Provider, way: str) -> Iterator[str]:
    """The provider's URL, reachable by a plain httpx client in this process and its forks."""
    with ExitStack() as stack:
        if way == "inprocess":
            stack.enter_context(mock(provider))
            yield provider.base_url
        else:
            yield stack.enter_context(serve(provider))


def fork(child: Callable[[], int]) -> int:
    pid = os.fork()
    if pid == 0:
        code = OTHER
        try:
            code = child()
        finally:
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _race(url: str, key: str, ready_w: int, go_r: int) -> int:
    with httpx.Client(base_url=url) as client:
        os.write(ready_w, b"r")
        os.read(go_r, 1)  # both racers start together
        reply = client.post(
            "/v1/charges", data={"amount": "100", "currency": "usd"},
            headers=auth("payments-writer-a", **{"Idempotency-Key": key}),
        )
    if reply.status_code == 409:
        return IN_USE
    if reply.status_code == 200:
        return REPLAYED if reply.headers.get("Idempotent-Replayed") else FRESH
    return OTHER


@pytest.mark.parametrize("way", ["inprocess", "loopback"])
def test_two_processes_racing_one_key_make_one_effect(payments: Provider, way: str) -> None:
    with reachable(payments, way) as url:
        for round_ in range(8):
            key = f"race-{round_}"
            ready_r, ready_w = os.pipe()
            go_r, go_w = os.pipe()

            racer = functools.partial(_race, url, key, ready_w, go_r)
            pids = [fork(racer), fork(racer)]
            assert os.read(ready_r, 1) + os.read(ready_r, 1) == b"rr"
            os.write(go_w, b"gg")
            codes = sorted(exit_code(pid) for pid in pids)
            for fd in (ready_r, ready_w, go_r, go_w):
                os.close(fd)
            assert codes in ([FRESH, REPLAYED], [FRESH, IN_USE])
            assert len(payments.journal.effects(operation_key=key)) == 1
    in_use = [r for r in payments.journal.requests() if r.status == 409]
    assert all(not r.effect_applied for r in in_use)


@pytest.mark.parametrize("way", ["inprocess", "loopback"])
@pytest.mark.parametrize("name", sorted(WRITES))
def test_worker_killed_after_the_provider_applied(
    request: pytest.FixtureRequest, name: str, way: str
) -> None:
    """The worker dies (SIGKILL) the moment the response reaches it: the journal holds exactly
    the effect it caused, recorded with its request."""
    provider: Provider = request.getfixturevalue(name)
    applied_r, applied_w = os.pipe()
    hold_r, hold_w = os.pipe()
    with reachable(provider, way) as url:

        def worker() -> int:
            def freeze(response: httpx.Response) -> None:
                os.write(applied_w, b"a")
                os.read(hold_r, 1)  # killed here, before the worker can record anything

            with httpx.Client(base_url=url, event_hooks={"response": [freeze]}) as client:
                WRITES[name](client)
            return OTHER

        pid = fork(worker)
        try:
            assert os.read(applied_r, 1) == b"a"
        finally:
            os.kill(pid, signal.SIGKILL)
            assert exit_code(pid) == -signal.SIGKILL
            for fd in (applied_r, applied_w, hold_r, hold_w):
                os.close(fd)
    [effect] = provider.journal.effects()
    [recorded] = provider.journal.requests()
    assert recorded.effect_applied and recorded.request_id == effect.request_id
    assert recorded.status in (200, 201, 202)
    assert (effect.tenant_id, effect.key_id) == ("tenant-a", recorded.key_id)


def test_forked_worker_inherits_the_in_process_routes(email: Provider) -> None:
    with mock(email):
        def worker() -> int:
            with httpx.Client() as client:
                reply = client.post(
                    f"{email.base_url}/v3/mail/send", headers=auth("email-writer-a"),
                    json={"personalizations": [{"to": [{"email": "b@example.com"}]}],
                          "from": {"email": "a@example.com"}, "subject": "s",
                          "content": [{"type": "text/plain", "value": "v"}]},
                )
            return FRESH if reply.status_code == 202 else OTHER

        assert exit_code(fork(worker)) == FRESH
    [effect] = email.journal.effects()
    assert effect.operation == "mail.send"
