"""OTLP/HTTP trace intake: tool spans (OpenTelemetry GenAI ``execute_tool``, MCP
``tools/call``, OpenInference, OpenLLMetry) assembled into sessions and reported to the
failure memory with no code on the agent's side.

``TraceAssembler(backend)`` works without FastAPI; ``otlp_router(assembler)`` serves
``POST /v1/traces``; ``prometheus_lines(assembler)`` are its ``/metrics`` series.
"""

from __future__ import annotations

from sidecar.agents.otlp.assembler import Receipt, ReportSink, TraceAssembler
from sidecar.agents.otlp.limits import AssemblerLimits
from sidecar.agents.otlp.metrics import prometheus_lines
from sidecar.agents.otlp.router import otlp_router, sweep
from sidecar.agents.otlp.spans import MalformedPayload, SpanRecord, UnsupportedMediaType, decode
from sidecar.agents.otlp.tools import ToolCall, session_hint, tool_call, tool_id
from sidecar.errors import BodyTooLarge

__all__ = [
    "AssemblerLimits",
    "BodyTooLarge",
    "MalformedPayload",
    "Receipt",
    "ReportSink",
    "SpanRecord",
    "ToolCall",
    "TraceAssembler",
    "UnsupportedMediaType",
    "decode",
    "otlp_router",
    "prometheus_lines",
    "session_hint",
    "sweep",
    "tool_call",
    "tool_id",
]
