"""Part 4 of the gateway benchmark: the OTLP intake's throughput on synthetic agent traces,
split into decoding, assembly and reporting, against turning the same bodies into Python
values."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.harness.progress import progress
from benchmarks.harness.timing import ratio


# ---- 4. OTLP intake ------------------------------------------------------------------
def _synthetic_request(rng: random.Random, traces: int) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    spans = []
    for _ in range(traces):
        trace_id = rng.randbytes(16)
        root = rng.randbytes(8)
        t0 = 1_700_000_000_000_000_000 + rng.randrange(10**12)
        spans.append(
            Span(trace_id=trace_id, span_id=root, name="invoke_agent", kind=1,
                 start_time_unix_nano=t0, end_time_unix_nano=t0 + 10**9,
                 attributes=[kv("gen_ai.operation.name", "invoke_agent")])
        )  # fmt: skip
        for j in range(2):
            spans.append(
                Span(trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root,
                     name="chat", kind=3, start_time_unix_nano=t0 + j,
                     end_time_unix_nano=t0 + j + 5,
                     attributes=[kv("gen_ai.operation.name", "chat")])
            )  # fmt: skip
        for j in range(8):
            order = f"#W{rng.randrange(1000)}"
            failed = rng.random() < 0.2
            attributes = [
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", f"tool_{rng.randrange(50)}"),
                kv("gen_ai.tool.call.id", f"call_{rng.randrange(10**9)}"),
                kv("gen_ai.tool.call.arguments", json.dumps({"order_id": order, "item": "hat"})),
                kv(
                    "gen_ai.tool.call.result",
                    json.dumps({"order_id": order, "status": rng.choice(["pending", "delivered"])}),
                ),
            ]
            status = Status(code=2, message="Non-delivered order") if failed else Status()
            spans.append(
                Span(trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root,
                     name="execute_tool", kind=1, start_time_unix_nano=t0 + 100 * (j + 1),
                     end_time_unix_nano=t0 + 100 * (j + 1) + 50, attributes=attributes,
                     status=status)
            )  # fmt: skip
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": [kv("service.name", "agent")]},
                scope_spans=[ScopeSpans(spans=spans)],
            )
        ]
    )


def _json_body(request: Any) -> bytes:
    from google.protobuf.json_format import MessageToDict

    document = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def otlp_throughput(bodies: int, traces_per_body: int, seed: int) -> dict[str, Any]:
    rng = random.Random(f"bench-gateway-otlp:{seed}")
    requests = [_synthetic_request(rng, traces_per_body) for _ in range(bodies)]
    encoded = {
        "protobuf": [r.SerializeToString() for r in requests],
        "json": [_json_body(r) for r in requests],
    }
    spans_total = sum(len(r.resource_spans[0].scope_spans[0].spans) for r in requests)
    out: dict[str, Any] = {"bodies": bodies, "spans": spans_total}
    rounds = 3
    progress(f"otlp intake: {spans_total} spans, protobuf and json, {rounds} rounds")
    timings, reports = _timed_rounds(encoded, rounds)
    for kind, t in timings.items():
        total = t["decode"] + t["assemble"] + t["report"]
        spans_timed = spans_total * rounds
        out[kind] = {
            "spans_per_s": round(spans_timed / total),
            "share": {k: round(t[k] / total, 3) for k in ("decode", "assemble", "report")},
            "decode_vs_baseline_parse": ratio(t["decode"], t["floor"]),
            "baseline_parse": "json.loads" if kind == "json" else "protobuf MessageToDict",
            "baseline_parse_spans_per_s": round(spans_timed / t["floor"]),
            "reports": reports[kind] // rounds,
        }
    for kind, payloads in encoded.items():
        out[kind]["profile_top_tottime"] = _profile(kind, payloads)
    return out


MEDIA = {"protobuf": "application/x-protobuf", "json": "application/json"}


def _floor(kind: str) -> Callable[[bytes], Any]:
    """The least it takes to turn a body into Python values: json.loads, and for
    protobuf the library's own generic conversion (upb parses lazily, so a bare
    ParseFromString measures almost nothing)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    if kind == "json":
        return json.loads
    return lambda body: MessageToDict(ExportTraceServiceRequest.FromString(body))


def _timed_rounds(
    encoded: dict[str, list[bytes]], rounds: int
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Seconds spent in each stage by encoding, and the reports made per encoding: one
    untimed round, then the encodings in round robin with a rotating start, so that
    drift on a shared machine hits both alike."""
    from benchmarks.standalone_backend import StandaloneBackend
    from sidecar.agents.otlp import AssemblerLimits, TraceAssembler, decode

    kinds = list(encoded)
    timings = {k: {"floor": 0.0, "decode": 0.0, "assemble": 0.0, "report": 0.0} for k in kinds}
    reports = dict.fromkeys(kinds, 0)
    for round_no in range(rounds + 1):
        shift = round_no % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            floor = _floor(kind)
            assembler = TraceAssembler(StandaloneBackend(), AssemblerLimits(root_grace_s=0))
            for body in encoded[kind]:
                t0 = time.perf_counter()
                floor(body)
                t1 = time.perf_counter()
                decoded = decode(body, MEDIA[kind])
                t2 = time.perf_counter()
                finished = assembler.ingest(decoded.spans) + assembler.expire()
                t3 = time.perf_counter()
                assembler.deliver(finished)
                t4 = time.perf_counter()
                if round_no == 0:
                    continue
                stages = zip(
                    ("floor", "decode", "assemble", "report"),
                    (t0, t1, t2, t3),
                    (t1, t2, t3, t4),
                    strict=True,
                )
                for stage, start, end in stages:
                    timings[kind][stage] += end - start
                reports[kind] += len(finished)
    return timings, reports


def _profile(kind: str, payloads: list[bytes]) -> list[dict[str, Any]]:
    """The top functions by own time of the whole intake of ``payloads``."""
    import cProfile
    import pstats

    from benchmarks.standalone_backend import StandaloneBackend
    from sidecar.agents.otlp import AssemblerLimits, TraceAssembler

    profile = cProfile.Profile()
    assembler = TraceAssembler(StandaloneBackend(), AssemblerLimits(root_grace_s=0))
    profile.enable()
    for body in payloads:
        assembler.deliver(assembler.receive(body, MEDIA[kind]).reports)
    profile.disable()
    stats = pstats.Stats(profile)
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:8]  # type: ignore[attr-defined]
    return [
        {"function": f"{Path(f).name}:{line}({name})", "tottime_s": round(data[2], 4)}
        for (f, line, name), data in top
    ]
