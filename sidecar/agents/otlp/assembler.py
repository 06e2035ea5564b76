"""Tool spans assembled into sessions, and sessions into reports.

Spans arrive in any order, children usually before their parents, a trace spread over
several exports and processes.  The assembler keeps, per open trace, the little it needs
of each span (its parent, its session hint, its tool call as redacted evidence), and
closes a trace

- ``root_grace_s`` after its root span (the one with no parent) arrived: spans of the
  same trace exported by other processes may still be on their way;
- ``trace_idle_s`` after its last span when its root never comes;
- at once when it is the least recently seen and ``max_traces`` are open, or when
  memory must be made (below).

A closed trace's tool calls become steps, ordered by start time.  A tool span nested in
another tool span of the same tool (an agent's tool span around an MCP client span around
the MCP server's span) is one call, merged into the outermost; so are spans sharing a
``gen_ai.tool.call.id``.  Steps go to a session named by the nearest session hint
(:func:`~sidecar.agents.otlp.tools.session_hint`) up the span's ancestry, else by any hint in
the trace, else by the trace itself.  A trace's own session is reported when the trace
closes; a named session (a conversation) is reported then too, with its steps so far,
and stays open for its later traces (:mod:`sidecar.agents.otlp.sessions`).

**Bounds.**  One request is at most ``max_request_bytes`` once inflated (else 413) and
``max_spans_per_request`` spans (the rest are rejected, and counted).  A span's texts
are cut before they are parsed or redacted (:func:`~sidecar.agents.otlp.tools.tool_call`).
All the work of a request that needs no state (:func:`prepare_request`: inflating,
decoding, naming, redacting) runs before the assembler's lock is taken, in a worker
process for a large body (:mod:`sidecar.agents.otlp.lanes`); the lock covers only the
bookkeeping, in chunks, so another exporter's request is never held behind a large
one.  Memory is bounded in bytes: what open traces, open sessions and
undelivered reports hold, plus the requests being decoded, stays under
``max_memory_bytes``.  A request that would pass it first makes room (sessions with
nothing left to report are forgotten, then the oldest traces are closed, then the
least recently active sessions are reported and closed); when that is not enough
(reports still waiting for the backend, or too many large requests at once) it is
refused with 503 and ``Retry-After``, and counted.

Thread-safe; the clock is injected; reporting is separate (:meth:`TraceAssembler.deliver`)
so that a request never waits on the backend.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from sidecar.agents.gateway.backend import Outcome, Step
from sidecar.agents.gateway.evidence import arguments_evidence, error_evidence, output_evidence
from sidecar.agents.otlp.sessions import Report, SessionBook, SessionLimits, SessionStats
from sidecar.agents.otlp.spans import (
    MAX_SPANS,
    UNAVAILABLE,
    BodyTooLarge,
    MalformedPayload,
    SpanRecord,
    decode,
    inflate,
    media_of,
    response_body,
    status_body,
)
from sidecar.agents.otlp.tools import DEFAULT_MAX_CHARS, ToolCall, session_hint, tool_call, tool_id
from sidecar.errors import SidecarError

log = logging.getLogger("sidecar.agents.otlp")

MIB = 1_048_576
NODE_BYTES = 400
"""What one kept span costs beyond its texts (ids, the node, the dict entry): an
estimate, measured with ``sys.getsizeof`` on CPython 3.11-3.13."""
INGEST_CHUNK = 512
"""Spans taken per hold of the lock."""
SEP = "\x1f"
"""Between a sender's name and the trace or session id it names."""
DELIVERY_BATCH = 500
"""Sessions handed to a sink that takes many at once (one intake batch in the library)."""


class ReportSink(Protocol):
    """Where finished sessions go.  A sink that also has ``report_sessions(reports) ->
    int`` (how many it took) is given them in batches (:class:`~sidecar.agents.otlp.sink.
    LibrarySink`)."""

    def report_session(
        self, session_id: str, steps: list[Step], outcome: Outcome, task_input: str | None
    ) -> None: ...


@dataclass(frozen=True)
class AssemblerLimits:
    max_traces: int = 10_000
    max_spans_per_trace: int = 2_000
    max_spans_per_request: int = MAX_SPANS
    max_sessions: int = 10_000
    max_steps: int = 256
    root_grace_s: float = 5.0
    trace_idle_s: float = 30.0
    session_idle_s: float = 300.0
    """How long a conversation stays open for its later traces after its last one."""
    report_clean: bool = False
    max_chars: int = DEFAULT_MAX_CHARS
    max_request_bytes: int = 20 * MIB
    """Largest request body once inflated."""
    max_memory_bytes: int = 256 * MIB
    """What open traces, open sessions, undelivered reports and requests being decoded
    may hold, estimated."""

    def __post_init__(self) -> None:
        if min(self.max_traces, self.max_spans_per_trace, self.max_spans_per_request) < 1:
            raise ValueError("the trace and span bounds must be at least 1")
        if self.root_grace_s < 0 or self.trace_idle_s <= 0:
            raise ValueError("root_grace_s must be >= 0 and trace_idle_s > 0")
        if self.max_request_bytes < 1 or self.max_memory_bytes < self.max_request_bytes:
            raise ValueError("max_memory_bytes must hold at least one max_request_bytes body")


@dataclass
class _Node:
    parent: str | None
    hint: str | None
    step: Step | None
    """The tool call as redacted evidence; ``None`` for any other span."""
    call_id: str | None
    start_ns: int
    size: int


@dataclass
class _Trace:
    serial: int
    source: str = ""
    nodes: dict[str, _Node] = field(default_factory=dict)
    last_seen: float = 0.0
    root_at: float | None = None
    size: int = 0


@dataclass(frozen=True)
class _Prepared:
    trace_id: str
    span_id: str
    node: _Node
    dropped: str | None = None
    """Why the span's tool call was not kept (it is kept as a plain span)."""
    renamed: bool = False


@dataclass(frozen=True)
class PreparedRequest:
    """What the assembler keeps of one request's spans, decoded, named and redacted:
    small, and picklable (a worker process may prepare it)."""

    media: str
    items: list[_Prepared]
    rejected: int
    reasons: tuple[str, ...]


def prepare_request(
    body: bytes, content_type: str, content_encoding: str | None, limits: AssemblerLimits
) -> PreparedRequest:
    """Inflate, decode and prepare one OTLP/HTTP body: all the work of a request that
    needs no state.  Raises :class:`~sidecar.agents.otlp.spans.UnsupportedMediaType`,
    :class:`~sidecar.agents.otlp.spans.BodyTooLarge` or
    :class:`~sidecar.agents.otlp.spans.MalformedPayload`."""
    media = media_of(content_type)
    raw = inflate(body, content_encoding, limits.max_request_bytes)
    decoded = decode(raw, content_type, max_spans=limits.max_spans_per_request)
    del raw
    items = [prepare_span(span, limits.max_chars) for span in decoded.spans]
    return PreparedRequest(media, items, decoded.rejected, decoded.reasons)


def prepare_span(span: SpanRecord, max_chars: int = DEFAULT_MAX_CHARS) -> _Prepared:
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
    size = NODE_BYTES + len(hint or "") + (_size(step) if step is not None else 0)
    node = _Node(span.parent_id, hint, step, call_id, span.start_ns, size)
    return _Prepared(span.trace_id, span.span_id, node, dropped, renamed)


def _step(call: ToolCall, tool: str, cap: int) -> Step:
    args = arguments_evidence(call.arguments, cap)
    if call.error is not None:
        return Step(tool, args, None, error_evidence(call.error, cap))
    return Step(tool, args, output_evidence(call.output, cap), None)


@dataclass
class AssemblerStats:
    requests: int = 0
    malformed_bodies: int = 0
    too_large_bodies: int = 0
    refused_requests: int = 0
    """Refused for now (503): the memory limit, or a full large-request lane."""
    large_requests: int = 0
    """Prepared in the large-request lane (over ``SMALL_BODY_BYTES`` inflated)."""
    spans: int = 0
    """Spans decoded from accepted requests."""
    accepted_spans: int = 0
    tool_spans: int = 0
    rejected: int = 0
    """Spans answered as rejected (``partial_success``): an invalid id, or past the
    request's span bound."""
    refused_spans: int = 0
    dropped_spans: int = 0
    """Spans taken but not kept: past the trace's span bound, or a tool name with
    nothing usable (see ``dropped``)."""
    dropped: dict[str, int] = field(default_factory=dict)
    renamed_tools: int = 0
    traces_closed: int = 0
    traces_evicted: int = 0
    traces_shed: int = 0
    merged_calls: int = 0
    reports: int = 0
    """Sessions handed to the sink and taken."""
    report_failures: int = 0
    """Sessions the sink failed on (an error of its own)."""
    refused_reports: int = 0
    """Sessions the sink refused (a library error: invalid, rate-limited, busy)."""


@dataclass(frozen=True)
class Receipt:
    """What to answer one ``POST /v1/traces``, and the sessions it finished."""

    media: str
    body: bytes
    accepted: int
    rejected: int
    reports: list[Report]
    status: int = 200
    """503 when the memory limit refused the request (then ``body`` is an error)."""


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
        self._rooted: deque[tuple[float, str, int]] = deque()
        self._serial = 0
        self._sessions = SessionBook(
            SessionLimits(
                max_sessions=self.limits.max_sessions,
                max_steps=self.limits.max_steps,
                idle_s=self.limits.session_idle_s,
                report_clean=self.limits.report_clean,
            ),
            clock=clock,
        )
        self._lock = threading.Lock()
        self._trace_bytes = 0
        self._pending_bytes = 0
        self._queue: deque[Report] = deque()
        self._delivering = threading.Lock()
        self.stats = AssemblerStats()

    # ---- intake --------------------------------------------------------------------
    def receive(
        self,
        body: bytes,
        content_type: str,
        content_encoding: str | None = None,
        source: str = "",
    ) -> Receipt:
        """Decode and take one OTLP/HTTP body, in this process: :func:`prepare_request`,
        then :meth:`take`.  Raises what :func:`prepare_request` raises (nothing taken);
        a body the memory limit refuses comes back with status 503, nothing taken."""
        self.started()
        try:
            prepared = prepare_request(body, content_type, content_encoding, self.limits)
        except SidecarError as exc:
            self.failed(exc)
            raise
        return self.take(prepared, source)

    def started(self, large: bool = False) -> None:
        """Count a request (:meth:`receive` does; a caller preparing it elsewhere calls
        this, then :meth:`take` or :meth:`failed`)."""
        with self._lock:
            self.stats.requests += 1
            self.stats.large_requests += large

    def failed(self, exc: BaseException) -> None:
        """Count a request :func:`prepare_request` refused."""
        if isinstance(exc, MalformedPayload):
            self._count("malformed_bodies")
        elif isinstance(exc, BodyTooLarge):
            self._count("too_large_bodies")

    def take(self, prepared: PreparedRequest, source: str = "") -> Receipt:
        """Keep a prepared request's spans, if the memory limit lets them in.  ``source``:
        who sent them (the token's name): its traces and sessions are its own, never
        merged with another sender's, and what they teach is attributed to it."""
        media = prepared.media
        admitted, reports = self._admit(sum(p.node.size for p in prepared.items))
        if not admitted:
            with self._lock:
                self.stats.refused_spans += len(prepared.items)
            return self.refused(media, reports)
        reports += self._ingest(prepared.items, prepared.rejected, source)
        reports += self.expire()
        message = "; ".join(prepared.reasons)
        return Receipt(
            media,
            response_body(media, prepared.rejected, message),
            len(prepared.items),
            prepared.rejected,
            reports,
        )

    def ingest(self, spans: Iterable[SpanRecord], source: str = "") -> list[Report]:
        """Take decoded spans (as :meth:`receive` does, whatever the memory limit);
        returns the sessions this finished (a root arrived with no grace, or room was
        made)."""
        prepared = [prepare_span(s, self.limits.max_chars) for s in spans]
        return self._ingest(prepared, 0, source)

    def expire(self) -> list[Report]:
        """Close the traces and sessions whose time is up."""
        now = self._clock()
        reports: list[Report] = []
        with self._lock:
            while self._rooted and now - self._rooted[0][0] >= self.limits.root_grace_s:
                _at, trace_id, serial = self._rooted.popleft()
                trace = self._traces.get(trace_id)
                if trace is not None and trace.serial == serial:
                    reports += self._close(trace_id)
            idle = []
            for trace_id, trace in self._traces.items():
                if now - trace.last_seen < self.limits.trace_idle_s:
                    break  # least recently seen first: the rest are younger
                idle.append(trace_id)
            for trace_id in idle:
                reports += self._close(trace_id)
            reports += self._sessions.expire()
            self._pending(reports)
        return reports

    def flush(self) -> list[Report]:
        """Close everything (shutdown)."""
        with self._lock:
            reports: list[Report] = []
            for trace_id in list(self._traces):
                reports += self._close(trace_id)
            reports += self._sessions.close_all()
            self._pending(reports)
            return reports

    def deliver(self, reports: Sequence[Report]) -> int:
        """Hand finished sessions to the sink, in batches of :data:`DELIVERY_BATCH`, one
        delivery at a time: a call while another delivers queues its reports for that
        one and returns at once (the sink's work never runs in many threads at once,
        competing with requests).  A failing sink loses only its batch.  Returns the
        sessions this call delivered."""
        with self._lock:
            self._queue.extend(reports)
        delivered = 0
        while self._delivering.acquire(blocking=False):
            try:
                while True:
                    with self._lock:
                        batch = [
                            self._queue.popleft()
                            for _ in range(min(len(self._queue), DELIVERY_BATCH))
                        ]
                    if not batch:
                        break
                    delivered += self._deliver(batch)
            finally:
                self._delivering.release()
            with self._lock:
                if not self._queue:  # else reports came while it was let go: deliver them
                    break
        return delivered

    def _deliver(self, batch: list[Report]) -> int:
        delivered = refused = failed = 0
        many = getattr(self.sink, "report_sessions", None)
        if self.sink is None:
            pass
        elif many is not None:
            try:
                taken = many(batch)
                delivered, refused = taken, len(batch) - taken
            except Exception as exc:
                failed = len(batch)
                log.error('{"event": "report_failed", "type": "%s"}', type(exc).__name__)
        else:
            for report in batch:
                try:
                    self.sink.report_session(
                        report.session_id, list(report.steps), report.outcome, report.task_input
                    )
                    delivered += 1
                except SidecarError as exc:
                    refused += 1
                    log.error('{"event": "report_refused", "code": "%s"}', exc.code)
                except Exception as exc:
                    failed += 1
                    log.error('{"event": "report_failed", "type": "%s"}', type(exc).__name__)
        with self._lock:
            self.stats.reports += delivered
            self.stats.refused_reports += refused
            self.stats.report_failures += failed
            self._pending_bytes -= sum(_held(r) for r in batch)
        return delivered

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def open_traces(self) -> int:
        with self._lock:
            return len(self._traces)

    def open_sessions(self) -> int:
        with self._lock:
            return len(self._sessions)

    def session_stats(self) -> SessionStats:
        with self._lock:
            return replace(self._sessions.stats)

    def held_bytes(self) -> int:
        """What open traces, open sessions, undelivered reports and requests being
        decoded hold, estimated."""
        with self._lock:
            return self._held()

    # ---- the memory limit ------------------------------------------------------------
    def _held(self) -> int:
        return self._trace_bytes + self._sessions.bytes + self._pending_bytes

    def _admit(self, size: int) -> tuple[bool, list[Report]]:
        """Room for ``size`` more bytes of kept spans, made first when needed; ``False``
        when there is none to make (reports still wait for the backend)."""
        limit = self.limits.max_memory_bytes
        reports: list[Report] = []
        with self._lock:
            if self._held() + size > limit:
                # down to a little under the limit, not to it: else every request sheds
                target = limit - limit // 10 - size
                reports += self._sessions.shed_settled(self._room(target))
                while self._traces and self._held() > target:
                    self.stats.traces_shed += 1
                    reports += self._close(next(iter(self._traces)))
                if self._held() > target:
                    reports += self._sessions.shed(self._room(target))
                self._pending(reports)
            return self._held() + size <= limit, reports

    def refused(self, media: str, reports: list[Report] | None = None, why: str = "") -> Receipt:
        """The answer to a request refused for now (503: an exporter retries it)."""
        with self._lock:
            self.stats.refused_requests += 1
        message = why or "the trace intake is over its memory limit; retry later"
        body = status_body(media, UNAVAILABLE, message)
        return Receipt(media, body, 0, 0, reports or [], 503)

    def _room(self, target: int) -> int:
        """The bytes sessions may keep for the total to come down to ``target``."""
        return max(target - (self._held() - self._sessions.bytes), 0)

    def _pending(self, reports: Iterable[Report]) -> None:
        self._pending_bytes += sum(_held(r) for r in reports)

    # ---- taking spans --------------------------------------------------------------
    def _ingest(
        self, prepared: Sequence[_Prepared], rejected: int, source: str = ""
    ) -> list[Report]:
        reports: list[Report] = []
        with self._lock:
            self.stats.rejected += rejected
        for start in range(0, len(prepared), INGEST_CHUNK):
            with self._lock:
                taken = self._ingest_chunk(prepared[start : start + INGEST_CHUNK], source)
                self._pending(taken)
            reports += taken
        return reports

    def _ingest_chunk(self, chunk: Sequence[_Prepared], source: str = "") -> list[Report]:
        reports: list[Report] = []
        now = self._clock()
        rooted: list[str] = []
        for item in chunk:
            node = item.node
            self.stats.spans += 1
            # one sender's trace is its own: another cannot add spans to it
            trace_key = f"{source}{SEP}{item.trace_id}" if source else item.trace_id
            trace = self._traces.get(trace_key)
            if trace is None:
                self._serial += 1
                trace = self._traces[trace_key] = _Trace(self._serial, source)
                reports += self._make_room()
            trace.last_seen = now
            self._traces.move_to_end(trace_key)
            if len(trace.nodes) >= self.limits.max_spans_per_trace:
                self._drop(f"more than {self.limits.max_spans_per_trace} spans in one trace")
                continue
            if item.dropped:  # kept as a plain span: its children still hang from it
                self._drop(item.dropped)
            else:
                self.stats.accepted_spans += 1
            self.stats.tool_spans += node.step is not None
            self.stats.renamed_tools += item.renamed
            previous = trace.nodes.get(item.span_id)
            if previous is not None:  # the same span again (a retried export)
                trace.size -= previous.size
                self._trace_bytes -= previous.size
            trace.nodes[item.span_id] = node
            trace.size += node.size
            self._trace_bytes += node.size
            if node.parent is None and trace.root_at is None:
                trace.root_at = now
                self._rooted.append((now, trace_key, trace.serial))
                rooted.append(trace_key)
        if self.limits.root_grace_s == 0:
            for trace_id in rooted:
                if trace_id in self._traces:
                    reports += self._close(trace_id)
        return reports

    def _drop(self, reason: str) -> None:
        self.stats.dropped_spans += 1
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1

    # ---- closing (under the lock) --------------------------------------------------
    def _make_room(self) -> list[Report]:
        reports: list[Report] = []
        while len(self._traces) > self.limits.max_traces:
            oldest = next(iter(self._traces))
            self.stats.traces_evicted += 1
            reports += self._close(oldest)
        return reports

    def _close(self, trace_id: str) -> list[Report]:
        trace = self._traces.pop(trace_id)
        self._trace_bytes -= trace.size
        self.stats.traces_closed += 1
        calls = self._calls(trace)
        if not calls:
            return []
        hints = _hints(trace)
        trace_hint = next((n.hint for n in trace.nodes.values() if n.hint), None)
        reports: list[Report] = []
        own = f"trace:{trace_id}"
        keys: list[str] = []
        for _start, node_id, step in sorted(calls, key=lambda c: (c[0], c[1])):
            hint = hints.get(node_id) or trace_hint
            # a named session is its sender's: another's spans naming it open their own
            key = f"hint:{trace.source}{SEP}{hint}" if hint else own
            if key not in keys:
                keys.append(key)
            reports += self._sessions.record(key, step, _size(step), trace.source)
        for key in keys:
            report = self._sessions.close(key) if key == own else self._sessions.report(key)
            if report is not None:
                reports.append(report)
        return reports

    def _calls(self, trace: _Trace) -> list[tuple[int, str, Step]]:
        """One entry per call: nested same-tool spans and shared call ids merged."""
        tops = _outermost_same_tool(trace)
        groups: dict[str, list[str]] = {}
        by_call_id: dict[str, str] = {}
        for node_id, node in trace.nodes.items():
            if node.step is None:
                continue
            top = tops[node_id]
            if node.call_id:
                top = by_call_id.setdefault(node.call_id, top)
            groups.setdefault(top, []).append(node_id)
        out: list[tuple[int, str, Step]] = []
        for top, members in groups.items():
            self.stats.merged_calls += len(members) - 1
            ordered = [top, *(m for m in members if m != top)]
            steps = [s for m in ordered if (s := trace.nodes[m].step) is not None]
            start = min(trace.nodes[m].start_ns for m in members)
            out.append((start, top, _merge(steps)))
        return out


def _tree(trace: _Trace) -> tuple[list[str], dict[str, list[str]]]:
    """The trace's nodes in an order where every parent comes before its children (a
    node whose parent is absent, or in a cycle, starts a tree of its own), and each
    node's children."""
    children: dict[str, list[str]] = {}
    roots: list[str] = []
    for node_id, node in trace.nodes.items():
        if node.parent is not None and node.parent in trace.nodes and node.parent != node_id:
            children.setdefault(node.parent, []).append(node_id)
        else:
            roots.append(node_id)
    order: list[str] = []
    seen: set[str] = set()
    for start in [*roots, *trace.nodes]:  # then whatever a cycle kept from every root
        if start in seen:
            continue
        stack = [start]
        while stack:
            node_id = stack.pop()
            if node_id in seen:
                continue
            seen.add(node_id)
            order.append(node_id)
            stack.extend(children.get(node_id, ()))
    return order, children


def _walk(trace: _Trace) -> list[tuple[str, str | None]]:
    """(node, the node it descends from in the walk), parents before children."""
    order, children = _tree(trace)
    parent_in_walk: dict[str, str | None] = dict.fromkeys(order)
    placed: set[str] = set()
    for node_id in order:
        placed.add(node_id)
        for child in children.get(node_id, ()):
            if child not in placed:
                parent_in_walk[child] = node_id
    return [(n, parent_in_walk[n]) for n in order]


def _outermost_same_tool(trace: _Trace) -> dict[str, str]:
    """For each tool span, its outermost ancestor calling the same tool (itself when
    none does), in one pass over the trace."""
    # per node, the outermost node of each tool on its path from the top
    outermost: dict[str, dict[str, str]] = {}
    tops: dict[str, str] = {}
    for node_id, parent in _walk(trace):
        above = outermost.get(parent, {}) if parent is not None else {}
        step = trace.nodes[node_id].step
        if step is not None and step.tool not in above:
            above = {**above, step.tool: node_id}
        outermost[node_id] = above
        if step is not None:
            tops[node_id] = above[step.tool]
    return tops


def _hints(trace: _Trace) -> dict[str, str | None]:
    """For each node, the nearest session hint up its ancestry (itself first)."""
    found: dict[str, str | None] = {}
    for node_id, parent in _walk(trace):
        hint = trace.nodes[node_id].hint
        found[node_id] = hint if hint else (found.get(parent) if parent is not None else None)
    return found


def _merge(steps: list[Step]) -> Step:
    """The outermost call, with what it lacks taken from the inner ones; failed if any
    of them failed."""
    top = steps[0]
    arguments = next((s.arguments for s in steps if s.arguments), {})
    error = next((s.error for s in steps if s.error is not None), None)
    output = (
        None if error is not None else next((s.output for s in steps if s.output is not None), None)
    )
    return Step(top.tool, arguments, output, error)


def _size(step: Step) -> int:
    """Estimated bytes of a step's evidence (its texts as JSON, plus the objects)."""
    parts = (step.tool, step.arguments, step.output, step.error)
    return 200 + len(json.dumps(parts, ensure_ascii=False, default=str))


def _held(report: Report) -> int:
    """What an undelivered report holds alone: a session that stays open shares its
    steps with the report."""
    return report.size if report.ended is not None else 0


def stats_dict(assembler: TraceAssembler) -> dict[str, Any]:
    return {
        **asdict(assembler.stats),
        "open_traces": assembler.open_traces(),
        "open_sessions": assembler.open_sessions(),
        "held_bytes": assembler.held_bytes(),
        "sessions": asdict(assembler.session_stats()),
    }
