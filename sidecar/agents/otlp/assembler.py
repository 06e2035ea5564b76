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

A closed trace's tool calls become steps, ordered by start time, the nested and
repeated spans of one call merged (:mod:`sidecar.agents.otlp.span_tree`).  Steps go to a
session named by the nearest session hint (:func:`~sidecar.agents.otlp.tools.
session_hint`) up the span's ancestry, else by any hint in the trace, else by the
trace itself.  A trace's own session is reported when the trace
closes; a named session (a conversation) is reported then too, with its steps so far,
and stays open for its later traces (:mod:`sidecar.agents.sessions`).

**Bounds** (:class:`~sidecar.agents.otlp.limits.AssemblerLimits`).  One request is at
most ``max_request_bytes`` once inflated (else 413) and ``max_spans_per_request`` spans
(the rest are rejected, and counted).  A span's texts are cut before they are parsed
or redacted (:func:`~sidecar.agents.otlp.tools.tool_call`).  All the work of a request
that needs no state (:func:`~sidecar.agents.otlp.prepare.prepare_request`: inflating,
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

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

from sidecar.agents.otlp.limits import AssemblerLimits, AssemblerStats
from sidecar.agents.otlp.prepare import (
    Prepared,
    PreparedRequest,
    prepare_request,
    prepare_span,
)
from sidecar.agents.otlp.span_tree import SpanTree, calls_of, hints_of
from sidecar.agents.otlp.spans import (
    UNAVAILABLE,
    MalformedPayload,
    SpanRecord,
    response_body,
    status_body,
)
from sidecar.agents.sessions import SessionBook, SessionReport, SessionStats, step_size
from sidecar.errors import BodyTooLarge, SidecarError
from sidecar.memory import SessionOutcome as Outcome
from sidecar.memory import Step

log = logging.getLogger("sidecar.agents.otlp")

INGEST_CHUNK = 512
"""Spans taken per hold of the lock."""
SEP = "\x1f"
"""Between a sender's name and the trace or session id it names."""
DELIVERY_BATCH = 500
"""Sessions handed to a sink that takes many at once (one intake batch in the library)."""


class OneByOne(Protocol):
    """A sink given finished sessions one at a time."""

    def report_session(
        self, session_id: str, steps: list[Step], outcome: Outcome, task_input: str | None
    ) -> None: ...


class InBatches(Protocol):
    """A sink given them in batches, answering how many it took
    (:class:`~sidecar.agents.sink.LibrarySink`)."""

    def report_sessions(self, reports: Sequence[SessionReport]) -> int: ...


ReportSink = OneByOne | InBatches
"""Where finished sessions go."""


@dataclass(frozen=True)
class Receipt:
    """What to answer one ``POST /v1/traces``, and the sessions it finished."""

    media: str
    body: bytes
    accepted: int
    rejected: int
    reports: list[SessionReport]
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
        self._traces: OrderedDict[str, SpanTree] = OrderedDict()
        self._rooted: deque[tuple[float, str, int]] = deque()
        self._serial = 0
        self._sessions = SessionBook(self.limits.sessions, clock=clock)
        self._lock = threading.Lock()
        self._trace_bytes = 0
        self._pending_bytes = 0
        self._queue: deque[SessionReport] = deque()
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

    def ingest(self, spans: Iterable[SpanRecord], source: str = "") -> list[SessionReport]:
        """Take decoded spans (as :meth:`receive` does, whatever the memory limit);
        returns the sessions this finished (a root arrived with no grace, or room was
        made)."""
        prepared = [prepare_span(s, self.limits.max_chars) for s in spans]
        return self._ingest(prepared, 0, source)

    def expire(self) -> list[SessionReport]:
        """Close the traces and sessions whose time is up."""
        now = self._clock()
        reports: list[SessionReport] = []
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

    def flush(self) -> list[SessionReport]:
        """Close everything (shutdown)."""
        with self._lock:
            reports: list[SessionReport] = []
            for trace_id in list(self._traces):
                reports += self._close(trace_id)
            reports += self._sessions.close_all()
            self._pending(reports)
            return reports

    def deliver(self, reports: Sequence[SessionReport]) -> int:
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

    def _deliver(self, batch: list[SessionReport]) -> int:
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
            one = cast(OneByOne, self.sink)  # a sink with no report_sessions
            for report in batch:
                try:
                    one.report_session(
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

    def _admit(self, size: int) -> tuple[bool, list[SessionReport]]:
        """Room for ``size`` more bytes of kept spans, made first when needed; ``False``
        when there is none to make (reports still wait for the backend)."""
        limit = self.limits.max_memory_bytes
        reports: list[SessionReport] = []
        with self._lock:
            if self._held() + size > limit:
                # down to a little under the limit, not to it: else every request sheds
                target = limit - limit // 10 - size
                self._sessions.shed_settled(self._room(target))
                while self._traces and self._held() > target:
                    self.stats.traces_shed += 1
                    reports += self._close(next(iter(self._traces)))
                if self._held() > target:
                    reports += self._sessions.shed(self._room(target))
                self._pending(reports)
            return self._held() + size <= limit, reports

    def refused(
        self, media: str, reports: list[SessionReport] | None = None, why: str = ""
    ) -> Receipt:
        """The answer to a request refused for now (503: an exporter retries it)."""
        with self._lock:
            self.stats.refused_requests += 1
        message = why or "the trace intake is over its memory limit; retry later"
        body = status_body(media, UNAVAILABLE, message)
        return Receipt(media, body, 0, 0, reports or [], 503)

    def _room(self, target: int) -> int:
        """The bytes sessions may keep for the total to come down to ``target``."""
        return max(target - (self._held() - self._sessions.bytes), 0)

    def _pending(self, reports: Iterable[SessionReport]) -> None:
        self._pending_bytes += sum(_held(r) for r in reports)

    # ---- taking spans --------------------------------------------------------------
    def _ingest(
        self, prepared: Sequence[Prepared], rejected: int, source: str = ""
    ) -> list[SessionReport]:
        reports: list[SessionReport] = []
        with self._lock:
            self.stats.rejected += rejected
        for start in range(0, len(prepared), INGEST_CHUNK):
            with self._lock:
                taken = self._ingest_chunk(prepared[start : start + INGEST_CHUNK], source)
                self._pending(taken)
            reports += taken
        return reports

    def _ingest_chunk(self, chunk: Sequence[Prepared], source: str = "") -> list[SessionReport]:
        reports: list[SessionReport] = []
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
                trace = self._traces[trace_key] = SpanTree(self._serial, source)
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
    def _make_room(self) -> list[SessionReport]:
        reports: list[SessionReport] = []
        while len(self._traces) > self.limits.max_traces:
            oldest = next(iter(self._traces))
            self.stats.traces_evicted += 1
            reports += self._close(oldest)
        return reports

    def _close(self, trace_id: str) -> list[SessionReport]:
        trace = self._traces.pop(trace_id)
        self._trace_bytes -= trace.size
        self.stats.traces_closed += 1
        calls = calls_of(trace)
        self.stats.merged_calls += sum(c.merged for c in calls)
        if not calls:
            return []
        hints = hints_of(trace)
        trace_hint = next((n.hint for n in trace.nodes.values() if n.hint), None)
        reports: list[SessionReport] = []
        own = f"trace:{trace_id}"
        keys: list[str] = []
        for call in calls:
            hint = hints.get(call.node_id) or trace_hint
            # a named session is its sender's: another's spans naming it open their own
            key = f"hint:{trace.source}{SEP}{hint}" if hint else own
            if key not in keys:
                keys.append(key)
            reports += self._sessions.record(key, call.step, trace.source, step_size(call.step))
        for key in keys:
            report = (
                self._sessions.close(key, "trace") if key == own else self._sessions.report(key)
            )
            if report is not None:
                reports.append(report)
        return reports


def _held(report: SessionReport) -> int:
    """What an undelivered report holds: its steps' size, whether or not its session is
    still open (a session that goes on shares its steps with the report only until it
    leaves the book, and the report may outlive it: counting both is the bound that
    holds)."""
    return report.size
