"""The failing cases of a report as OpenTelemetry traces (OTLP/JSON), for a tracing backend.

:func:`otlp_traces` turns a report document (what ``--crashpoints-report`` writes) into one
OTLP ``ExportTraceServiceRequest`` in its JSON form: one trace per failing case, whose root
span is the case (its schedule, replay command, verdict and violations), with a span per
process of the case (a delivery, a recovery) and, under the process that sent it, a span per
tool call the providers journalled, with the OpenTelemetry GenAI attributes
(``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name``,
``gen_ai.tool.call.id``). Kills, power losses, faults and the ledger's transitions are span
events. Jaeger, Tempo, Phoenix and the OpenTelemetry Collector's ``otlpjson`` receiver load
the file as it is.

Times are the harness's own clock (seconds from the case's start, as the timeline shows them)
from a fixed epoch, 2026-01-01T00:00:00Z, and ids are digests of the case: the same report
gives the same file. Nothing here imports OpenTelemetry.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["otlp_traces", "render_otlp"]

#: 2026-01-01T00:00:00Z: where the harness clock's 0 is put.
EPOCH_NS = 1_767_225_600 * 10**9
#: A tool call, a kill or any event of one harness second lasts a millisecond on the trace.
TICK_NS = 1_000_000
SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3
STATUS_ERROR = 2
_STARTS = ("deliver", "recovery")
_ENDS = ("worker", "kill", "raised", "timeout", "died")
_EVENTS = ("kill", "power", "raised", "timeout", "died", "error", "note", "wait")


def _value(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _attributes(pairs: Mapping[str, object]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items() if v is not None]


def _id(*parts: object, size: int) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def _ns(at: object) -> int:
    return EPOCH_NS + round(float(at) * 1e9) if isinstance(at, int | float) else EPOCH_NS


def _event(row: Mapping[str, Any]) -> dict[str, Any]:
    data = dict(row.get("data") or {})
    return {
        "timeUnixNano": str(_ns(row.get("at"))),
        "name": str(row.get("kind")),
        "attributes": _attributes({"crashpoints.text": row.get("text"), **{
            f"crashpoints.{k}": v for k, v in sorted(data.items())
            if isinstance(v, str | int | float)
        }}),
    }


def _processes(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each process of the case: its first and last harness second, what started it."""
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        process = (row.get("data") or {}).get("process") or row.get("process")
        if not isinstance(process, str) or not process:
            continue
        info = found.setdefault(process, {"start": row.get("at"), "end": row.get("at"),
                                          "started_by": None, "message": None})
        info["end"] = row.get("at")
        if row.get("source") == "harness" and row.get("kind") in _STARTS:
            info["started_by"] = row.get("text")
            info["message"] = (row.get("data") or {}).get("message")
    return found


def _case_spans(test: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    failure = test.get("failure")
    if not isinstance(failure, Mapping) or not isinstance(failure.get("case"), Mapping):
        return
    rows: list[Mapping[str, Any]] = list(failure["case"].get("timeline") or [])
    if not rows:
        return
    nodeid = str(test.get("nodeid"))
    trace = _id(nodeid, failure.get("token"), failure.get("schedule_text"), size=16)
    root = _id(trace, "case", size=8)
    yield _root_span(test, failure, rows, trace, root)
    spans: dict[str, str] = {}
    for process, info in _processes(rows).items():
        span = _id(trace, "process", process, size=8)
        spans[process] = span
        yield _process_span(rows, process, info, trace, span, root)
    for index, row in enumerate(rows):
        if row.get("source") != "journal":
            continue
        parent = spans.get(str(row.get("process")), root)
        yield _call_span(index, row, trace, parent)


def _root_span(
    test: Mapping[str, Any],
    failure: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    trace: str,
    root: str,
) -> dict[str, Any]:
    """The case's span: its schedule, replay command, verdict and violations, with the
    harness's steps that belong to no process (faults, authority changes...) as events."""
    nodeid = str(test.get("nodeid"))
    last = max(float(r.get("at") or 0) for r in rows)
    violations = [str(v).split("\n", 1)[0] for v in failure.get("violations") or []]
    root_events = [
        _event(r) for r in rows
        if r.get("source") == "harness" and r.get("kind") in ("fault", "quiet", "authority",
                                                                  "clock", "setup")
    ]
    root_events += [
        {"timeUnixNano": str(_ns(last) + TICK_NS), "name": "violation",
         "attributes": _attributes({"crashpoints.violation": text})}
        for text in violations
    ]
    return {
        "traceId": trace, "spanId": root, "name": f"crash case {nodeid}",
        "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(EPOCH_NS), "endTimeUnixNano": str(_ns(last) + 2 * TICK_NS),
        "attributes": _attributes({
            "crashpoints.test": nodeid,
            "crashpoints.schedule": failure.get("schedule_text"),
            "crashpoints.replay": failure.get("replay_command"),
            "crashpoints.verdict": test.get("verdict"),
            "crashpoints.invariants": ", ".join(str(i) for i in failure.get("invariants") or []),
            "crashpoints.seed": test.get("seed"),
        }),
        "events": root_events,
        "status": ({"code": STATUS_ERROR, "message": violations[0]} if violations else {}),
    }


def _process_span(
    rows: Sequence[Mapping[str, Any]],
    process: str,
    info: Mapping[str, Any],
    trace: str,
    span: str,
    root: str,
) -> dict[str, Any]:
    """The span of one process of the case (``info``: from :func:`_processes`), with its
    kill or other ending as events; an error when it did not end by itself."""
    events = [
        _event(r) for r in rows
        if r.get("source") == "harness" and r.get("kind") in _EVENTS
        and (r.get("data") or {}).get("process") == process
    ]
    killed = any(e["name"] in ("kill", "power", "raised", "timeout", "died") for e in events)
    return {
        "traceId": trace, "spanId": span, "parentSpanId": root,
        "name": info["started_by"] or process, "kind": SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(_ns(info["start"])),
        "endTimeUnixNano": str(_ns(info["end"]) + TICK_NS),
        "attributes": _attributes({"crashpoints.process": process,
                                   "crashpoints.message": info["message"]}),
        "events": events,
        "status": {"code": STATUS_ERROR, "message": events[-1]["name"]} if killed else {},
    }


def _call_span(index: int, row: Mapping[str, Any], trace: str, parent: str) -> dict[str, Any]:
    """The span of one tool call a provider journalled (``row``, the timeline's ``index``),
    with the OpenTelemetry GenAI attributes."""
    status = row.get("status")
    start = _ns(row.get("at")) + TICK_NS // 2
    return {
        "traceId": trace, "spanId": _id(trace, "call", index, row.get("request_id"), size=8),
        "parentSpanId": parent, "name": f"execute_tool {row.get('kind')}",
        "kind": SPAN_KIND_CLIENT,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + TICK_NS // 4),
        "attributes": _attributes({
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": row.get("kind"),
            "gen_ai.tool.call.id": row.get("request_id"),
            "crashpoints.provider": row.get("provider"),
            "crashpoints.effect_applied": bool(row.get("effect_applied")),
            "crashpoints.idempotency_key": row.get("operation_key"),
            "crashpoints.message": row.get("message"),
            "http.response.status_code": status if isinstance(status, int) else None,
        }),
        "status": ({"code": STATUS_ERROR} if isinstance(status, int) and status >= 400
                   else {}),
    }


def otlp_traces(document: Mapping[str, Any]) -> dict[str, Any]:
    """The report ``document``'s failing cases as one OTLP/JSON ``ExportTraceServiceRequest``
    (an empty list of spans when nothing failed)."""
    spans = [span for test in document.get("tests") or [] for span in _case_spans(test)]
    for span in spans:  # OTLP/JSON leaves empty fields out
        for key in ("events", "status"):
            if not span.get(key):
                span.pop(key, None)
    return {
        "resourceSpans": [{
            "resource": {"attributes": _attributes({"service.name": "pytest-crashpoints"})},
            "scopeSpans": [{
                "scope": {"name": "pytest-crashpoints",
                          "version": str(document.get("version", ""))},
                "spans": spans,
            }],
        }]
    }


def render_otlp(document: Mapping[str, Any]) -> str:
    """:func:`otlp_traces` as the text of the file."""
    return json.dumps(otlp_traces(document), indent=1) + "\n"
