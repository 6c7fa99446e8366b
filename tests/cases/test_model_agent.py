"""An LLM agent in whole crash cases: where the model's point fires, that a model's POST is no
write, that the timeline tells the model's turns, and that a script with no answer is one line
that fails the test."""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the openai SDK is an agents extra: pip install -e .[agents]")

from pytest_crashpoints import Authority, ProviderSpec
from pytest_crashpoints.harness import Deliver, KillAt, Refuse, Scenario, Schedule, run_case
from scenarios.support_agent import (
    TICKET,
    create_charge,
    handle_ticket,
    recover,
    support_script,
)

PROVIDERS = (ProviderSpec("model"), ProviderSpec("payments"), ProviderSpec("email"))


def support_case() -> Scenario:
    return Scenario(
        worker=handle_ticket,
        recover=recover,
        messages=(TICKET,),
        providers=PROVIDERS,
        authorities={str(TICKET["task_id"]): Authority.of(
            tenant_id="tenant-1", policy_version="p1",
            credential_scope="model:read payments:read payments:write email:read email:write",
        )},
        model=support_script(reask_amount=2000),
        setup=create_charge,
    )


def test_the_points_of_a_tool_loop(tmp_path: Path) -> None:
    """Three model calls over loopback, two of them answered with a tool call; two tool calls
    through the reference ``guarded_call``, which marks A, B and C itself: ``model.tool_call``
    twice, and A, B and C twice each. An automatic A before a model's POST (each of the last
    two comes after a commit), or a C at a model's answer, would count more."""
    golden = run_case(support_case(), Schedule((Deliver(0),)), base_dir=tmp_path)
    assert golden.passed, golden.violations
    reached = golden.delivery_hits[0]
    assert (reached["model.tool_call"], reached["A"], reached["B"], reached["C"]) == (2, 2, 2, 2)
    assert (golden.model_calls, golden.model_reasks) == (3, 0)
    assert golden.generations == {0: {"model": 3}}


def test_killed_after_the_model_chose_nothing_is_sent_and_the_model_is_asked_again(
    tmp_path: Path,
) -> None:
    case = support_case()
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    result = run_case(
        case, Schedule((Deliver(0, kill=KillAt("model.tool_call", 1)),)), base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    assert result.passed, result.violations
    lines = result.timeline.splitlines()
    kill = next(i for i, line in enumerate(lines) if "killed at model.tool_call (hit 1)" in line)
    refunds = [i for i, line in enumerate(lines) if "refunds.create" in line]
    assert refunds and all(i > kill for i in refunds)  # worker-1 sent nothing
    assert "turn 0, asked again (2nd time): refund_charge(" in result.timeline
    assert "amount=2000" in result.timeline  # the other amount, refunded once
    assert result.model_reasks == 1


def test_a_script_with_no_answer_fails_the_test_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_agent=textwrap.dedent(
            """
            import pytest
            from fake_providers import Script, call
            from scenarios.support_agent import TICKET, create_charge, handle_ticket, CHARGE_ID

            PROVIDERS = ["model", "payments", "email"]


            @pytest.mark.crashpoints(points="B", providers=PROVIDERS, mode="exhaustive")
            def test_short_script(crashpoints):
                crashpoints.run(worker=handle_ticket, messages=[TICKET], setup=create_charge,
                                model=Script([call("refund_charge", charge_id=CHARGE_ID,
                                                   amount=1500)]))


            @pytest.mark.crashpoints(points="B", providers=PROVIDERS, mode="exhaustive")
            def test_no_script(crashpoints):
                crashpoints.run(worker=handle_ticket, messages=[TICKET])
            """
        )
    )
    root = Path(__file__).resolve().parents[2]
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", f"--rootdir={pytester.path}",
        "-o", f"pythonpath={root}",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*crashpoints: test_agent.py::test_short_script: the model's script has no answer for "
        "what worker-1 asked (chat.completions, turn 1): the script ran out of turns: the "
        "agent asked for turn 1 *add a turn*",
        "*crashpoints: test_agent.py::test_no_script: the marker names the 'model' provider "
        "but no script says what it answers; pass model=Script(*",
    ])
    assert "Traceback" not in result.stdout.str()


def test_the_failure_of_a_broken_variant_tells_the_models_turns(tmp_path: Path) -> None:
    """The key made of what the model chose: killed after the refund, the worker is delivered
    again, the model asked again picks another amount, and a second refund is made. The
    timeline shows the turns where they happened: the first answer before the first refund,
    the kill, the question asked again before the second refund."""
    import functools

    case = dataclasses.replace(
        support_case(), worker=functools.partial(handle_ticket, key_from="arguments")
    )
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    result = run_case(
        case, Schedule((Deliver(0, kill=KillAt("B", 1)),)), base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    assert {v.invariant for v in result.violations} == {1}
    lines = result.timeline.splitlines()

    def first(text: str, after: int = -1) -> int:
        return next(i for i, line in enumerate(lines) if text in line and i > after)

    turn = first("chat.completions.create turn 0: refund_charge(")
    refund = first("refunds.create", turn)
    kill = first("killed at B (hit 1)", refund)
    again = first("turn 0, asked again (2nd time): refund_charge(", kill)
    second = first("refunds.create", again)
    assert "amount=1500" in lines[turn] and "amount=2000" in lines[again]
    assert turn < refund < kill < again < second


def test_a_turn_comes_before_the_intent_it_caused_even_when_nothing_was_sent(
    tmp_path: Path,
) -> None:
    """Killed at A, nothing of the attempt reaches a provider, so no request anchors the
    model's turn in its second: it still comes before the intent its tool call recorded."""
    case = support_case()
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    result = run_case(
        case, Schedule((Deliver(0, kill=KillAt("A", 1)),)), base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    lines = result.timeline.splitlines()
    turn = next(i for i, line in enumerate(lines) if "turn 0: refund_charge(" in line)
    intent = next(i for i, line in enumerate(lines) if "(new) -> INTENT_RECORDED" in line)
    kill = next(i for i, line in enumerate(lines) if "killed at A (hit 1)" in line)
    assert turn < intent < kill, result.timeline


@pytest.mark.parametrize("variant", ["429", "500", "timeout"])
def test_the_sdks_own_retries_wait_out_a_refused_model_call_in_time(
    tmp_path: Path, variant: str
) -> None:
    """The openai SDK's default ``max_retries=2`` sleeps out a 429's ``Retry-After`` (and
    backs off after a 500 or a dropped connection): the correct agent passes as it is, and
    the SDK's sleep moves the case's clock at no real cost (nothing else can act meanwhile)."""
    case = dataclasses.replace(
        support_case(), worker=functools.partial(handle_ticket, max_retries=2)
    )
    golden = run_case(case, Schedule((Deliver(0),)), base_dir=tmp_path)
    assert golden.passed, golden.violations
    result = run_case(
        case, Schedule((Refuse("model", 1, variant), Deliver(0))), base_dir=tmp_path,
        expected=golden.expected_effects,
    )
    assert result.passed, (result.violations, result.errors)
    assert "refuses its 1st call" in result.timeline
    assert result.generations[0]["model"] == golden.generations[0]["model"] + 1  # and again
    # The SDK's backoff (a 429's Retry-After: 1 s) was waited in no real time.
    assert result.waited.skipped >= (1.0 if variant == "429" else 0.1)
    assert result.waited.real == 0
    assert "(time.sleep) in no real time" in result.timeline


def test_the_safe_agent_with_the_sdks_default_retries_passes_every_f(tmp_path: Path) -> None:
    """F declared, the default timeout: every refusal of the model, the payments and the
    e-mail provider, every lookup failure, a lagging search; the SDK retries the model's calls
    itself, and the agent is safe."""
    from pytest_crashpoints.harness import CrashSettings, explore

    case = dataclasses.replace(
        support_case(), worker=functools.partial(handle_ticket, max_retries=2)
    )
    settings = CrashSettings(points=("F",), mode="exhaustive", max_faults=1)
    report = explore(case, settings, base_dir=tmp_path, nodeid="t::f")
    assert report.failure is None, report.failure
    assert report.reached.get("refused") and report.reached.get("F")
