"""OTLP/HTTP trace intake: tool spans (OpenTelemetry GenAI ``execute_tool``, MCP
``tools/call``, OpenInference, OpenLLMetry) assembled into sessions and reported to the
failure memory with no code on the agent's side.

``TraceAssembler(backend)`` works without FastAPI; ``otlp_router(assembler)`` serves
``POST /v1/traces``.
"""

from __future__ import annotations

from sidecar.otlp.assembler import AssemblerLimits, Receipt, ReportSink, TraceAssembler
from sidecar.otlp.router import otlp_router, sweep
from sidecar.otlp.spans import MalformedPayload, SpanRecord, UnsupportedMediaType, decode
from sidecar.otlp.tools import ToolCall, session_hint, tool_call

__all__ = [
    "AssemblerLimits",
    "MalformedPayload",
    "Receipt",
    "ReportSink",
    "SpanRecord",
    "ToolCall",
    "TraceAssembler",
    "UnsupportedMediaType",
    "decode",
    "otlp_router",
    "session_hint",
    "sweep",
    "tool_call",
]
