"""The fail-point server and the relays a command gets answer that command alone.

Another process on the machine (another local user, a compromised dependency of a
neighbouring CI job) can find the ports, listening on loopback; it must not fire a fail
point, read a task's keys, or send through a relay. Here such a process probes every one of
them while a correct command mailer runs: it gets 401 everywhere, and the mailer's case
passes with nothing of it in the provider's journal.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_crashpoints.harness import CommandWorker, Deliver, Schedule, run_case

from .test_commands import scenario, script

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux prctl"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="the script uses curl"),
]

#: A correct mailer (mark, then send, then mark) that first tells the outsider where its
#: servers are (their ports only: never the URLs it was given) and waits for its probes.
MAILER = r"""#!/bin/sh
set -e
ledger="$CRASHPOINTS_RUN_DIR/jobs.jsonl"
id="job:$CRASHPOINTS_TASK_ID"
bare() { echo "$1" | sed -E 's#^(http://[^/]+).*#\1#'; }
printf '{"failpoints": "%s", "relay": "%s"}\n' "$(bare "$CRASHPOINTS_URL")" \
  "$(bare "$CRASHPOINTS_EMAIL_URL")" > "$OUTSIDER_DIR/targets.json.tmp"
mv "$OUTSIDER_DIR/targets.json.tmp" "$OUTSIDER_DIR/targets.json"
while [ ! -f "$OUTSIDER_DIR/probed" ]; do sleep 0.01; done
curl -sf -X POST "$CRASHPOINTS_URL/failpoint/ledger.write" >/dev/null
echo "{\"attempt_id\": \"$id\", \"state\": \"pending\"}" >> "$ledger"
curl -sf -X POST "$CRASHPOINTS_EMAIL_URL/v3/mail/send" \
  -H "Authorization: Bearer $CRASHPOINTS_EMAIL_KEY" -H "Content-Type: application/json" \
  -d '{"personalizations": [{"to": [{"email": "ada@example.com"}]}],
       "from": {"email": "billing@example.com"}, "subject": "Invoice",
       "content": [{"type": "text/plain", "value": "Invoice 7"}]}' >/dev/null
curl -sf -X POST "$CRASHPOINTS_URL/failpoint/ledger.write" >/dev/null
echo "{\"attempt_id\": \"$id\", \"state\": \"sent\"}" >> "$ledger"
"""

OUTSIDER = textwrap.dedent(
    """
    import http.client, json, pathlib, sys, time, urllib.parse
    folder = pathlib.Path(sys.argv[1])
    targets = folder / "targets.json"
    while not targets.exists():
        time.sleep(0.01)
    found = json.loads(targets.read_text())
    mail = json.dumps({"personalizations": [{"to": [{"email": "eve@example.com"}]}],
                       "from": {"email": "eve@example.com"}, "subject": "x",
                       "content": [{"type": "text/plain", "value": "x"}]})
    probes = [
        ("failpoints", "GET", "/now", None),
        ("failpoints", "GET", "/tasks/job-7", None),
        ("failpoints", "POST", "/failpoint/A", "{}"),
        ("relay", "POST", "/v3/mail/send", mail),
        ("relay", "GET", "/v3/messages", None),
    ]
    answers = {}
    for target, method, path, body in probes:
        parts = urllib.parse.urlsplit(found[target])
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        connection.request(method, path, body=body,
                           headers={"Content-Type": "application/json"})
        answer = connection.getresponse()
        answers[f"{method} {target}{path}"] = [answer.status, answer.read().decode()[:200]]
        connection.close()
    (folder / "answers.json").write_text(json.dumps(answers))
    (folder / "probed").write_text("done")
    """
)


def test_an_outsider_gets_401_from_every_endpoint_and_the_mailer_passes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "outsider"
    folder.mkdir()
    worker = CommandWorker(
        [script(tmp_path, "mailer.sh", MAILER)], env={"OUTSIDER_DIR": str(folder)}
    )
    outsider = subprocess.Popen([sys.executable, "-c", OUTSIDER, str(folder)])
    try:
        result = run_case(scenario(worker), Schedule((Deliver(0),)), base_dir=tmp_path)
    finally:
        outsider.kill()
        outsider.wait()
    answers = json.loads((folder / "answers.json").read_text())
    assert len(answers) == 5
    assert {probe: answer[0] for probe, answer in answers.items()} == dict.fromkeys(answers, 401)
    assert result.passed, result.timeline
    # Only the mailer's own e-mail reached the provider: the outsider's was never forwarded.
    assert len([line for line in result.state if line.startswith("effect email")]) == 1
