"""Failing cases as OpenTelemetry traces: ``--crashpoints-otel PATH`` and ``crashpoints show
--otel``. The file is an OTLP/JSON ``ExportTraceServiceRequest`` that OpenTelemetry's own
protobuf classes load (ids hex-encoded, as OTLP/JSON has them): one trace per failing case,
a span per process, a span per tool call with the GenAI attributes, the kill as an event."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_crashpoints.cli import main

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
BROKEN = SCENARIOS / "broken" / "test_jobs_mailer.py"


def load_otlp(text: str) -> Any:
    """The OTLP/JSON text as OpenTelemetry's protobuf message; trace and span ids are hex in
    OTLP/JSON, base64 in protobuf's JSON mapping."""
    json_format = pytest.importorskip("google.protobuf.json_format")
    service = pytest.importorskip(
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        reason="opentelemetry-proto is a dev dependency",
    )
    data = json.loads(text)
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(data, service.ExportTraceServiceRequest())


def attributes(span: Any) -> dict[str, Any]:
    out = {}
    for pair in span.attributes:
        kind = pair.value.WhichOneof("value")
        out[pair.key] = getattr(pair.value, kind)
    return out


def test_a_failing_case_is_a_trace_with_its_processes_and_tool_calls(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    traces, report = tmp_path / "traces.json", tmp_path / "report.json"
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", f"--crashpoints-report={report}",
        f"--crashpoints-otel={traces}", f"{BROKEN}::test_a_job_sent_then_marked_is_sent_twice",
    )
    result.assert_outcomes(passed=1)  # caught, as it expects
    request = load_otlp(traces.read_text())
    spans = list(request.resource_spans[0].scope_spans[0].spans)
    roots = [s for s in spans if not s.parent_span_id]
    assert len(roots) == 1 and roots[0].name.startswith("crash case ")
    root = roots[0]
    assert attributes(root)["crashpoints.schedule"] == "deliver message 0, kill at B (hit 1)"
    assert root.status.code == 2 and "invariant 1" in root.status.message
    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in spans)
    assert {s.trace_id for s in spans} == {root.trace_id}
    by_id = {s.span_id: s for s in spans}
    calls = [s for s in spans if attributes(s).get("gen_ai.operation.name") == "execute_tool"]
    assert [attributes(c)["gen_ai.tool.name"] for c in calls] == ["mail.send", "mail.send"]
    assert len({attributes(c)["gen_ai.tool.call.id"] for c in calls}) == 2
    senders = [by_id[c.parent_span_id] for c in calls]
    assert [attributes(s)["crashpoints.process"] for s in senders] == ["worker-1", "worker-2"]
    assert [e.name for e in senders[0].events] == ["kill"]
    assert senders[0].status.code == 2 and not senders[1].events
    # The same file from the report, with the command.
    again = tmp_path / "again.json"
    assert main(["show", str(report), "--otel", "-o", str(again)]) == 0
    assert json.loads(again.read_text()) == json.loads(traces.read_text())


def test_nothing_failed_no_trace(pytester: pytest.Pytester, tmp_path: Path) -> None:
    traces = tmp_path / "traces.json"
    # The good twin's narrower test (a kill at B, recovered from): it passes as the wider one
    # does, without its case where a duplicate waits 10 s on the SQLite lock of the first.
    good = SCENARIOS / "test_jobs_mailer.py::test_with_sqlites_default_sync_a_power_loss_is_a_kill"
    result = pytester.runpytest_subprocess(
        "-p", "crashpoints", "-p", "no:randomly", f"--crashpoints-otel={traces}", str(good),
    )
    result.assert_outcomes(passed=1)
    assert load_otlp(traces.read_text()).resource_spans[0].scope_spans[0].spans == []


def test_show_otel_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}")
    assert main(["show", str(report), "--otel", "-o", str(report)]) == 2
    assert "would overwrite the report itself" in capsys.readouterr().err
    missing = tmp_path / "missing.json"
    assert main(["show", str(missing), "--otel", "-o", str(tmp_path / "t.json")]) == 2
    assert "crashpoints show: error:" in capsys.readouterr().err
