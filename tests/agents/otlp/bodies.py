"""OTLP/JSON request bodies written by hand, for the probes that need sizes, depths and
names no SDK produces."""

from __future__ import annotations

import json
from typing import Any

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def trace_id(n: int) -> str:
    return f"{n + 1:032x}"


def span_id(n: int) -> str:
    return f"{n + 1:016x}"


def attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, dict):  # an AnyValue given as is
        return {"key": key, "value": value}
    return {"key": key, "value": {"stringValue": str(value)}}


def span(
    trace: str,
    sid: str,
    parent: str | None = None,
    *,
    start: int = 1,
    error: str | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": sid,
        "name": "span",
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + 1),
        "attributes": [attribute(k.replace("__", "."), v) for k, v in attributes.items()],
    }
    if parent:
        out["parentSpanId"] = parent
    if error is not None:
        out["status"] = {"code": 2, "message": error}
    return out


def tool_span(
    trace: str,
    sid: str,
    parent: str | None,
    tool: str,
    arguments: Any = None,
    *,
    result: Any = None,
    error: str | None = None,
    start: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if arguments is not None:
        attrs["gen_ai.tool.call.arguments"] = (
            arguments if isinstance(arguments, str) else json.dumps(arguments)
        )
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result if isinstance(result, str) else json.dumps(result)
    attrs.update(extra)
    out = span(trace, sid, parent, start=start, error=error)
    out["attributes"] = [attribute(k, v) for k, v in attrs.items()]
    return out


def request(spans: list[dict[str, Any]], **resource: Any) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [attribute(k, v) for k, v in resource.items()]},
                "scopeSpans": [{"spans": spans}],
            }
        ]
    }


def agent_turn(
    trace: str, conversation: str | None, calls: list[dict[str, Any]], *, root: bool = True
) -> list[dict[str, Any]]:
    """A root ``invoke_agent`` span (naming the conversation) around tool spans given as
    ``{"tool", "arguments", "result" | "error"}``."""
    root_id = span_id(0)
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent"}
    if conversation:
        attrs["gen_ai.conversation.id"] = conversation
    spans = []
    for i, call in enumerate(calls, 1):
        spans.append(
            tool_span(
                trace,
                span_id(i),
                root_id,
                call["tool"],
                call.get("arguments", {}),
                result=call.get("result"),
                error=call.get("error"),
                start=10 * i,
            )
        )
    if root:
        spans.append(span(trace, root_id, None, start=1, **attrs))
    return spans
