"""Process metrics in the Prometheus text format (no client library needed)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self._latency: dict[str, list[int]] = defaultdict(lambda: [0] * (len(BUCKETS) + 1))
        self._latency_sum: dict[str, float] = defaultdict(float)
        self._counters: dict[str, int] = defaultdict(int)
        self._sources: list[Callable[[], list[str]]] = []

    def add_source(self, lines: Callable[[], list[str]]) -> None:
        """Series of another part of the service (the trace intake), rendered as they
        are after this object's own."""
        self._sources.append(lines)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(method, route, status)] += 1
            buckets = self._latency[route]
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    buckets[i] += 1
            buckets[-1] += 1
            self._latency_sum[route] += seconds

    def inc(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counters[name] += by

    def render(self, gauges: Callable[[], dict[str, dict[str, float]]]) -> str:
        lines = [
            "# HELP sidecar_http_requests_total HTTP requests by method, route and status.",
            "# TYPE sidecar_http_requests_total counter",
        ]
        with self._lock:
            for (method, route, status), n in sorted(self._requests.items()):
                lines.append(
                    f'sidecar_http_requests_total{{method="{method}",route="{route}",'
                    f'status="{status}"}} {n}'
                )
            lines += [
                "# HELP sidecar_http_request_seconds HTTP request latency.",
                "# TYPE sidecar_http_request_seconds histogram",
            ]
            for route, buckets in sorted(self._latency.items()):
                for bound, n in zip(BUCKETS, buckets, strict=False):
                    lines.append(
                        f'sidecar_http_request_seconds_bucket{{route="{route}",le="{bound}"}} {n}'
                    )
                total = buckets[-1]
                lines.append(
                    f'sidecar_http_request_seconds_bucket{{route="{route}",le="+Inf"}} {total}'
                )
                lines.append(
                    f'sidecar_http_request_seconds_sum{{route="{route}"}} '
                    f"{self._latency_sum[route]:.6f}"
                )
                lines.append(f'sidecar_http_request_seconds_count{{route="{route}"}} {buckets[-1]}')
            for name, n in sorted(self._counters.items()):
                lines += [f"# TYPE sidecar_{name}_total counter", f"sidecar_{name}_total {n}"]
        for name, series in sorted(gauges().items()):
            lines.append(f"# TYPE sidecar_{name} gauge")
            for labels, value in sorted(series.items()):
                lines.append(f"sidecar_{name}{labels} {value}")
        for source in self._sources:
            lines += source()
        return "\n".join(lines) + "\n"
