"""Live progress on a terminal: one line per running crash test, erased when it ends.

A crash test runs tens of cases, each a few real processes; this shows it is moving: cases
done out of those planned, the faults reached so far, and the time it has taken. The lines sit
below pytest's current line and are drawn, redrawn and erased in place, so pytest's own output
reads exactly as without them. They are shown only on a terminal (not when the output goes to
a file or a pipe), not under ``-q`` or ``-s``, and not with live logging.

Under pytest-xdist the workers cannot reach the terminal: each writes its running test's
progress to a small file in a folder the controller names (:class:`ProgressFile`), and the
controller draws one line per running test from them (:class:`Progress` with a folder).
The controller's own output goes through its terminal writer, which is wrapped so that the
lines are erased before pytest writes and drawn again after (:class:`_Guarded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from .._inject.failpoints import CRASH_POINTS

__all__ = ["LiveLines", "Progress", "ProgressFile", "progress_line", "progress_state"]

#: Seconds between two redraws (the elapsed time moves on even while a case runs).
TICK = 0.5


def progress_state(
    nodeid: str,
    *,
    done: int,
    planned: int,
    reached: Mapping[str, int],
    failed: bool,
    started: float,
) -> dict[str, Any]:
    """What one progress line says, as plain data (it crosses from xdist workers as JSON)."""
    return {
        "nodeid": nodeid,
        "done": done,
        "planned": planned,
        "reached": sorted(point for point, cases in reached.items() if cases),
        "failed": failed,
        "started": started,
    }


def progress_line(state: Mapping[str, Any], *, now: float, prefix: str = "") -> str:
    """``crashpoints test_x: 12/37 cases, reached A B C (+3 more), 4s``."""
    done, planned = int(state["done"]), int(state["planned"])
    if not done:
        cases = "the fault-free run"
    elif planned and done <= planned:
        cases = f"{done}/{planned} cases"
    else:
        cases = f"{done} cases" + (" (shrinking a failure)" if state.get("failed") else "")
    reached = [str(p) for p in state.get("reached", [])]
    crash = [p for p in CRASH_POINTS if p in reached]
    others = len(reached) - len(crash)
    faults = " ".join(crash) or "none yet"
    if others:
        faults += f" (+{others} more)"
    name = str(state["nodeid"]).rpartition("::")[2] or str(state["nodeid"])
    elapsed = max(0.0, now - float(state["started"]))
    return f"{prefix}crashpoints {name}: {cases}, reached {faults}, {elapsed:.0f}s"


class LiveLines:
    """Lines drawn below the terminal's current line, redrawn in place, erased without a trace.

    ``column()`` is where the cursor stands on the current line (what pytest wrote on it),
    ``width()`` the terminal's width. Drawing starts on a new line; erasing clears the lines
    and puts the cursor back where it stood, so the next thing pytest writes lands right.
    """

    def __init__(self, out: TextIO, *, column: Callable[[], int], width: Callable[[], int]):
        self.out = out
        self.column = column
        self.width = width
        self.drawn = 0
        self._at = 0

    def _erasing(self) -> str:
        if not self.drawn:
            return ""
        back = f"\x1b[{self._at}C" if self._at else ""
        return "\r\x1b[K" + "\x1b[A\x1b[K" * (self.drawn - 1) + "\x1b[A" + back

    def draw(self, lines: list[str]) -> None:
        """Show ``lines`` (replacing what was drawn); nothing when ``lines`` is empty."""
        text = self._erasing()
        self.drawn = 0
        width = self.width()
        at = self.column()
        if lines and at < width - 1:
            self._at = at
            text += "".join("\n" + line[: width - 1] for line in lines)
            self.drawn = len(lines)
        if text:
            self.out.write(text)
            self.out.flush()

    def erase(self) -> None:
        self.draw([])


class Progress:
    """The lines of every running crash test, redrawn every :data:`TICK` seconds by a thread.

    States come from :meth:`update` (tests in this process) or, with ``folder``, from the
    files xdist workers write there.
    """

    def __init__(self, live: LiveLines, *, folder: Path | None = None) -> None:
        self.live = live
        self.folder = folder
        self.lock = threading.RLock()
        self._states: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._undo: Callable[[], None] | None = None

    def follow_workers(self, writer: Any) -> Path | None:
        """Draw the progress of xdist workers (this is their controller): make the folder
        they write to and guard pytest's terminal ``writer``. Returns the folder, or ``None``
        when the writer cannot be guarded (no progress then)."""
        with self.lock:
            if self.folder is None:
                try:
                    self._undo = guard(writer, self)
                except AttributeError:
                    return None
                self.folder = Path(tempfile.mkdtemp(prefix="crashpoints-progress-"))
        self.start()
        return self.folder

    def update(self, state: Mapping[str, Any]) -> None:
        with self.lock:
            self._states[str(state["nodeid"])] = dict(state)
        self.start()
        self.draw()

    def finish(self, nodeid: str) -> None:
        with self.lock:
            self._states.pop(nodeid, None)
            self.draw()

    def lines(self) -> list[str]:
        now = time.time()
        states = list(self._states.values())
        if self.folder is not None:
            states += read_progress(self.folder)
        states.sort(key=lambda s: (str(s.get("worker", "")), float(s["started"])))
        return [
            progress_line(s, now=now, prefix=f"[{s['worker']}] " if s.get("worker") else "")
            for s in states
        ]

    def draw(self) -> None:
        with self.lock:
            self.live.draw(self.lines())

    def start(self) -> None:
        with self.lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._tick, name="crashpoints-progress", daemon=True
            )
            self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK):
            with contextlib.suppress(OSError, ValueError):
                self.draw()

    def stop(self) -> None:
        """Stop the thread and erase the lines."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self.lock:
            self._states.clear()
            with contextlib.suppress(OSError, ValueError):
                self.live.erase()
            if self._undo is not None:
                self._undo()
                self._undo = None
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
                self.folder = None


class ProgressFile:
    """An xdist worker's side of the progress: its running test's state, in one file."""

    def __init__(self, path: Path, *, worker: str) -> None:
        self.path = path
        self.worker = worker

    def update(self, state: Mapping[str, Any]) -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        with contextlib.suppress(OSError):
            partial.write_text(json.dumps({**state, "worker": self.worker}), encoding="utf-8")
            partial.replace(self.path)

    def finish(self, nodeid: str) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


def read_progress(folder: Path) -> list[dict[str, Any]]:
    """The states the workers' files hold now (a file being replaced is skipped)."""
    states = []
    for path in sorted(folder.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(state, dict) and {"nodeid", "done", "planned", "started"} <= set(state):
                states.append(state)
    return states


class _Guarded:
    """A terminal writer's file that erases the live lines before anything else is written
    (and the ticker draws them again): pytest's output and the lines never mix."""

    def __init__(self, file: TextIO, progress: Progress) -> None:
        self._file = file
        self._progress = progress

    def write(self, text: str) -> int:
        with self._progress.lock:
            self._progress.live.erase()
            written = self._file.write(text)
            self._file.flush()
            return written

    def flush(self) -> None:
        self._file.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def guard(writer: Any, progress: Progress) -> Callable[[], None]:
    """Route what ``writer`` (pytest's terminal writer) writes through :class:`_Guarded`;
    return how to undo it. Relies on the writer's ``_file`` (pytest's ``TerminalWriter`` has
    had it since pytest 6); without it, raises AttributeError and the caller shows no
    progress."""
    file = getattr(writer, "_file", None)
    if file is None or not hasattr(file, "write"):
        raise AttributeError("the terminal writer has no file to guard")
    writer._file = _Guarded(file, progress)

    def undo() -> None:
        writer._file = file

    return undo


def terminal_out(fd: int) -> TextIO | None:
    """A file of our own on the terminal behind ``fd`` (unaffected by pytest's capture,
    which redirects ``fd`` itself while a test runs), or ``None`` if it is no terminal."""
    try:
        if not os.isatty(fd) or os.environ.get("TERM") == "dumb":
            return None
        return os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None
