"""The case studies of published libraries (``scenarios/case_studies``, docs/case-studies.md)
stay out of the gate and of a run over the whole ``scenarios`` folder, which is what
``crashpoints gate scenarios`` collects: a new release of a library must not turn the gate
red. Named, the folder is collected; a test whose library is missing skips, saying how to
install it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def collect(*args: str, nothing: bool = False) -> str:
    """The node ids (or skip reasons) pytest with the plugin collects from ``args``;
    ``nothing``: every module may have been skipped (pytest's exit status 5, no tests)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "crashpoints", "-p", "no:randomly",
         "--collect-only", "-q", "-rs", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode in ((0, 5) if nothing else (0,)), done.stdout + done.stderr
    return done.stdout


def test_the_gates_collection_of_scenarios_leaves_the_case_studies_out() -> None:
    collected = collect("scenarios")
    assert "scenarios/test_invoice_email.py::" in collected  # the bundled ones are there
    assert "case_studies" not in collected


def test_the_case_studies_are_collected_when_named() -> None:
    # Without the extra (as in `make test`) every module skips, and pytest says "no tests".
    collected = collect("scenarios/case_studies", nothing=True)
    for library in ("agent_ledger", "agent_once", "agent_outbox", "agent_runloop",
                    "approval_ledger", "durastep", "exactly_once", "justonce", "safeact"):
        # Collected, or skipped at import with the way to install the extra.
        assert (f"scenarios/case_studies/test_{library}.py::" in collected
                or ("test_" + library in collected and "case-studies" in collected)), collected
