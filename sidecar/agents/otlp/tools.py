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

What a span says is bounded before anything reads it: a text value longer than
``max_chars`` (plus a margin, so that a secret cut at the edge is still recognised
whole) is cut before it is parsed or redacted, so a 1 MB result costs what a 5 KB one
does; JSON nested deeper than :data:`~sidecar.model.MAX_DEPTH` levels is refused
(:class:`~sidecar.agents.otlp.spans.MalformedPayload`, the request answers 400), as the
library would refuse it; text that cannot be stored (a lone surrogate) and numbers that
are not finite are replaced.  A tool name outside the library's grammar (1-128 of
``A-Z a-z 0-9 _ - .``) is mapped to an id of its own by :func:`tool_id`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from sidecar.agents.otlp.spans import MalformedPayload, SpanRecord
from sidecar.model import MAX_DEPTH, TOOL_ID_PATTERN
from sidecar.trust.toolnames import tool_id_for

SESSION_KEYS = (
    "mcp.session.id",
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
)
_MCP_SPAN_NAME = re.compile(r"^(?:MCP send )?tools/call (\S+)$")
DEFAULT_MAX_CHARS = 4_096
CUT_MARGIN = 1_024
"""Characters read past the cap, so that a secret straddling it is still recognised."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    call_id: str | None
    arguments: dict[str, Any]
    output: Any | None
    error: str | None
    scheme: str


def tool_call(span: SpanRecord, max_chars: int = DEFAULT_MAX_CHARS) -> ToolCall | None:
    """The tool call ``span`` records, or ``None`` when it is not a tool span.  Raises
    :class:`~sidecar.agents.otlp.spans.MalformedPayload` for arguments or a result nested past
    :data:`~sidecar.model.MAX_DEPTH`."""
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
    limit = max_chars + CUT_MARGIN
    args, result = _bounded(args, limit), _bounded(result, limit)
    error = _error(span, result)
    where = f"span {span.span_id}"
    return ToolCall(
        tool=name,
        call_id=str(call_id) if call_id else None,
        arguments=_storable(_arguments(args, scheme), f"{where}: tool arguments"),
        output=None if error is not None else _storable(_parsed(result), f"{where}: result"),
        error=None if error is None else _storable(_bounded(error, limit), where),
        scheme=scheme,
    )


def tool_id(name: str) -> tuple[str | None, str | None]:
    """The library's id for a span's tool name, and what was done to it: ``(name,
    None)`` when it is valid; ``(mapped, "renamed")`` for any other name, mapped as the
    gateway maps an upstream's (:func:`sidecar.trust.toolnames.tool_id_for`: ``fs/read file``
    -> ``fs_read_file_`` and a digest of the whole), so that a look-alike of a real tool
    (``get/order``, ``refund`` with a zero-width space, fullwidth letters) is a
    tool of its own, never the real one; ``(None, reason)`` when the name holds no letter
    or digit at all."""
    if TOOL_ID_PATTERN.fullmatch(name):
        return name, None
    if not any(ch.isalnum() for ch in name):
        return None, "no letter or digit"
    return tool_id_for(name), "renamed"


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
        except RecursionError:
            raise MalformedPayload("a JSON attribute is nested too deeply") from None
    return value


def _bounded(value: Any, limit: int) -> Any:
    """A text cut to ``limit`` characters before anything parses or redacts it (a cut
    JSON text no longer parses, and is kept as text)."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit]
    return value


def _storable(value: Any, where: str) -> Any:
    """``value`` with what the library would refuse replaced (lone surrogates, numbers
    that are not finite); raises ``MalformedPayload`` past ``MAX_DEPTH`` levels."""
    out, stack = _clean(value), []
    stack.append((out, 0))
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise MalformedPayload(f"{where} are nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key in list(node):
                item = node[key]
                cleaned = _clean(item)
                if cleaned is not item:
                    node[key] = cleaned
                if isinstance(cleaned, dict | list):
                    stack.append((cleaned, depth + 1))
            bad = [k for k in node if isinstance(k, str) and _surrogates(k)]
            for key in bad:
                node[_text(key)] = node.pop(key)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                cleaned = _clean(item)
                if cleaned is not item:
                    node[i] = cleaned
                if isinstance(cleaned, dict | list):
                    stack.append((cleaned, depth + 1))
    return out


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value) if _surrogates(value) else value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _text(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


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
