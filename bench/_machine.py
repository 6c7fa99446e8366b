"""Facts about the machine a run was measured on."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def _dirty() -> list[str]:
    """Files of the package that differ from the commit: the run measured those too."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "pytest_crashpoints", "fake_providers"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return []
    return [line[3:] for line in out.stdout.splitlines()]


def facts() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "commit": _commit(),
        "uncommitted": _dirty(),
        # Other work on the machine skews every figure; a load above the CPU count says so.
        "load_average_1m": round(os.getloadavg()[0], 2),
        "executable": sys.executable,
    }
