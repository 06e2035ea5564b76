"""One request's spans made ready for the assembler, with no state: inflated, decoded,
each tool call parsed, named and redacted into a :class:`~sidecar.agents.gateway.
backend.Step`, and the rest of each span cut down to what the assembler keeps (its
parent, its session hint, its start).  What comes out is small and picklable, so that a
worker process may do this work (:mod:`sidecar.agents.otlp.lanes`)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.agents.evidence import arguments_evidence, error_evidence, output_evidence
from sidecar.agents.otlp.limits import AssemblerLimits
from sidecar.agents.otlp.spans import SpanRecord, decode, inflate, media_of
from sidecar.agents.otlp.tools import DEFAULT_MAX_CHARS, ToolCall, session_hint, tool_call, tool_id
from sidecar.agents.sessions import step_size
from sidecar.memory import Step

NODE_BYTES = 400
"""What one kept span costs beyond its texts (ids, the node, the dict entry): an
estimate, measured with ``sys.getsizeof`` on CPython 3.11-3.13."""


@dataclass
class Node:
    """What the assembler keeps of one span."""

    parent: str | None
    hint: str | None
    step: Step | None
    """The tool call as redacted evidence; ``None`` for any other span."""
    call_id: str | None
    start_ns: int
    size: int


@dataclass(frozen=True)
class Prepared:
    trace_id: str
    span_id: str
    node: Node
    dropped: str | None = None
    """Why the span's tool call was not kept (it is kept as a plain span)."""
    renamed: bool = False


@dataclass(frozen=True)
class PreparedRequest:
    """What the assembler keeps of one request's spans, decoded, named and redacted:
    small, and picklable (a worker process may prepare it)."""

    media: str
    items: list[Prepared]
    rejected: int
    reasons: tuple[str, ...]


def prepare_request(
    body: bytes, content_type: str, content_encoding: str | None, limits: AssemblerLimits
) -> PreparedRequest:
    """Inflate, decode and prepare one OTLP/HTTP body: all the work of a request that
    needs no state.  Raises :class:`~sidecar.agents.otlp.spans.UnsupportedMediaType`,
    :class:`~sidecar.errors.BodyTooLarge` or
    :class:`~sidecar.agents.otlp.spans.MalformedPayload`."""
    media = media_of(content_type)
    raw = inflate(body, content_encoding, limits.max_request_bytes)
    decoded = decode(raw, content_type, max_spans=limits.max_spans_per_request)
    del raw
    items = [prepare_span(span, limits.max_chars) for span in decoded.spans]
    return PreparedRequest(media, items, decoded.rejected, decoded.reasons)


def prepare_span(span: SpanRecord, max_chars: int = DEFAULT_MAX_CHARS) -> Prepared:
    """What the assembler keeps of ``span``: its tool call parsed, named and redacted."""
    hint = session_hint(span)
    call = tool_call(span, max_chars)
    step: Step | None = None
    call_id = dropped = None
    renamed = False
    if call is not None:
        name, change = tool_id(call.tool)
        if name is None:
            dropped = f"unusable tool name ({change})"
        else:
            renamed = change is not None
            step, call_id = _step(call, name, max_chars), call.call_id
    size = NODE_BYTES + len(hint or "") + (step_size(step) if step is not None else 0)
    node = Node(span.parent_id, hint, step, call_id, span.start_ns, size)
    return Prepared(span.trace_id, span.span_id, node, dropped, renamed)


def _step(call: ToolCall, tool: str, cap: int) -> Step:
    args = arguments_evidence(call.arguments, cap)
    if call.error is not None:
        return Step(tool, args, None, error_evidence(call.error, cap))
    return Step(tool, args, output_evidence(call.output, cap), None)
