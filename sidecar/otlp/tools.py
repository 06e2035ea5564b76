"""Which spans are tool calls, and what each one says, under the four naming schemes in
use (a span is a tool span when the first attribute says so; then tool name; then
arguments / result):

- OpenTelemetry GenAI: ``gen_ai.operation.name = execute_tool``; ``gen_ai.tool.name``;
  ``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result``.
- MCP: ``mcp.method.name = tools/call``; ``gen_ai.tool.name``, else the span name
  (``tools/call NAME``, or the client's ``MCP send tools/call NAME``); as GenAI.
- OpenInference: ``openinference.span.kind = TOOL``; ``tool.name``; ``input.value`` /
  ``output.value``.
- OpenLLMetry: ``traceloop.span.kind = tool``; ``traceloop.entity.name``;
  ``traceloop.entity.input`` / ``traceloop.entity.output``.

A call failed when its status is ERROR or it carries ``error.type``; its error text is
the status message, else an ``exception`` event's message, else the result, else the
``error.type``.  The python ``mcp`` SDK's server span (``tools/call NAME``) carries the
tool name and ``error.type = tool_error`` on an ``isError`` result, but neither the
arguments nor the result.

A span names its session with ``mcp.session.id``, ``gen_ai.conversation.id``,
``session.id`` (OpenInference) or ``traceloop.association.properties.session_id``, in
that order, on itself or on its resource.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sidecar.otlp.spans import SpanRecord

SESSION_KEYS = (
    "mcp.session.id",
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
)
_MCP_SPAN_NAME = re.compile(r"^(?:MCP send )?tools/call (\S+)$")


@dataclass(frozen=True)
class ToolCall:
    tool: str
    call_id: str | None
    arguments: dict[str, Any]
    output: Any | None
    error: str | None
    scheme: str


def tool_call(span: SpanRecord) -> ToolCall | None:
    """The tool call ``span`` records, or ``None`` when it is not a tool span."""
    a = span.attributes
    if a.get("gen_ai.operation.name") == "execute_tool" or a.get("mcp.method.name") == "tools/call":
        name = a.get("gen_ai.tool.name") or a.get("mcp.tool.name") or _from_span_name(span.name)
        scheme = "mcp" if a.get("mcp.method.name") == "tools/call" else "gen_ai"
        args, result = a.get("gen_ai.tool.call.arguments"), a.get("gen_ai.tool.call.result")
    elif str(a.get("openinference.span.kind", "")).upper() == "TOOL":
        name, scheme = a.get("tool.name"), "openinference"
        args, result = a.get("input.value"), a.get("output.value")
    elif str(a.get("traceloop.span.kind", "")).lower() == "tool":
        name, scheme = a.get("traceloop.entity.name"), "openllmetry"
        args, result = a.get("traceloop.entity.input"), a.get("traceloop.entity.output")
    else:
        return None
    if not isinstance(name, str) or not name:
        return None
    call_id = a.get("gen_ai.tool.call.id")
    error = _error(span, result)
    return ToolCall(
        tool=name,
        call_id=str(call_id) if call_id else None,
        arguments=_arguments(args, scheme),
        output=None if error is not None else _parsed(result),
        error=error,
        scheme=scheme,
    )


def session_hint(span: SpanRecord) -> str | None:
    for source in (span.attributes, span.resource or {}):
        for key in SESSION_KEYS:
            value = source.get(key)
            if isinstance(value, str | int) and str(value):
                return f"{key}={value}"
    return None


def _from_span_name(name: str) -> str | None:
    match = _MCP_SPAN_NAME.match(name)
    return match.group(1) if match else None


def _error(span: SpanRecord, result: Any) -> str | None:
    error_type = span.attributes.get("error.type")
    if not span.failed and not error_type:
        return None
    for text in (span.status_message, *span.exception_messages):
        if text:
            return text
    if result not in (None, ""):
        return result if isinstance(result, str) else json.dumps(result, default=str)
    return str(error_type or "error")


def _parsed(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _arguments(value: Any, scheme: str) -> dict[str, Any]:
    parsed = _parsed(value)
    if parsed is None or parsed == "":
        return {}
    if not isinstance(parsed, dict):
        return {"input": parsed}
    if scheme == "openllmetry" and parsed and set(parsed) <= {"args", "kwargs"}:
        # traceloop records a python call as {"args": [...], "kwargs": {...}}
        kwargs = parsed.get("kwargs")
        out = dict(kwargs) if isinstance(kwargs, dict) else {}
        if parsed.get("args"):
            out["args"] = parsed["args"]
        return out
    return parsed
