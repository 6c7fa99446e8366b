"""Headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium is started with ``--remote-debugging-pipe``: it reads protocol commands from its
file descriptor 3 and writes answers and events to 4, each a JSON message ended by a NUL
byte. That is enough to load a page, read its DOM, press keys, collect console messages,
exceptions, log entries and network requests, and take a screenshot.

``python -m tests.browser OUT.png`` (``make screenshot``) writes the screenshot of a failing
case's timeline for the docs: it runs a bundled broken agent with ``--crashpoints-html``,
then photographs that test's section of the page.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["Page", "chromium", "find_chromium"]


def find_chromium() -> str | None:
    """The Chromium executable (Debian's ``chromium`` package), if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    """One page of a headless Chromium: navigate, evaluate, press keys, photograph."""

    def __init__(self, process: subprocess.Popen[bytes], commands: int, answers: int) -> None:
        self._process = process
        self._commands = commands
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._ids = iter(range(1, 1 << 30))
        self._session: str | None = None
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, args=(answers,), daemon=True).start()

    def _read(self, fd: int) -> None:
        buffer = b""
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for message in messages:
                self._answers.put(json.loads(message))

    def send(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30
    ) -> Any:
        """Send one command (to the page, once attached) and return its result."""
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if self._session is not None and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._answers.get(timeout=max(0.1, deadline - time.monotonic()))
            if answer.get("id") == number:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_for(self, event: str, *, timeout: float = 30) -> dict[str, Any]:
        """Wait for an event (one already received counts) and return its parameters."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for message in self.events[seen:]:
                if message.get("method") == event:
                    self.events.remove(message)
                    self.events.append({**message, "method": event + ".seen"})
                    return dict(message.get("params", {}))
            seen = len(self.events)
            answer = self._answers.get(timeout=max(0.1, deadline - time.monotonic()))
            self.events.append(answer)

    def attach(self, *, width: int, height: int) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}
        )["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def open(self, url: str) -> None:
        """Load ``url`` and wait until it has loaded."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serializable; a promise
        is awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def press(self, key: str, *, key_code: int, text: str = "") -> None:
        """Press and release a key (``Tab`` 9, ``Enter`` 13 with text ``"\r"``, ``Escape``
        27), as the keyboard would."""
        down = {"type": "keyDown" if text else "rawKeyDown", "key": key, "code": key,
                "windowsVirtualKeyCode": key_code}
        if text:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send(
            "Input.dispatchKeyEvent",
            {"type": "keyUp", "key": key, "code": key, "windowsVirtualKeyCode": key_code},
        )

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and error log entries so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning"):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url')}")
        return found

    def requests(self) -> list[str]:
        """The URL of every request the page made."""
        return [
            event["params"]["request"]["url"]
            for event in self.events
            if event.get("method") == "Network.requestWillBeSent"
        ]

    def screenshot(self, selector: str, path: Path, *, until: str | None = None) -> None:
        """Write a PNG of the element ``selector`` (all of it, scrolled into view or not),
        or, with ``until``, from its top to the bottom of that other element."""
        # Scrolling regions are shown whole, and the clip is as wide as the widest of them.
        box = self.evaluate(
            "(() => { document.querySelectorAll('.scroll')"
            ".forEach(e => { e.style.overflow = 'visible'; }); "
            f"const e = document.querySelector({json.dumps(selector)}); "
            "const a = e.getBoundingClientRect(); "
            f"const b = document.querySelector({json.dumps(until or selector)})"
            ".getBoundingClientRect(); "
            "const right = Math.max(a.right, ...Array.from(e.querySelectorAll('table'))"
            ".map(t => t.getBoundingClientRect().right)); "
            "const pad = 12; return {x: Math.max(0, a.left + window.scrollX - pad), "
            "y: Math.max(0, a.top + window.scrollY - pad), width: right - a.left + 2 * pad, "
            "height: b.bottom - a.top + 2 * pad}; })()"
        )
        data = self.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {**box, "scale": 1},
            },
        )["data"]
        path.write_bytes(base64.b64decode(data))


def _above_4(fd: int) -> int:
    """The same pipe end on a descriptor above 4 (3 and 4 are where Chromium wants them)."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


@contextmanager
def chromium(executable: str, *, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """A headless Chromium with one blank page attached, closed on exit."""
    profile = tempfile.mkdtemp(prefix="crashpoints-chromium-")
    to_browser_r, to_browser_w = map(_above_4, os.pipe())
    from_browser_r, from_browser_w = map(_above_4, os.pipe())
    flags = [
        "--headless",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-gpu",
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--mute-audio",
        "about:blank",
    ]
    # Chromium wants the pipe on descriptors 3 and 4; bash puts them there (dash cannot
    # name a descriptor above 9).
    script = (
        f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} '
        f"{to_browser_r}<&- {from_browser_w}>&-"
    )
    process = subprocess.Popen(
        ["bash", "-c", script, executable, *flags],
        pass_fds=(to_browser_r, from_browser_w),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(to_browser_r)
    os.close(from_browser_w)
    page = Page(process, to_browser_w, from_browser_r)
    try:
        page.attach(width=width, height=height)
        yield page
    finally:
        with contextlib.suppress(Exception):  # it may be gone already
            page.send("Browser.close", timeout=5)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.close(to_browser_w)
        os.close(from_browser_r)
        shutil.rmtree(profile, ignore_errors=True)


#: The broken agent the docs' screenshot shows: killed at B, then a blind retry sends twice.
SCREENSHOT_TEST = "scenarios/broken/test_broken_agents.py::test_blind_retry_after_a_crash"


def _screenshot(out: Path) -> int:
    executable = find_chromium()
    if executable is None:
        print("tests.browser: no chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="crashpoints-screenshot-") as folder:
        page_path = Path(folder) / "report.html"
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "crashpoints",
                "-p",
                "no:randomly",
                "-q",
                "--crashpoints-seed=1",
                f"--crashpoints-html={page_path}",
                SCREENSHOT_TEST,
            ],
            cwd=root,
            check=False,
        )
        if run.returncode != 0 or not page_path.is_file():
            print(f"tests.browser: {SCREENSHOT_TEST} did not run (exit {run.returncode})")
            return 1
        with chromium(executable, width=1200, height=900) as page:
            page.open(page_path.as_uri())
            # The failing case: its heading, violations, timeline and replay command.
            page.screenshot("section.test", out, until="section.test .replay")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(_screenshot(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/html-report.png")))
