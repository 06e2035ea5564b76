"""The OTLP intake's bounds (:class:`AssemblerLimits`) and its counters
(:class:`AssemblerStats`): what one request, one trace, the open sessions and the
intake's memory may hold, and what became of every request, span and session."""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecar.agents.otlp.spans import MAX_SPANS
from sidecar.agents.otlp.tools import DEFAULT_MAX_CHARS
from sidecar.agents.sessions import SessionLimits

MIB = 1_048_576


@dataclass(frozen=True)
class AssemblerLimits:
    max_traces: int = 10_000
    max_spans_per_trace: int = 2_000
    max_spans_per_request: int = MAX_SPANS
    root_grace_s: float = 5.0
    trace_idle_s: float = 30.0
    sessions: SessionLimits = field(default_factory=SessionLimits)
    """The open sessions' bounds (``idle_s``: how long a conversation stays open for its
    later traces after its last one)."""
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
