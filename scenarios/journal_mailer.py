"""A mailer that keeps its jobs in a JSON-lines journal of its own: nothing of the harness in it.

Each change of a job is one line appended to the journal, written whole and synced
(``flush`` and ``os.fsync``) before the mailer goes on: ``sending`` before the mail goes out
through a SendGrid-style v3 API with plain httpx, ``sent`` after. A job found ``sending``
(the worker died between the two, the mail maybe gone) is parked for a person (``review``),
never sent again. Every line it wrote survives a kill, and every line it synced survives a
power loss.

What a power loss can leave is one thing more: the line being written when the power went,
between its ``write()`` and its ``fsync()``, cut short. Two readers of the journal:

- ``repair=False``: every line must be JSON, or the journal is taken for corrupt and the
  worker refuses to start (:class:`CorruptJournal`). After a torn last line it never starts
  again: the job is never mailed, or never marked.
- ``repair=True``: the fix. A last line without its newline is a write the power cut; it is
  cut off (and the cut synced) before the journal is read or appended to. Appending after it
  would glue the next line to the torn one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx


class CorruptJournal(Exception):
    """A line of the journal is not JSON."""


def _cut_torn_tail(path: Path) -> None:
    """Cut what follows the journal's last newline (a line the power cut short), synced."""
    with open(path, "r+b") as journal:
        data = journal.read()
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            journal.truncate(whole)
            journal.flush()
            os.fsync(journal.fileno())


def read_states(path: Path, *, repair: bool) -> dict[str, str]:
    """Each job's last state in the journal (none yet: empty). ``repair``: cut a torn last
    line off first; else a line that is not JSON raises :class:`CorruptJournal`."""
    if not path.exists():
        return {}
    if repair:
        _cut_torn_tail(path)
    states: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise CorruptJournal(f"{path.name}:{number} is not JSON: {line[:40]!r}") from None
        states[entry["job"]] = entry["state"]
    return states


def _append(path: Path, entry: Mapping[str, Any]) -> None:
    """One line, written whole and synced before the mailer goes on."""
    with open(path, "a", encoding="utf-8") as journal:
        journal.write(json.dumps(dict(entry)) + "\n")
        journal.flush()
        os.fsync(journal.fileno())


def _send(job: Mapping[str, Any], *, api_url: str, api_key: str) -> None:
    response = httpx.post(
        f"{api_url}/v3/mail/send",
        headers={"Authorization": f"Bearer {api_key}"},
        json={
            "personalizations": [{"to": [{"email": job["recipient"]}]}],
            "from": {"email": "billing@example.com"},
            "subject": "Your invoice",
            "content": [{"type": "text/plain", "value": job["body"]}],
        },
        timeout=10.0,
    )
    response.raise_for_status()


def handle(
    job: Mapping[str, Any], *, journal: str | Path, api_url: str, api_key: str, repair: bool
) -> str:
    """Mail ``job`` once: ``sending`` synced, the mail, ``sent`` synced. A job found
    ``sending`` is parked (``review``); one found ``sent`` or ``review`` is done."""
    path = Path(journal)
    state = read_states(path, repair=repair).get(job["task_id"])
    if state in ("sent", "review"):
        return state
    if state == "sending":  # died after the send, maybe: a person decides
        _append(path, {"job": job["task_id"], "state": "review"})
        return "review"
    _append(path, {"job": job["task_id"], "state": "sending", "to": job["recipient"]})
    _send(job, api_url=api_url, api_key=api_key)
    _append(path, {"job": job["task_id"], "state": "sent"})
    return "sent"
