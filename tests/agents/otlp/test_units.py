"""The intake's pure parts: decoding, tool-span recognition, and assembly under bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.standalone_backend import StandaloneBackend
from sidecar.agents.otlp import (
    AssemblerLimits,
    MalformedPayload,
    SpanRecord,
    TraceAssembler,
    decode,
)
from sidecar.agents.otlp.spans import UnsupportedMediaType
from sidecar.agents.otlp.tools import session_hint, tool_call
from sidecar.agents.sessions import SessionLimits
from tests.agents.otlp.bodies import agent_turn, request, trace_id

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def span(
    span_id: str,
    parent: str | None = None,
    start: int = 0,
    trace: str = TRACE,
    status: int = 0,
    message: str = "",
    **attributes: Any,
) -> SpanRecord:
    return SpanRecord(
        trace, span_id.rjust(16, "0"), parent.rjust(16, "0") if parent else None, "s", 1,
        start, start + 1, attributes, status, message,
    )  # fmt: skip


def tool(
    span_id: str, name: str, parent: str | None = "1", start: int = 0, **extra: Any
) -> SpanRecord:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}
    return span(span_id, parent, start, **attrs)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _kv(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


def test_json_accepts_proto_names_enum_names_and_every_value_kind() -> None:
    attributes = [
        _kv("i", {"intValue": "7"}),
        _kv("d", {"doubleValue": 0.5}),
        _kv("b", {"boolValue": True}),
        _kv("a", {"arrayValue": {"values": [{"intValue": 1}]}}),
        _kv("k", {"kvlistValue": {"values": [_kv("z", {"stringValue": "q"})]}}),
        _kv("n", {}),
    ]
    record_json = {
        "trace_id": TRACE.upper(),
        "span_id": "00F067AA0BA902B7",
        "name": "execute_tool x",
        "kind": "SPAN_KIND_INTERNAL",
        "start_time_unix_nano": 5,
        "end_time_unix_nano": "6",
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
        "attributes": attributes,
        "events": [
            {"name": "exception", "attributes": [_kv("exception.message", {"stringValue": "E"})]}
        ],
    }
    document = {
        "resource_spans": [
            {
                "resource": {"attributes": [_kv("service.name", {"stringValue": "a"})]},
                "scope_spans": [{"spans": [record_json]}],
            }
        ]
    }
    decoded = decode(json.dumps(document).encode(), "application/json; charset=utf-8")
    [record] = decoded.spans
    assert (record.trace_id, record.span_id, record.parent_id) == (TRACE, "00f067aa0ba902b7", None)
    assert (record.kind, record.start_ns, record.end_ns, record.status_code) == (1, 5, 6, 2)
    assert record.attributes == {"i": 7, "d": 0.5, "b": True, "a": [1], "k": {"z": "q"}, "n": None}
    assert record.exception_messages == ("E",)
    assert record.resource == {"service.name": "a"}


@pytest.mark.parametrize(
    "body",
    [
        b"{}{}",
        b'{"resourceSpans": [{"scopeSpans": [{"spans": ["x"]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "'
        + TRACE.encode()
        + b'", "spanId": "00f067aa0ba902b7", "startTimeUnixNano": "soon"}]}]}]}',
        b'{"resourceSpans": [{"resource": []}]}',
    ],
)
def test_malformed_json(body: bytes) -> None:
    with pytest.raises(MalformedPayload):
        decode(body, "application/json")


def test_unsupported_media_and_encoding() -> None:
    with pytest.raises(UnsupportedMediaType):
        decode(b"", "text/plain")
    with pytest.raises(UnsupportedMediaType):
        decode(b"", "application/json", "br")


def test_tool_spans_of_each_scheme() -> None:
    gen_ai = tool("2", "get_order", **{"gen_ai.tool.call.arguments": '{"order_id": "#W1"}'})
    call = tool_call(gen_ai)
    assert call is not None and call.arguments == {"order_id": "#W1"} and call.scheme == "gen_ai"
    mcp_client = span("3", None, 0, **{"mcp.method.name": "tools/call"})
    object.__setattr__(mcp_client, "name", "MCP send tools/call exchange")
    call = tool_call(mcp_client)
    assert call is not None and call.tool == "exchange" and call.scheme == "mcp"
    inference = {"openinference.span.kind": "TOOL", "tool.name": "t", "output.value": "bad input"}
    failed = span("4", None, status=2, **inference)
    call = tool_call(failed)
    assert call is not None and call.error == "bad input" and call.output is None
    typed = tool("5", "t", **{"error.type": "TimeoutError"})
    assert tool_call(typed).error == "TimeoutError"  # type: ignore[union-attr]
    traceloop = {
        "traceloop.span.kind": "tool",
        "traceloop.entity.name": "x",
        "traceloop.entity.input": '{"args": [1], "kwargs": {"a": 2}}',
    }
    llm = span("6", None, **traceloop)
    assert tool_call(llm).arguments == {"a": 2, "args": [1]}  # type: ignore[union-attr]
    assert tool_call(span("7", None, **{"gen_ai.operation.name": "chat"})) is None
    assert session_hint(span("8", None, **{"session.id": "s-1"})) == "session.id=s-1"


def test_nested_and_same_id_tool_spans_are_one_call_and_steps_follow_start_time() -> None:
    backend = StandaloneBackend()
    assembler = TraceAssembler(backend, AssemblerLimits(root_grace_s=0))
    spans = [
        tool("4", "exchange", "3", start=31, **{"error.type": "tool_error"}),  # server span
        tool("3", "exchange", "1", start=30, **{"gen_ai.tool.call.arguments": '{"o": 1}'}),
        tool("2", "get_order", "1", start=10, **{"gen_ai.tool.call.id": "c1"}),
        tool("5", "get_order", "1", start=11, **{"gen_ai.tool.call.id": "c1",
                                                   "gen_ai.tool.call.result": '{"s": "p"}'}),
    ]  # fmt: skip
    assert assembler.ingest(spans) == []
    [report] = assembler.ingest([span("1", None)])
    assert [(s.tool, s.arguments, s.output, s.error) for s in report.steps] == [
        ("get_order", {}, {"s": "p"}, None),
        ("exchange", {"o": 1}, None, "tool_error"),
    ]
    assert assembler.stats.merged_calls == 2


def test_bounds_idle_traces_and_named_sessions() -> None:
    clock = Clock()
    limits = AssemblerLimits(
        max_traces=2,
        max_spans_per_trace=2,
        root_grace_s=1,
        trace_idle_s=10,
        sessions=SessionLimits(idle_s=5),
    )
    assembler = TraceAssembler(StandaloneBackend(), limits, clock)
    traces = [f"{i:032x}" for i in range(1, 5)]
    failing = {"error.type": "E", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a"}
    assembler.ingest([span("2", "1", trace=traces[0], **failing)])
    assembler.ingest([span("2", "1", trace=traces[1])])
    [evicted] = assembler.ingest([span("2", "1", trace=traces[2])])  # the oldest trace closes
    assert [s.tool for s in evicted.steps] == ["a"] and assembler.stats.traces_evicted == 1
    for i in range(3, 6):  # over the per-trace bound: counted, dropped
        assembler.ingest([span(str(i), "1", trace=traces[2])])
    assert assembler.stats.dropped_spans == 2
    clock.now = 10
    assert assembler.expire() == [] and assembler.open_traces() == 0
    # a named session is reported when its trace closes, and outlives it until it idles
    hinted = {"gen_ai.conversation.id": "c", "gen_ai.operation.name": "execute_tool",
              "gen_ai.tool.name": "b", "error.type": "E"}  # fmt: skip
    assembler.ingest([span("1", None, trace=traces[3], **hinted)])
    clock.now = 11
    [named] = assembler.expire()
    assert [s.tool for s in named.steps] == ["b"] and named.outcome == "abandoned"
    assert named.ended == "traced" and named.ongoing and assembler.open_sessions() == 1
    clock.now = 16
    assert assembler.expire() == [] and assembler.open_sessions() == 0  # nothing new


def test_reports_waiting_for_the_sink_count_against_the_memory_limit() -> None:
    """A conversation's report made as its trace ends shares its steps with the open
    session only until the session leaves the book; the report, still waiting for a
    sink that takes nothing, holds them after.  Each waiting report counts in full, so
    a sink that never catches up makes the intake refuse (503), not hold more and more."""
    now = [0.0]
    limits = AssemblerLimits(
        root_grace_s=0,
        max_memory_bytes=400_000,
        max_request_bytes=100_000,
        sessions=SessionLimits(report_clean=True),
    )
    assembler = TraceAssembler(None, limits, lambda: now[0])
    statuses, waiting = [], 0
    for n in range(200):
        call = {"tool": "fetch", "arguments": {"u": n}, "result": "x" * 20_000}
        body = json.dumps(request(agent_turn(trace_id(n), f"conversation-{n}", [call])))
        receipt = assembler.receive(body.encode(), "application/json")
        statuses.append(receipt.status)
        waiting += sum(r.size for r in receipt.reports)  # never delivered
        now[0] += 0.01
    assert 503 in statuses
    assert assembler.held_bytes() <= limits.max_memory_bytes
    assert waiting <= limits.max_memory_bytes  # what it let in, it can account for
