"""Tool spans assembled into sessions, and sessions into reports.

Spans arrive in any order, children usually before their parents, a trace spread over
several exports and processes.  The assembler keeps, per open trace, the little it needs
of each span (its parent, its session hint, its tool call), and closes a trace

- ``root_grace_s`` after its root span (the one with no parent) arrived: spans of the
  same trace exported by other processes may still be on their way;
- ``trace_idle_s`` after its last span when its root never comes;
- at once when it is the least recently seen and ``max_traces`` are open.

A closed trace's tool calls become steps, ordered by start time.  A tool span nested in
another tool span of the same tool (an agent's tool span around an MCP client span around
the MCP server's span) is one call, merged into the outermost; so are spans sharing a
``gen_ai.tool.call.id``.  Steps go to a session named by the nearest session hint
(:func:`~sidecar.otlp.tools.session_hint`) up the span's ancestry, else by any hint in
the trace, else by the trace itself.  A trace's own session ends with the trace; a named
session ends ``session_idle_s`` after its last trace (or when ``max_sessions`` are
open).  Which sessions are reported, and with which outcome, is the gateway's rule
(:mod:`sidecar.gateway.sessions`).

Thread-safe; the clock is injected; reporting is separate (:meth:`TraceAssembler.deliver`)
so that a request never waits on the backend.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sidecar.gateway.backend import Outcome, Step
from sidecar.gateway.evidence import (
    DEFAULT_MAX_CHARS,
    arguments_evidence,
    error_evidence,
    output_evidence,
)
from sidecar.gateway.sessions import SessionBook, SessionLimits, SessionReport
from sidecar.otlp.spans import (
    JSON,
    PROTOBUF,
    MalformedPayload,
    SpanRecord,
    decode,
    response_body,
)
from sidecar.otlp.tools import ToolCall, session_hint, tool_call

log = logging.getLogger("sidecar.otlp")


class ReportSink(Protocol):
    def report_session(
        self, session_id: str, steps: list[Step], outcome: Outcome, task_input: str | None
    ) -> None: ...


@dataclass(frozen=True)
class AssemblerLimits:
    max_traces: int = 10_000
    max_spans_per_trace: int = 2_000
    max_sessions: int = 10_000
    max_steps: int = 256
    root_grace_s: float = 5.0
    trace_idle_s: float = 30.0
    session_idle_s: float = 300.0
    report_clean: bool = False
    max_chars: int = DEFAULT_MAX_CHARS

    def __post_init__(self) -> None:
        if min(self.max_traces, self.max_spans_per_trace) < 1:
            raise ValueError("max_traces and max_spans_per_trace must be at least 1")
        if self.root_grace_s < 0 or self.trace_idle_s <= 0:
            raise ValueError("root_grace_s must be >= 0 and trace_idle_s > 0")


@dataclass
class _Node:
    parent: str | None
    hint: str | None
    call: ToolCall | None
    start_ns: int


@dataclass
class _Trace:
    nodes: dict[str, _Node] = field(default_factory=dict)
    last_seen: float = 0.0
    root_at: float | None = None
    dropped: int = 0


@dataclass
class AssemblerStats:
    spans: int = 0
    tool_spans: int = 0
    rejected: int = 0
    malformed_bodies: int = 0
    dropped_spans: int = 0
    traces_closed: int = 0
    traces_evicted: int = 0
    merged_calls: int = 0
    reports: int = 0
    report_failures: int = 0


@dataclass(frozen=True)
class Receipt:
    """What to answer one ``POST /v1/traces``, and the sessions it finished."""

    media: str
    body: bytes
    accepted: int
    rejected: int
    reports: list[SessionReport]


class TraceAssembler:
    def __init__(
        self,
        sink: ReportSink | None = None,
        limits: AssemblerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.limits = limits or AssemblerLimits()
        self._clock = clock
        self._traces: OrderedDict[str, _Trace] = OrderedDict()
        self._sessions = SessionBook(
            SessionLimits(
                max_sessions=self.limits.max_sessions,
                max_steps=self.limits.max_steps,
                idle_timeout_s=self.limits.session_idle_s,
                report_clean=self.limits.report_clean,
            ),
            clock=clock,
        )
        self._lock = threading.Lock()
        self.stats = AssemblerStats()

    # ---- intake --------------------------------------------------------------------
    def receive(
        self, body: bytes, content_type: str, content_encoding: str | None = None
    ) -> Receipt:
        """Decode and take one OTLP/HTTP body.  Raises
        :class:`~sidecar.otlp.spans.MalformedPayload` (nothing taken) or
        :class:`~sidecar.otlp.spans.UnsupportedMediaType`."""
        media = PROTOBUF if content_type.lower().startswith(PROTOBUF) else JSON
        try:
            decoded = decode(body, content_type, content_encoding)
        except MalformedPayload:
            with self._lock:
                self.stats.malformed_bodies += 1
            raise
        reports = self.ingest(decoded.spans)
        reports += self.expire()
        with self._lock:
            self.stats.rejected += decoded.rejected
        message = "; ".join(decoded.reasons)
        return Receipt(
            media,
            response_body(media, decoded.rejected, message),
            len(decoded.spans),
            decoded.rejected,
            reports,
        )

    def ingest(self, spans: Iterable[SpanRecord]) -> list[SessionReport]:
        """Take spans; returns the sessions this finished (a root arrived with no grace,
        or room was made)."""
        reports: list[SessionReport] = []
        now = self._clock()
        with self._lock:
            rooted: list[str] = []
            for span in spans:
                self.stats.spans += 1
                trace = self._traces.get(span.trace_id)
                if trace is None:
                    trace = self._traces[span.trace_id] = _Trace()
                    reports += self._make_room()
                trace.last_seen = now
                self._traces.move_to_end(span.trace_id)
                if len(trace.nodes) >= self.limits.max_spans_per_trace:
                    trace.dropped += 1
                    self.stats.dropped_spans += 1
                    continue
                call = tool_call(span)
                self.stats.tool_spans += call is not None
                trace.nodes[span.span_id] = _Node(
                    span.parent_id, session_hint(span), call, span.start_ns
                )
                if span.parent_id is None and trace.root_at is None:
                    trace.root_at = now
                    rooted.append(span.trace_id)
            if self.limits.root_grace_s == 0:
                for trace_id in rooted:
                    if trace_id in self._traces:
                        reports += self._close(trace_id)
        return reports

    def expire(self) -> list[SessionReport]:
        """Close the traces and sessions whose time is up."""
        now = self._clock()
        reports: list[SessionReport] = []
        with self._lock:
            due = [
                trace_id
                for trace_id, t in self._traces.items()
                if (t.root_at is not None and now - t.root_at >= self.limits.root_grace_s)
                or now - t.last_seen >= self.limits.trace_idle_s
            ]
            for trace_id in due:
                reports += self._close(trace_id)
            reports += self._sessions.expire()
        return reports

    def flush(self) -> list[SessionReport]:
        """Close everything (shutdown)."""
        with self._lock:
            reports: list[SessionReport] = []
            for trace_id in list(self._traces):
                reports += self._close(trace_id)
            return reports + self._sessions.close_all()

    def deliver(self, reports: Sequence[SessionReport]) -> int:
        """Hand finished sessions to the sink; a failing sink loses only its report."""
        delivered = 0
        for report in reports:
            if self.sink is None:
                continue
            try:
                self.sink.report_session(
                    report.session_id, list(report.steps), report.outcome, report.task_input
                )
                delivered += 1
            except Exception as exc:
                with self._lock:
                    self.stats.report_failures += 1
                log.error('{"event": "report_failed", "type": "%s"}', type(exc).__name__)
        with self._lock:
            self.stats.reports += delivered
        return delivered

    def open_traces(self) -> int:
        with self._lock:
            return len(self._traces)

    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    # ---- closing (under the lock) --------------------------------------------------
    def _make_room(self) -> list[SessionReport]:
        reports: list[SessionReport] = []
        while len(self._traces) > self.limits.max_traces:
            oldest = next(iter(self._traces))
            self.stats.traces_evicted += 1
            reports += self._close(oldest)
        return reports

    def _close(self, trace_id: str) -> list[SessionReport]:
        trace = self._traces.pop(trace_id)
        self.stats.traces_closed += 1
        calls = self._calls(trace)
        if not calls:
            return []
        trace_hint = next((n.hint for n in trace.nodes.values() if n.hint), None)
        reports: list[SessionReport] = []
        own = f"trace:{trace_id}"
        keys: list[str] = []
        for _start, node_id, call in sorted(calls, key=lambda c: (c[0], c[1])):
            hint = self._hint(trace, node_id) or trace_hint
            key = f"hint:{hint}" if hint else own
            if key not in keys:
                keys.append(key)
            reports += self._sessions.record(key, self._step(call))
        if own in keys:
            report = self._sessions.close(own, "closed")
            if report is not None:
                reports.append(report)
        return reports

    def _calls(self, trace: _Trace) -> list[tuple[int, str, ToolCall]]:
        """One entry per call: nested same-tool spans and shared call ids merged."""
        groups: dict[str, list[str]] = {}
        by_call_id: dict[str, str] = {}
        for node_id, node in trace.nodes.items():
            if node.call is None:
                continue
            top = self._outermost_same_tool(trace, node_id, node.call.tool)
            if node.call.call_id:
                top = by_call_id.setdefault(node.call.call_id, top)
            groups.setdefault(top, []).append(node_id)
        out: list[tuple[int, str, ToolCall]] = []
        for top, members in groups.items():
            self.stats.merged_calls += len(members) - 1
            calls = [trace.nodes[m].call for m in [top, *(m for m in members if m != top)]]
            merged = _merge([c for c in calls if c is not None])
            start = min(trace.nodes[m].start_ns for m in members)
            out.append((start, top, merged))
        return out

    def _outermost_same_tool(self, trace: _Trace, node_id: str, tool: str) -> str:
        top, seen = node_id, {node_id}
        parent = trace.nodes[node_id].parent
        while parent is not None and parent in trace.nodes and parent not in seen:
            seen.add(parent)
            node = trace.nodes[parent]
            if node.call is not None and node.call.tool == tool:
                top = parent
            parent = node.parent
        return top

    def _hint(self, trace: _Trace, node_id: str) -> str | None:
        seen: set[str] = set()
        current: str | None = node_id
        while current is not None and current in trace.nodes and current not in seen:
            seen.add(current)
            node = trace.nodes[current]
            if node.hint:
                return node.hint
            current = node.parent
        return None

    def _step(self, call: ToolCall) -> Step:
        cap = self.limits.max_chars
        args = arguments_evidence(call.arguments, cap)
        if call.error is not None:
            return Step(call.tool, args, None, error_evidence(call.error, cap))
        return Step(call.tool, args, output_evidence(call.output, cap), None)


def _merge(calls: list[ToolCall]) -> ToolCall:
    """The outermost call, with what it lacks taken from the inner ones; failed if any
    of them failed."""
    top = calls[0]
    arguments = next((c.arguments for c in calls if c.arguments), {})
    error = next((c.error for c in calls if c.error is not None), None)
    output = (
        None if error is not None else next((c.output for c in calls if c.output is not None), None)
    )
    return ToolCall(top.tool, top.call_id, arguments, output, error, top.scheme)


def stats_dict(assembler: TraceAssembler) -> dict[str, Any]:
    from dataclasses import asdict

    return {
        **asdict(assembler.stats),
        "open_traces": assembler.open_traces(),
        "open_sessions": assembler.open_sessions(),
    }
