"""The gate's HTML report in a real browser: headless Chromium (Debian's ``chromium``).

The gate runs two bundled scenarios, a broken agent it must catch (killed at B, then a blind
retry sends the e-mail twice) and a good agent, and writes its HTML report; the page is
loaded from the file and checked in its live DOM: the lanes, the kill in the worker's lane,
the duplicate in the provider's lane linked to invariant 1, every link landing somewhere,
the keyboard, the copy button, no console error and no request but the page itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_crashpoints.cli import main
from tests.browser import Page, chromium, find_chromium

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "scenarios/broken/test_broken_agents.py::test_blind_retry_after_a_crash"
GOOD = "scenarios/test_order_charger.py::test_a_stable_key_charges_once"


def gate(folder: Path, *targets: str) -> Path:
    """Run ``crashpoints gate`` on ``targets`` from the repository's root; its HTML page."""
    names = ("report.json", "junit.xml", "summary.md", "report.html")
    reports = {name: folder / f"crashpoints-{name}" for name in names}
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)  # the scenarios import themselves from the repository's root
        status = main(
            [
                "gate",
                *targets,
                f"--report={reports['report.json']}",
                f"--junit={reports['junit.xml']}",
                f"--markdown={reports['summary.md']}",
                f"--html={reports['report.html']}",
                "--",
                "-p",
                "no:randomly",
                "-q",
            ]
        )
    finally:
        os.chdir(cwd)
    assert status == 0
    return reports["report.html"]


@pytest.fixture(scope="module")
def gate_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return gate(tmp_path_factory.mktemp("gate"), BROKEN, GOOD)


@pytest.fixture(scope="module")
def page(gate_page: Path) -> Iterator[Page]:
    executable = find_chromium()
    if executable is None:
        pytest.skip(
            "Chromium is not installed: the HTML report's browser test needs it "
            "(Debian: apt-get install chromium)"
        )
    with chromium(executable) as browser:
        browser.open(gate_page.as_uri())
        yield browser


def lane_of(page: Page, selector: str) -> list[str]:
    """The lane (column header) of each cell in the failing test's timeline that has an
    element matching ``selector``."""
    return list(
        page.evaluate(
            f"""Array.from(document.querySelectorAll('#t1 table.timeline tbody td'))
            .filter(td => td.querySelector({json.dumps(selector)}))
            .map(td => td.closest('table').querySelectorAll('thead th')[td.cellIndex]
                 .dataset.lane)"""
        )
    )


def test_the_page_loads_alone_and_cleanly(page: Page, gate_page: Path) -> None:
    assert page.problems() == []
    assert page.requests() == [gate_page.as_uri()]  # no network: nothing but the page
    assert gate_page.stat().st_size < 1_000_000
    assert page.evaluate("document.title") == "crashpoints report: passed, 2 crash test(s)"


def test_the_broken_agent_shows_its_kill_and_its_duplicate(page: Page) -> None:
    assert page.evaluate("document.querySelector('#t1 h2').textContent").startswith(BROKEN)
    lanes = page.evaluate(
        "Array.from(document.querySelectorAll('#t1 table.timeline thead th[data-lane]'))"
        ".map(th => th.dataset.lane)"
    )
    assert lanes[:3] == ["harness", "worker-1", "recovery-2"]
    assert "ledger" in lanes and lanes[-1] == "email"
    assert lane_of(page, ".m-kill") == ["worker-1"]
    assert page.evaluate(
        "document.querySelector('#t1 .m-kill summary').textContent"
    ) == "✕ KILLED at B"
    assert lane_of(page, ".m-dup") == ["email"]
    # The duplicate is marked in words and links to invariant 1's explanation.
    duplicate = page.evaluate(
        "(() => { const td = document.querySelector('#t1 td.dup');"
        " return [td.textContent, Array.from(td.querySelectorAll('a')).map(a => a.hash)]; })()"
    )
    assert "DUPLICATE" in duplicate[0] and "#inv-1" in duplicate[1]
    assert page.evaluate("document.getElementById('inv-1').textContent").startswith(
        "Invariant 1: no non-idempotent side effect happens twice"
    )


def test_every_link_lands_and_events_open(page: Page) -> None:
    dangling = page.evaluate(
        "Array.from(document.querySelectorAll('a[href^=\"#\"]'))"
        ".map(a => a.getAttribute('href').slice(1))"
        ".filter(id => !document.getElementById(id))"
    )
    assert dangling == []
    # Clicking an event opens its journal entry.
    entry = page.evaluate(
        "(() => { const d = document.querySelector('#t1 td.dup details');"
        " d.querySelector('summary').click(); return [d.open, d.textContent]; })()"
    )
    assert entry[0] is True and "mail.send" in entry[1] and "recovery-2" in entry[1]


def test_the_keyboard_reaches_and_opens_the_timeline(page: Page) -> None:
    page.evaluate("document.activeElement.blur(); window.scrollTo(0, 0)")
    page.press("Tab", key_code=9)
    assert page.evaluate("document.activeElement.className") == "skip"
    for _ in range(200):  # the skip link, the summary's links, ..., the timeline's events
        page.press("Tab", key_code=9)
        if page.evaluate("!!document.activeElement.closest('#t1 table.timeline summary')"):
            break
    else:
        pytest.fail("Tab never reached an event of the timeline")
    page.press("Enter", key_code=13, text="\r")
    assert page.evaluate("document.activeElement.parentNode.open") is True
    page.press("Escape", key_code=27)
    assert page.evaluate("document.activeElement.parentNode.open") is False


def test_the_replay_command_can_be_copied(page: Page) -> None:
    said = page.evaluate(
        "new Promise(done => { document.querySelector('#t1 button[data-copy]').click();"
        " setTimeout(() => done(document.querySelector('#t1 .copied').textContent), 300); })"
    )
    assert said in ("Copied.", "Selected: press Ctrl+C (Cmd+C) to copy.")
    assert page.problems() == []


def test_the_good_agent_lists_its_schedules_collapsed(page: Page) -> None:
    details = page.evaluate(
        "(() => { const d = document.querySelector('#t2 details.schedules');"
        " return [d.open, d.querySelectorAll('tbody tr').length,"
        " d.querySelector('summary').textContent]; })()"
    )
    assert details[0] is False
    assert details[1] >= 10
    assert details[2] == f"{details[1]} schedules run: {details[1]} passed, 0 failed"


def test_the_first_screen_tells_a_caught_agent_from_a_passed_one(page: Page) -> None:
    """The run passed with a broken agent caught: the header says what "caught" means, and
    the verdict is not a plain green "passed"."""
    note = page.evaluate("document.querySelector('header .caught-note').textContent")
    assert "1 caught" in note and "broken" in note and "expect=" in note
    verdicts = page.evaluate(
        "Array.from(document.querySelectorAll('#summary table.tests .v'))"
        ".map(v => [v.className, v.textContent])"
    )
    assert verdicts[0] == ["v v-caught", "◎ caught (broken on purpose)"]
    assert verdicts[1] == ["v v-passed", "✓ passed"]
    colours = page.evaluate(
        "Array.from(document.querySelectorAll('#summary table.tests .v'))"
        ".map(v => getComputedStyle(v).color)"
    )
    assert colours[0] != colours[1]
    # The invariants are explained on the first screen, and every point of the coverage.
    legend = page.evaluate("document.querySelector('#summary ul.inv').textContent")
    assert "1: no non-idempotent side effect happens twice" in legend
    unexplained = page.evaluate(
        "Array.from(document.querySelectorAll('table.coverage tbody tr'))"
        ".filter(tr => !tr.cells[1].textContent.trim()).map(tr => tr.cells[0].textContent)"
    )
    assert unexplained == []


@pytest.fixture(scope="module")
def support_page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    """The page of the support agent's broken variant: asked again after a kill, the model
    picks another amount, and the key made of the arguments refunds twice."""
    pytest.importorskip("openai", reason="the support agent needs the agents extra")
    executable = find_chromium()
    if executable is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    html = gate(
        tmp_path_factory.mktemp("support"),
        "scenarios/broken/test_support_agent.py::test_another_amount_on_the_reask",
    )
    with chromium(executable) as browser:
        browser.open(html.as_uri())
        yield browser


def test_the_models_tool_calls_and_the_reask_are_on_the_page(support_page: Page) -> None:
    cells = support_page.evaluate(
        "Array.from(document.querySelectorAll('#t1 table.timeline .m-journal summary,"
        " #t1 table.timeline .m-dup summary')).map(s => s.textContent)"
    )
    model = [c for c in cells if "chat.completions.create" in c]
    assert any("refund_charge(" in c and "amount=1500" in c for c in model), model
    reask = [c for c in model if "asked again" in c]
    assert reask and all(c.startswith("↻ ") for c in reask), model
    assert any("amount=2000" in c for c in reask), reask
    assert not [c for c in model if c.endswith("200 no effect")], model
    # Its pop-up says what the model answered.
    opened = support_page.evaluate(
        "(() => { const d = Array.from(document.querySelectorAll('#t1 .m-journal'))"
        ".find(d => d.textContent.includes('asked again'));"
        " d.querySelector('summary').click(); return d.querySelector('.pop').textContent; })()"
    )
    assert "the model answered" in opened and "amount=2000" in opened
    assert support_page.problems() == []
