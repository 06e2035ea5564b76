"""The OTLP intake end to end: the OpenTelemetry SDK's own OTLP/HTTP exporter (and
OTLP/JSON bodies built from the same spans) posting to a running collector, out of
order, with malformed bodies in between."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx

from tests.agents.otlp.agent_runs import agent_run
from tests.agents.otlp.conftest import Collector, eventually, local_tracer, otlp_json


def _exporter(collector: Collector) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=collector.url)


def test_sdk_exporter_children_before_their_root(collector: Collector) -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    tracer, memory = local_tracer()
    agent_run(tracer, "#W1")
    looked, failed, root = memory.get_finished_spans()
    exporter = _exporter(collector)
    assert exporter.export([failed]) == SpanExportResult.SUCCESS  # the last child first
    assert exporter.export([looked]) == SpanExportResult.SUCCESS
    assert collector.assembler.open_traces() == 1 and collector.backend.reports == []
    assert exporter.export([root]) == SpanExportResult.SUCCESS
    eventually(lambda: len(collector.backend.reports) == 1)
    [report] = collector.backend.reports
    assert report.outcome == "abandoned"
    assert [s.tool for s in report.steps] == ["get_order", "exchange"]  # by start time
    assert report.steps[0].arguments == {"order_id": "#W1"}
    assert report.steps[0].output == {"order_id": "#W1", "status": "pending"}
    assert report.steps[1].error == "Non-delivered order cannot be exchanged"
    assert collector.assembler.open_traces() == 0


def test_json_bodies_of_other_schemes_with_a_rejected_span(collector: Collector) -> None:
    tracer, memory = local_tracer()
    agent_run(tracer, "#W2", scheme="openinference")
    agent_run(tracer, "#W3", scheme="openllmetry")
    document = otlp_json(memory.get_finished_spans())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[0], "traceId": "not-hex", "spanId": "00f067aa0ba902b7"})
    answer = httpx.post(collector.url, json=document)
    assert answer.status_code == 200
    assert answer.json() == {
        "partialSuccess": {"rejectedSpans": "1", "errorMessage": "invalid trace id"}
    }
    eventually(lambda: len(collector.backend.reports) == 2)
    by_order = {r.steps[0].arguments["order_id"]: r for r in collector.backend.reports}
    assert by_order["#W2"].steps[1].error == "Non-delivered order cannot be exchanged"
    assert by_order["#W3"].steps[1].arguments == {"order_id": "#W3", "item": "hat"}
    assert by_order["#W3"].steps[0].output == {"order_id": "#W3", "status": "pending"}


def test_gzip_json_body(collector: Collector) -> None:
    tracer, memory = local_tracer()
    agent_run(tracer, "#W1")
    body = gzip.compress(json.dumps(otlp_json(memory.get_finished_spans())).encode())
    answer = httpx.post(
        collector.url,
        content=body,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert answer.status_code == 200 and answer.json() == {}
    eventually(lambda: len(collector.backend.reports) == 1)


def test_malformed_bodies_are_refused_and_lose_nothing_accepted(collector: Collector) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    tracer, memory = local_tracer()
    agent_run(tracer, "#W1")
    looked, failed, root = memory.get_finished_spans()
    protobuf = {"Content-Type": "application/x-protobuf"}
    first = httpx.post(
        collector.url, content=encode_spans([looked, failed]).SerializeToString(), headers=protobuf
    )
    assert first.status_code == 200
    garbage = httpx.post(collector.url, content=b"\xff\xff\xff not protobuf", headers=protobuf)
    assert garbage.status_code == 400
    status = _decode_status(garbage.content)
    assert status == (3, "body is not an ExportTraceServiceRequest")
    for body in (b"{not json", b'{"resourceSpans": "nope"}', b"[]"):
        bad = httpx.post(collector.url, content=body, headers={"Content-Type": "application/json"})
        assert bad.status_code == 400 and bad.json()["code"] == 3
    wrong_type = httpx.post(collector.url, content=b"x", headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 415
    bad_zip = httpx.post(
        collector.url,
        content=b"nope",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert bad_zip.status_code == 400
    assert collector.backend.reports == [] and collector.assembler.open_traces() == 1
    last = httpx.post(
        collector.url, content=encode_spans([root]).SerializeToString(), headers=protobuf
    )
    assert last.status_code == 200
    eventually(lambda: len(collector.backend.reports) == 1)
    assert [s.tool for s in collector.backend.reports[0].steps] == ["get_order", "exchange"]
    assert collector.assembler.stats.malformed_bodies == 5


def _decode_status(body: bytes) -> tuple[int, str]:
    from google.rpc.status_pb2 import Status as RpcStatus

    status = RpcStatus()
    status.ParseFromString(body)
    return status.code, status.message
