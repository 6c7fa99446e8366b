"""``crashpoints replay`` with a forged token: refused in one line before pytest starts."""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest

from pytest_crashpoints.cli import main


def forge(nodeid: object, *steps: dict[str, object]) -> str:
    schedule = {"version": 1, "steps": list(steps) or [{"step": "Deliver", "message": 0}]}
    raw = json.dumps({"schedule": schedule, "seed": 1, "nodeid": nodeid}).encode()
    return base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep-me.txt").write_text("precious")
    # A module pytest would import if a token could say -p, and a test that uses tmp_path (so
    # a --basetemp it was given would be emptied).
    (tmp_path / "evil_plugin.py").write_text("open('imported', 'w').close()\n")
    (tmp_path / "test_plain.py").write_text("def test_plain(tmp_path):\n    pass\n")
    (tmp_path / "args.txt").write_text("--basetemp=victim\n")
    return tmp_path


@pytest.mark.parametrize("nodeid", ["--basetemp=victim", "-pevil_plugin", "@args.txt", 7])
def test_a_forged_node_id_never_reaches_pytest(
    workdir: Path, nodeid: object, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", forge(nodeid), "--", "-p", "no:randomly"]) == 2
    out, err = capfd.readouterr()
    assert err.startswith("crashpoints replay: error: replay token refused: its node id")
    assert err.count("\n") == 1 and out == ""  # one line, and pytest never ran
    assert (workdir / "victim" / "keep-me.txt").read_text() == "precious"
    assert not (workdir / "imported").exists()


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ({"step": "Advance", "seconds": -50}, "seconds=-50"),
        ({"step": "Deliver", "message": 0, "kill": {"point": "B", "hit": 0}}, "hit=0"),
    ],
)
def test_a_forged_step_is_one_line(
    workdir: Path, step: dict[str, object], why: str, capfd: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", forge("test_plain.py::test_plain", step)]) == 2
    err = capfd.readouterr().err
    assert why in err and err.count("\n") == 1 and "Traceback" not in err
