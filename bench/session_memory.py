"""Item 11: one pytest session's memory over 2,000 crash cases stays flat.

A deployment gate runs many crash tests in one pytest process (one per xdist worker). This
item runs such a session: the bundled e-mail scenario's exhaustive single-fault sweep (the
states engine, jobs as the session's default) as a parametrized crash test, until at least
2,000 cases have run in one pytest process, and reads that process's resident set
(``VmRSS``) after every test. The goal: it grows by less than 20 MiB between the test that
passes 200 cases and the last one.

The measurement is the session's own (a conftest in the session's folder writes the samples);
the session runs in a fresh interpreter, so nothing of this process's memory is counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from . import _stats

ROOT = Path(__file__).resolve().parents[1]
#: At most this much growth (MiB) after the first 200 cases.
GOAL_MIB = 20.0

CONFTEST = textwrap.dedent(
    """
    import json, os

    def _rss_mib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024

    def pytest_runtest_logreport(report):
        if report.when != "call":
            return
        raw = getattr(report, "crashpoints", None)
        cases = json.loads(raw)["cases"] if raw else 0
        with open(os.environ["SAMPLES"], "a") as out:
            out.write(json.dumps({"cases": cases, "rss_mib": _rss_mib()}) + "\\n")
    """
)

TESTS = textwrap.dedent(
    """
    import pytest
    from pytest_crashpoints import Authority, reference_recovery, reference_worker
    from scenarios.test_invoice_email import INVOICE

    EMAIL = {"invoice-7": Authority.of(tenant_id="tenant-7",
             credential_scope="email:read email:write", policy_version="p1")}

    @pytest.mark.parametrize("n", range(int(__import__("os").environ["TESTS"])))
    @pytest.mark.crashpoints(points="ABCDEF", providers=["email"], mode="exhaustive",
                             max_faults=1)
    def test_email(crashpoints, n):
        crashpoints.run(worker=reference_worker, recover=reference_recovery,
                        messages=[INVOICE], authorities=EMAIL)
    """
)


def _session(tests: int, folder: Path) -> list[dict[str, float]]:
    samples = folder / "samples.jsonl"
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "test_session.py").write_text(TESTS)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SAMPLES": str(samples),
        "TESTS": str(tests),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "crashpoints", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-q", "test_session.py"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the session failed (exit {done.returncode}):\n{done.stdout[-3000:]}")
    return [json.loads(line) for line in samples.read_text().splitlines()]


def main() -> None:
    # 32 cases a test: 63 tests pass 2,000 cases (the quick run: 300).
    tests = 10 if _stats.quick() else 63
    with tempfile.TemporaryDirectory(prefix="bench-session-memory-") as tmp:
        samples = _session(tests, Path(tmp))
    total = 0
    curve = []
    for sample in samples:
        total += int(sample["cases"])
        curve.append((total, round(sample["rss_mib"], 1)))
    start = next(rss for cases, rss in curve if cases >= min(200, total))
    end = curve[-1][1]
    growth = end - start
    _stats.emit(
        _stats.result(
            11,
            "session memory",
            goal=f"RSS of one pytest session grows < {GOAL_MIB:g} MiB from 200 to 2,000 cases",
            met=growth < GOAL_MIB and total >= (300 if _stats.quick() else 2000),
            figure=(
                f"{start:.0f} MiB after 200 cases, {end:.0f} MiB after {total} "
                f"(+{growth:.1f} MiB)"
            ),
            command="python -m bench.session_memory",
            details={"cases and RSS (MiB) after each test": curve},
        )
    )


if __name__ == "__main__":
    main()
