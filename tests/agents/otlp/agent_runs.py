"""An agent run as instrumented code traces it: a root span around two tool spans, the
second failing, with the attributes of one of three conventions (``gen_ai``,
``openinference``, ``traceloop``)."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.trace import Status, StatusCode


def agent_run(tracer: Any, order: str, scheme: str = "gen_ai") -> None:
    """One agent run: a root span around two tool spans, the second failing."""
    with tracer.start_as_current_span("invoke_agent shop-assistant"):
        with tracer.start_as_current_span("execute_tool get_order") as span:
            _tool_attributes(span, scheme, "get_order", {"order_id": order})
            _result(span, scheme, {"order_id": order, "status": "pending"})
        with tracer.start_as_current_span("execute_tool exchange") as span:
            _tool_attributes(span, scheme, "exchange", {"order_id": order, "item": "hat"})
            span.set_attribute("error.type", "ToolError")
            span.set_status(Status(StatusCode.ERROR, "Non-delivered order cannot be exchanged"))


def _tool_attributes(span: Any, scheme: str, name: str, arguments: dict[str, Any]) -> None:
    if scheme == "gen_ai":
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        span.set_attribute("gen_ai.tool.call.id", f"call-{name}")
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))
    elif scheme == "openinference":
        span.set_attribute("openinference.span.kind", "TOOL")
        span.set_attribute("tool.name", name)
        span.set_attribute("input.value", json.dumps(arguments))
    else:
        span.set_attribute("traceloop.span.kind", "tool")
        span.set_attribute("traceloop.entity.name", name)
        span.set_attribute("traceloop.entity.input", json.dumps({"args": [], "kwargs": arguments}))


def _result(span: Any, scheme: str, result: dict[str, Any]) -> None:
    key = {
        "gen_ai": "gen_ai.tool.call.result",
        "openinference": "output.value",
        "openllmetry": "traceloop.entity.output",
    }[scheme]
    span.set_attribute(key, json.dumps(result))
