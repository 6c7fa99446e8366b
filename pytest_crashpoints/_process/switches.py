"""The environment switches that turn the harness's shortcuts off, to compare with them on.

Each is read by the worker processes (not the plugin, which only refuses a bad value at
start-up), and takes ``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off``:

* :data:`REAL_BUSY_WAITS_ENV`: SQLite lock waits nothing could end are slept (``busywait``);
* :data:`REAL_WAITS_ENV`: every wait of a worker is real (``waits``); harness time moves as
  it would have.

Imported by the plugin's start-up: nothing heavy here.
"""

from __future__ import annotations

import os

__all__ = ["REAL_BUSY_WAITS_ENV", "REAL_WAITS_ENV", "SWITCHES", "switched_on"]

REAL_BUSY_WAITS_ENV = "PYTEST_CRASHPOINTS_REAL_BUSY_WAITS"
REAL_WAITS_ENV = "PYTEST_CRASHPOINTS_REAL_WAITS"
#: Each switch, and what setting it to 1 does (for the message that refuses a bad value).
SWITCHES = {
    REAL_BUSY_WAITS_ENV: "sleep out every SQLite lock wait",
    REAL_WAITS_ENV: "wait out every wait of a worker in real time",
}


def switched_on(name: str) -> bool:
    """Whether switch ``name`` is set to anything but an "off" (``0``, ``false``, ``no``,
    ``off``, empty); the plugin refuses a value that is neither "on" nor "off"."""
    value = os.environ.get(name, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")
