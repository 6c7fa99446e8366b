"""Fail points of a program, decided by the harness worker that started it.

A Python program the harness runs as a command (``python agent.py``, ``python -m agent``) is
not a harness worker: the *bridge* that started it is (``_harness/case/bridge.py``), armed
with the schedule's faults. At start-up the program installs a :class:`RemotePlan`
(``_harness/case/program_hooks.py``), and from then on every fail point call it makes (its
own ``crashpoint()`` calls, and those its commit hooks place) is one request of the fail-point
protocol to the bridge (``_harness/case/failpoint_server.py``), which fires the point there and
answers when it has decided:

- continue: the call returns;
- kill: no answer, ever. The bridge is killed with its process group, this program in it,
  while the call waits;
- pause: the answer waits until the harness releases the gate;
- raise: the answer names the exception's class and message (``sqlite3.OperationalError:
  disk I/O error`` for a failed commit); the same class is raised here with the same message
  (one that cannot be imported here, or is not an exception class: :class:`HarnessError`).

A deferred call (``crashpoint_deferred``) is counted at once, its action held until the
bridge's next fail point. If the bridge cannot be reached, the harness is gone and nobody is
left to decide: the program kills itself, as a worker does whose harness is gone.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib
import json
import os
import signal
import urllib.parse

from ..errors import HarnessError
from .failpoints import _plain

__all__ = ["RemotePlan", "exception_from"]


def exception_from(answer: dict[str, object]) -> Exception:
    """The exception a ``raise`` answer of the fail-point protocol names: its ``type``
    (``module.QualifiedName``) made with its ``message``; :class:`HarnessError` saying so if
    that class cannot be imported or is not an exception class."""
    name, message = str(answer.get("type", "")), str(answer.get("message", ""))
    module, _, qualname = name.rpartition(".")
    found: object = None
    with contextlib.suppress(ImportError, AttributeError, ValueError):
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    if isinstance(found, type) and issubclass(found, Exception):
        with contextlib.suppress(Exception):
            return found(message)
    return HarnessError(f"the harness raised {answer.get('error', name)!s} at a fail point")


class RemotePlan:
    """Fail point calls sent to the fail-point protocol at ``url`` (``$CRASHPOINTS_URL``,
    which ends in this process's credential), one request each."""

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise HarnessError(f"{url!r} is not the http://host:port/... of a fail-point server")
        self.host, self.port = parts.hostname, parts.port
        self.base = parts.path.rstrip("/")

    def hit(self, name: str, context: dict[str, object], *, defer: bool) -> None:
        path = f"{self.base}/failpoint/{urllib.parse.quote(name, safe='')}"
        if defer:
            path += "?deferred=1"
        body = json.dumps(_plain(context)).encode()
        # No timeout: a pause holds the answer as long as the harness needs, and the
        # harness's own timeout ends this process with the bridge.
        connection = http.client.HTTPConnection(self.host, self.port)
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            status, text = response.status, response.read()
        except (OSError, http.client.HTTPException):
            _harness_gone()
            raise  # not reached
        finally:
            connection.close()
        if status == 200:
            return
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {}
        if status == 500 and isinstance(answer, dict) and answer.get("action") == "raise":
            raise exception_from(answer)
        raise HarnessError(
            f"the harness answered fail point {name!r} with {status}: "
            f"{text[:200].decode('utf-8', 'replace')}"
        )


def _harness_gone() -> None:
    """The bridge is gone (killed, timed out): end as its process group would have."""
    os.kill(os.getpid(), signal.SIGKILL)
