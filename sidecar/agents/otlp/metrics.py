"""The OTLP intake's ``/metrics`` series, in the Prometheus text format: what happened to
requests, spans and sessions, and what is open now."""

from __future__ import annotations

from sidecar.agents.otlp.assembler import TraceAssembler
from sidecar.agents.otlp.limits import AssemblerStats
from sidecar.agents.sessions import SessionStats

Series = tuple[str, str, str, dict[str, int | float]]
"""A counter by outcome: its name, its type, its help text, its value per outcome."""


def prometheus_lines(assembler: TraceAssembler) -> list[str]:
    lines: list[str] = []
    for name, kind, text, values in _by_outcome(assembler.stats, assembler.session_stats()):
        lines += [f"# HELP sidecar_{name} {text}", f"# TYPE sidecar_{name} {kind}"]
        lines += [f'sidecar_{name}{{outcome="{k}"}} {v}' for k, v in values.items()]
    return lines + _dropped(assembler.stats) + _open_now(assembler)


def _by_outcome(s: AssemblerStats, book: SessionStats) -> list[Series]:
    """Requests, spans and sessions, each by what became of them."""
    return [
        (
            "otlp_requests_total",
            "counter",
            "OTLP/HTTP trace requests, by what became of them.",
            {
                "received": s.requests,
                "malformed": s.malformed_bodies,
                "too_large": s.too_large_bodies,
                "refused": s.refused_requests,
            },
        ),
        (
            "otlp_spans_total",
            "counter",
            "Spans, by what became of them: kept, rejected (partial success), dropped "
            "(see otlp_dropped_spans_total) or refused (the memory limit).",
            {
                "accepted": s.accepted_spans,
                "rejected": s.rejected,
                "dropped": s.dropped_spans,
                "refused": s.refused_spans,
            },
        ),
        (
            "otlp_sessions_total",
            "counter",
            "Sessions assembled from spans, by what became of them: reported to the "
            "library and taken, refused by it, failed, ended with nothing to report, or "
            "ended early to make room.",
            {
                "reported": s.reports,
                "refused": s.refused_reports,
                "failed": s.report_failures,
                "unreported": book.unreported,
                "shed": book.shed,
            },
        ),
    ]


def _dropped(s: AssemblerStats) -> list[str]:
    """Spans dropped, one series per reason."""
    lines = [
        "# HELP sidecar_otlp_dropped_spans_total Spans dropped, by reason.",
        "# TYPE sidecar_otlp_dropped_spans_total counter",
    ]
    for reason, n in sorted(s.dropped.items()):
        label = reason.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'sidecar_otlp_dropped_spans_total{{reason="{label}"}} {n}')
    return lines


def _open_now(assembler: TraceAssembler) -> list[str]:
    """The single-valued series: two counters, and what is open now."""
    s = assembler.stats
    lines: list[str] = []
    gauges = {
        "otlp_tool_names_renamed_total": ("counter", s.renamed_tools),
        "otlp_large_requests_total": ("counter", s.large_requests),
        "otlp_open_traces": ("gauge", assembler.open_traces()),
        "otlp_open_sessions": ("gauge", assembler.open_sessions()),
        "otlp_held_bytes": ("gauge", assembler.held_bytes()),
    }
    for name, (kind, value) in gauges.items():
        lines += [f"# TYPE sidecar_{name} {kind}", f"sidecar_{name} {value}"]
    return lines
