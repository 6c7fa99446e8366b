"""Command-line, ini and environment options, and how they combine with the marker.

Precedence, highest first: the test's marker > command line > environment variable > ini
file > default (as pytest-timeout does). Every option is named for the plugin:
``--crashpoints-mode``, ini ``crashpoints_mode``, env ``PYTEST_CRASHPOINTS_MODE``.

Cheap to import: the plugin module imports it at start-up.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["DOCS_URL", "OPTIONS", "Option", "SessionOptions", "add_options", "read_options"]

#: Where the user documentation lives, for help texts: an installed package has no docs/ folder.
DOCS_URL = "https://github.com/pytest-crashpoints/pytest-crashpoints/blob/main/docs/"

MODES = ("hypothesis", "exhaustive", "both")
ENGINES = ("states", "processes", "compare")
START_METHODS = ("fork", "spawn")


# Each parser raises ValueError with what the value must be, in plain words: the message
# reads "crashpoints: --crashpoints-X has the value 'v': it must be ...".


def _whole(text: str, must: str, *, least: int) -> int:
    """``text`` as a whole number of ``least`` or more; ``ValueError(must)`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(must) from None
    if value < least:
        raise ValueError(must)
    return value


def _positive_int(text: str) -> int:
    return _whole(text, "it must be a whole number of 1 or more", least=1)


def _positive_float(text: str) -> float:
    must = "it must be a positive, finite number of seconds"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(must) from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(must)
    return value


def _mode(text: str) -> str:
    if text not in MODES:
        raise ValueError(f"it must be one of {', '.join(MODES)}")
    return text


def _engine(text: str) -> str:
    if text not in ENGINES:
        raise ValueError(f"it must be one of {', '.join(ENGINES)}")
    return text


def _jobs(text: str) -> int | str:
    if text == "auto":
        return text
    return _whole(text, "it must be a whole number of 1 or more, or 'auto'", least=1)


def _seed(text: str) -> int | str:
    if text == "last":
        return text
    return _whole(text, "it must be a whole number of 0 or more, or 'last'", least=0)


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("it must be true or false (or yes/no, on/off, 1/0)")


def _run_dir(text: str) -> str:
    if text in ("memory", "disk") or Path(text).is_dir():
        return text
    raise ValueError("it must be memory, disk, or the path of a directory that exists")


def _shard(text: str) -> tuple[int, int] | None:
    """``K/N``: this machine runs shard K of N of each crash test's schedules (None: 1/1)."""
    found = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", text)
    if found is None:
        raise ValueError("it must be K/N, two whole numbers, as in 1/4 (shard 1 of 4)")
    index, total = int(found[1]), int(found[2])
    if total < 1:
        raise ValueError("N must be 1 or more, as in 1/4")
    if not 1 <= index <= total:
        raise ValueError(f"K must be between 1 and N ({total}), as in 1/{total}")
    return None if total == 1 else (index, total)


def _token(text: str) -> str:
    from .._harness.search.token import read_token
    from ..errors import CrashpointsError

    try:
        read_token(text)
    except CrashpointsError as exc:
        raise ValueError(str(exc)) from None
    return text


def _report_path(text: str) -> str:
    path = Path(text)
    if path.is_dir():
        raise ValueError("it is a directory; give the path of a file to write")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent  # the report's folders are created: the first that exists
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{str(parent)!r} is not a folder this process can write to")
    return text


@dataclasses.dataclass(frozen=True)
class Option:
    name: str
    help: str
    parse: Callable[[str], Any]
    default: Any
    metavar: str | None = None
    flag: bool = False

    @property
    def cli(self) -> str:
        return "--crashpoints-" + self.name.replace("_", "-")

    @property
    def ini(self) -> str:
        return "crashpoints_" + self.name

    @property
    def env(self) -> str:
        return "PYTEST_CRASHPOINTS_" + self.name.upper()


OPTIONS = (
    Option(
        "seed",
        "seed of the crash schedules; 'last' reuses the previous run's (default: random, "
        "printed in the header)",
        _seed,
        None,
        "N|last",
    ),
    Option(
        "mode",
        "how schedules are chosen: hypothesis (generated and shrunk), exhaustive (every "
        "schedule up to --crashpoints-max-faults), or both (default: hypothesis)",
        _mode,
        "hypothesis",
        "MODE",
    ),
    Option(
        "engine",
        "how cases run: states (crash states constructed once from stopped workers, each "
        "distinct one checked once, every failure confirmed by a real kill) or processes "
        "(every schedule from scratch, every kill a real SIGKILL), or compare (both, failing "
        "where they disagree) (default: states)",
        _engine,
        "states",
        "ENGINE",
    ),
    Option(
        "jobs",
        "crash states of one test checked at once in exhaustive mode, each job in a world of "
        "its own; auto: the cores this process may use, divided among the xdist workers "
        "(default: auto)",
        _jobs,
        "auto",
        "N|auto",
    ),
    Option(
        "max_examples",
        "schedules Hypothesis tries per test (default: the Hypothesis profile's)",
        _positive_int,
        None,
        "N",
    ),
    Option(
        "max_faults",
        "most faults in one schedule (default: 1 in exhaustive mode, 2 with Hypothesis)",
        _positive_int,
        None,
        "N",
    ),
    Option(
        "replay",
        "run exactly the schedule of this replay token (from a failure report)",
        _token,
        None,
        "TOKEN",
    ),
    Option(
        "report",
        "write the machine-readable JSON report to PATH",
        _report_path,
        None,
        "PATH",
    ),
    Option(
        "html",
        "write the HTML report to PATH: a summary, the timeline of each failure, the schedules "
        "each test ran (one self-contained file)",
        _report_path,
        None,
        "PATH",
    ),
    Option(
        "otel",
        "write each failing case as an OpenTelemetry trace (OTLP/JSON) to PATH: a span per "
        "process and per tool call (gen_ai attributes), kills and faults as events",
        _report_path,
        None,
        "PATH",
    ),
    Option(
        "timeout",
        "wall-clock bound of each worker or recovery process, in seconds (default: 30)",
        _positive_float,
        30.0,
        "SECONDS",
    ),
    Option(
        "run_dir",
        "where each case's files live while it runs: memory (/dev/shm when it is a tmpfs with "
        "room, else the disk, the reason in the header), disk (pytest's tmp_path), or a "
        "directory; a failing case's files are kept under tmp_path either way (default: memory)",
        _run_dir,
        "memory",
        "memory|disk|PATH",
    ),
    Option(
        "strict_coverage",
        "fail a test whose declared crash points are never reached",
        _flag,
        False,
        flag=True,
    ),
    Option(
        "shard",
        "run shard K of N of each crash test's schedules (one test across N machines); "
        "merge the N reports with `crashpoints merge` (default: 1/1, every schedule)",
        _shard,
        None,
        "K/N",
    ),
)
_BY_NAME = {option.name: option for option in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("crashpoints", "crash schedules (pytest-crashpoints)")
    for option in OPTIONS:
        if option.flag:
            group.addoption(option.cli, action="store_true", default=None, help=option.help)
            # Read as text and parsed here, so that a bad value is an error naming the key.
            parser.addini(option.ini, option.help, default=None)
        else:
            group.addoption(option.cli, metavar=option.metavar, default=None, help=option.help)
            parser.addini(option.ini, option.help, default=None)


@dataclasses.dataclass(frozen=True)
class SessionOptions:
    """The options of this session, each resolved from CLI > env > ini > default."""

    seed: int | str | None
    mode: str
    engine: str
    jobs: int | str
    max_examples: int | None
    max_faults: int | None
    replay: str | None
    report: str | None
    html: str | None
    otel: str | None
    timeout: float
    run_dir: str
    strict_coverage: bool
    #: (K, N): this session runs shard K of N; None: every schedule.
    shard: tuple[int, int] | None


def _resolve(config: pytest.Config, option: Option) -> Any:
    sources: list[tuple[str, Any]] = [
        (option.cli, config.getoption(option.cli)),
        (option.env, os.environ.get(option.env)),
        (f"ini {option.ini}", config.getini(option.ini)),
    ]
    for where, raw in sources:
        if raw is None or raw == "":
            continue
        if isinstance(raw, bool):
            return raw
        try:
            return option.parse(str(raw))
        except ValueError as exc:
            raise pytest.UsageError(
                f"crashpoints: {where} has the value {raw!r}: {str(exc).rstrip('.')}. "
                f"See --help under 'crash schedules'."
            ) from None
    return option.default


def read_options(config: pytest.Config) -> SessionOptions:
    """Resolve every option; a bad value raises pytest.UsageError naming it and its source."""
    values = {option.name: _resolve(config, option) for option in OPTIONS}
    _check_switches()
    return SessionOptions(**values)


def _check_switches() -> None:
    """The switches that are only environment variables: a bad value is refused as an
    option's is (the workers read them, not the plugin)."""
    from .._process.switches import SWITCHES

    for name, does in SWITCHES.items():
        raw = os.environ.get(name)
        if raw is None:
            continue
        try:
            _flag(raw)
        except ValueError as exc:
            raise pytest.UsageError(
                f"crashpoints: {name} has the value {raw!r}: {exc}. Set it to 1 to {does} "
                "(see docs/reference.md)."
            ) from None
