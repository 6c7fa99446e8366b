"""``crashpoints reproduce``: an incident from production, as a crash test that fails on it.

From the incident's files (a copy of the agent's ledger, the providers' exports) and the
worker, recovery and ledger view the crash tests already have, it writes a pytest test whose
cases all start from that state (:class:`~pytest_crashpoints.Incident`): the messages
redelivered, recovery run, under every single-fault schedule. Then it runs it. The test fails
while the bug is there, and is kept as the regression test once it is fixed.

Nothing is written when an argument is wrong (exit 2, one line that says what to do); the
test file is written whole or not at all.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import json
import os
import pprint
import re
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plugin.results import write_text
from ..errors import CrashpointsError

__all__ = ["Reproduction", "reproduce"]

#: Exit status of a usage error (nothing written).
USAGE = 2


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """What ``crashpoints reproduce`` was given: ``module:function`` names of the worker, the
    recovery and the ledger view; the incident's files; the messages to redeliver (none: the
    recovery alone is run, and the worker may be left out)."""

    worker: str | None
    output: Path
    recover: str | None = None
    view: str | None = None
    ledger: Path | None = None
    exports: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    providers: Sequence[str] = ()
    messages: Sequence[Mapping[str, Any]] = ()
    at: dt.datetime | None = None
    points: str | None = None
    force: bool = False


def reproduce(
    spec: Reproduction, *, run: bool = True, pytest_args: Sequence[str] = (),
    command: Sequence[str] = (),
) -> int:
    """Write the test of ``spec`` and run it: 1 when the incident reproduces (a violation),
    0 when every schedule passes, 2 for an argument error or a test that reached no verdict."""
    try:
        source = render(spec, command=command)
    except CrashpointsError as exc:
        print(f"crashpoints reproduce: error: {exc}", file=sys.stderr)
        return USAGE
    write_text(spec.output, source)  # whole or not at all, with the umask's mode
    print(f"crashpoints reproduce: wrote {spec.output}")
    if not run:
        return 0
    with tempfile.TemporaryDirectory(prefix="crashpoints-reproduce-") as scratch:
        report = _report_path(pytest_args) or Path(scratch) / "report.json"
        verdict, invariants = _run(spec.output, report, pytest_args)
    if verdict == "failed" and invariants:
        print(
            f"crashpoints reproduce: the incident reproduces (invariant(s) "
            f"{', '.join(map(str, invariants))}): {spec.output} fails (above). Keep it: once "
            "the bug is fixed it passes, and it fails again if the bug comes back."
        )
        return 1
    if verdict == "passed":
        print(
            f"crashpoints reproduce: not reproduced: from the incident's state, every schedule "
            f"of {spec.output} passes."
        )
        return 0
    print(
        f"crashpoints reproduce: {spec.output} reached no verdict on the incident "
        f"({verdict or 'no report'}: see above); nothing is reproduced yet. Fix what it says, "
        f"then run `pytest {spec.output}`.",
        file=sys.stderr,
    )
    return USAGE


def _run(output: Path, report: Path, pytest_args: Sequence[str]) -> tuple[str | None, list[Any]]:
    """Run the written test; its verdict and the invariants it found broken, from its report."""
    from .gate import run_pytest

    extra = [] if _report_path(pytest_args) else [f"--crashpoints-report={report}"]
    run_pytest([*extra, *pytest_args, f"./{os.path.relpath(output)}"])
    try:
        tests = json.loads(report.read_text(encoding="utf-8"))["tests"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, []
    mine = [t for t in tests if str(t.get("nodeid", "")).split("::")[0].endswith(output.name)]
    if len(mine) != 1:
        return None, []
    failure = mine[0].get("failure") or {}
    if failure.get("errors"):
        # The written test broke before it could judge (a worker that raised in the fault-free
        # case): what the checks then said follows from that, and is no reproduction.
        return "error", []
    return mine[0].get("verdict"), list(failure.get("invariants") or [])


def _report_path(pytest_args: Sequence[str]) -> Path | None:
    """The ``--crashpoints-report`` among pytest's arguments, if any."""
    for index, arg in enumerate(pytest_args):
        if arg.startswith("--crashpoints-report="):
            return Path(arg.partition("=")[2])
        if arg == "--crashpoints-report" and index + 1 < len(pytest_args):
            return Path(pytest_args[index + 1])
    return None


def render(spec: Reproduction, *, command: Sequence[str] = ()) -> str:
    """The test file's source. Raises :class:`CrashpointsError` for anything wrong."""
    _check(spec)
    here = spec.output.resolve().parent
    modules: dict[str, str] = {}
    calls = {}
    # With no message to deliver, the worker never runs: the test names the recovery alone.
    worker = spec.worker if spec.messages else None
    for role, name in (("worker", worker), ("recover", spec.recover),
                       ("ledger_view", spec.view)):
        if name is not None:
            module, attr = _resolve(role, name)
            alias = modules.setdefault(module, f"agent_{len(modules) + 1}" if modules else "agent")
            calls[role] = f"{alias}.{attr}"
    providers = list(dict.fromkeys([*spec.exports, *spec.providers]))
    name = _identifier(spec.output.stem)
    lines = [
        '"""The incident of ' + _what(spec) + ", reproduced (written by `crashpoints "
        'reproduce`).',
        "",
        "Every case starts where production stopped (the ledger and the providers' objects "
        "below),",
        ("redelivers the messages and runs recovery" if spec.messages else
         "runs the recovery alone (there is no message to redeliver)")
        + ", under every single-fault",
        "schedule. It fails while the bug is there; keep it as the regression test once the "
        "bug is fixed.",
    ]
    if command:
        lines += ["", *_command_lines(command)]
    lines += ['"""', "", "from __future__ import annotations", ""]
    if spec.at is not None:
        lines.append("import datetime")
    lines += ["from pathlib import Path", "", "import pytest", ""]
    lines += ["from pytest_crashpoints import CrashpointsFixture, Incident", ""]
    lines += [f"import {module} as {alias}" for module, alias in modules.items()]
    lines += ["", "HERE = Path(__file__).parent", "INCIDENT = Incident("]
    if spec.ledger is not None:
        lines.append(f"    ledger=HERE / {_relative(spec.ledger, here)!r},")
    if spec.exports:
        lines.append("    exports={")
        lines += [f"        {name!r}: HERE / {_relative(path, here)!r},"
                  for name, path in spec.exports.items()]
        lines.append("    },")
    if spec.at is not None:
        lines.append(f"    at=datetime.datetime.fromisoformat({spec.at.isoformat()!r}),")
    lines.append(")")
    if spec.messages:
        lines += ["#: The messages the queue redelivers.",
                  "MESSAGES = " + pprint.pformat(list(map(dict, spec.messages)), width=88,
                                                 sort_dicts=False)]
    lines += ["", ""]
    # Fixed, an incident's recovery may never reach a point (A and B: it never calls the
    # tool again): that is no gap in the test's coverage.
    marker = [f"providers={providers!r}", 'mode="exhaustive"', "max_faults=1",
              "strict_coverage=False"]
    if spec.points is not None:
        marker.insert(0, f"points={spec.points!r}")
    lines.append(f"@pytest.mark.crashpoints({', '.join(marker)})")
    lines.append(f"def {name}(crashpoints: CrashpointsFixture) -> None:")
    arguments = [f"{role}={call}" for role, call in calls.items()]
    arguments += ["messages=MESSAGES"] if spec.messages else []
    arguments.append("incident=INCIDENT")
    lines.append("    crashpoints.run(")
    lines += [f"        {argument}," for argument in arguments]
    lines.append("    )")
    return "\n".join(lines) + "\n"


def _command_lines(command: Sequence[str]) -> list[str]:
    """The command line, an option per line (with its value), for the docstring."""
    words = [shlex.quote(word) for word in command]
    lines = [words[0]]
    for word in words[1:]:
        if word.startswith("-"):
            lines.append(word)
        else:
            lines[-1] += f" {word}"
    return ["    " + lines[0], *(f"        {line}" for line in lines[1:])]


def _what(spec: Reproduction) -> str:
    files = [spec.ledger] if spec.ledger is not None else []
    files += list(spec.exports.values())
    return " and ".join(path.name for path in files)


def _check(spec: Reproduction) -> None:
    """Raises :class:`CrashpointsError` saying what is wrong with ``spec``."""
    from fake_providers import PROVIDERS, ExportError, read_export

    if spec.output.suffix != ".py" or not spec.output.name.startswith("test_"):
        raise CrashpointsError(
            f"-o {spec.output}: name the test file test_<something>.py, so pytest collects it."
        )
    if spec.output.exists() and not spec.force:
        raise CrashpointsError(f"{spec.output} exists; give another -o, or --force to replace it.")
    if not spec.output.resolve().parent.is_dir():
        raise CrashpointsError(f"-o {spec.output}: its folder does not exist.")
    if spec.ledger is None and not spec.exports:
        raise CrashpointsError("give the incident's --ledger and/or --export PROVIDER=FILE.")
    if not spec.messages and spec.recover is None:
        raise CrashpointsError(
            "no message to redeliver and no --recover: nothing would run; give --message "
            "(the messages production never acknowledged) or --recover."
        )
    if spec.messages and spec.worker is None:
        raise CrashpointsError(
            "--message given but no --worker to deliver it to: give --worker MODULE:FUNCTION, "
            "or leave the messages out to run the recovery alone."
        )
    if not spec.messages and spec.ledger is None:
        raise CrashpointsError(
            "no message to redeliver: the recovery alone runs, from the work the ledger "
            "holds; give the incident's --ledger."
        )
    for path in [spec.ledger, *spec.exports.values()]:
        if path is not None and not path.is_file():
            raise CrashpointsError(f"{path}: no such file.")
    for name in [*spec.exports, *spec.providers]:
        if name not in PROVIDERS:
            raise CrashpointsError(
                f"provider {name!r} is not a bundled one ({', '.join(sorted(PROVIDERS))}); for "
                "your own, write the test with pytest_crashpoints.Incident by hand "
                "(docs/howto-incident.md)."
            )
    with tempfile.TemporaryDirectory(prefix="crashpoints-reproduce-") as scratch:
        if spec.ledger is not None:  # a dump SQLite cannot run, a file it cannot read
            from .._harness.case.incident_ledger import place_ledger

            place_ledger(spec.ledger, Path(scratch) / "ledger")
        for name, path in spec.exports.items():
            provider = PROVIDERS[name](Path(scratch) / f"{name}.db")
            try:
                provider.exported_objects(read_export(path), where=str(path))
            except ExportError as exc:
                raise CrashpointsError(str(exc)) from None
            finally:
                provider.close()
    for index, message in enumerate(spec.messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("task_id"), str):
            raise CrashpointsError(
                f"message {index} ({message!r}) is not an object with a 'task_id' string."
            )


def _resolve(role: str, name: str) -> tuple[str, str]:
    """``module:attribute`` of a callable importable from here; raises CrashpointsError."""
    module, _, attr = name.partition(":")
    if not module or not attr or not all(p.isidentifier() for p in [*module.split("."), attr]):
        raise CrashpointsError(
            f"--{role.replace('_', '-')} {name!r}: give MODULE:FUNCTION, e.g. "
            "tests.test_billing:worker (a module importable from this folder)."
        )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        raise CrashpointsError(f"--{_flag(role)} {name}: cannot import {module} ({exc}).") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a syntax error, the module's own code raising or exiting
        raise CrashpointsError(
            f"--{_flag(role)} {name}: importing {module} raised "
            f"{type(exc).__name__}: {exc} (pytest would too: fix it, or set what it needs)."
        ) from None
    if not hasattr(imported, attr):
        raise CrashpointsError(f"--{_flag(role)} {name}: {module} has no {attr!r}.")
    found = getattr(imported, attr)
    if not callable(found):
        raise CrashpointsError(f"--{_flag(role)} {name}: {found!r} is not callable.")
    return module, attr


def _flag(role: str) -> str:
    return {"ledger_view": "view"}.get(role, role)


def _relative(path: Path, here: Path) -> str:
    return os.path.relpath(path.resolve(), here)


def _identifier(text: str) -> str:
    name = re.sub(r"\W+", "_", text).strip("_").lower()
    return name if name.isidentifier() else f"test_{name}"


def read_messages(given: Sequence[str], files: Sequence[str]) -> list[Any]:
    """The messages of ``--message JSON`` and ``--messages FILE`` (a JSON array, one object,
    or JSON lines); raises CrashpointsError."""
    messages: list[Any] = []
    for text in given:
        try:
            messages.append(json.loads(text))
        except ValueError as exc:
            raise CrashpointsError(f"--message {text!r} is not JSON ({exc}).") from None
    for name in files:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise CrashpointsError(f"--messages {name}: {exc.strerror or exc}.") from None
        try:
            data = json.loads(text)
            messages += data if isinstance(data, list) else [data]
        except ValueError:
            try:
                messages += [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError as exc:
                raise CrashpointsError(
                    f"--messages {name} is neither JSON nor JSON lines ({exc})."
                ) from None
    return messages


def parse_exports(given: Sequence[str]) -> dict[str, Path]:
    """``PROVIDER=FILE`` pairs; raises CrashpointsError."""
    exports: dict[str, Path] = {}
    for item in given:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise CrashpointsError(
                f"--export {item!r}: give PROVIDER=FILE, e.g. payments=charges.json."
            )
        if name in exports:
            raise CrashpointsError(f"--export names provider {name!r} twice; one file each.")
        exports[name] = Path(path)
    return exports


def parse_at(text: str | None) -> dt.datetime | None:
    """``--at``: an ISO 8601 time (UTC when it names no offset); raises CrashpointsError."""
    if text is None:
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CrashpointsError(
            f"--at {text!r} is not an ISO 8601 time, e.g. 2026-11-30T14:20:00Z."
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.timezone.utc)

