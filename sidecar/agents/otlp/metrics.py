"""The OTLP intake's ``/metrics`` series, in the Prometheus text format: what happened to
requests, spans and sessions, and what is open now."""

from __future__ import annotations

from sidecar.agents.otlp.assembler import TraceAssembler


def prometheus_lines(assembler: TraceAssembler) -> list[str]:
    s = assembler.stats
    book = assembler.session_stats()
    series: list[tuple[str, str, str, dict[str, int | float]]] = [
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
    lines: list[str] = []
    for name, kind, text, values in series:
        lines += [f"# HELP sidecar_{name} {text}", f"# TYPE sidecar_{name} {kind}"]
        lines += [f'sidecar_{name}{{outcome="{k}"}} {v}' for k, v in values.items()]
    lines += [
        "# HELP sidecar_otlp_dropped_spans_total Spans dropped, by reason.",
        "# TYPE sidecar_otlp_dropped_spans_total counter",
    ]
    for reason, n in sorted(s.dropped.items()):
        label = reason.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'sidecar_otlp_dropped_spans_total{{reason="{label}"}} {n}')
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
