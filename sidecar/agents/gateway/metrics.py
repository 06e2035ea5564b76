"""The gateway's counters in the Prometheus text format, at ``GET /metrics`` (behind the
bearer token, as every route of the gateway): what it forwarded, refused and warned,
its sessions, and how soon what it saw became evidence."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

COUNTERS = (
    ("calls", "tools/call requests"),
    ("forwarded", "calls forwarded upstream"),
    ("blocked", "calls refused by the memory"),
    ("warned", "calls forwarded with the memory's warning"),
    ("contest_samples", "refused calls forwarded as a sample"),
    ("timeouts", "calls the upstream did not answer in time"),
    ("reports", "sessions sent to the memory"),
    ("report_failures", "sessions the memory could not take"),
    ("evidence_reports", "failing calls sent to the memory before their session ended"),
    ("crossed_sessions", "requests refused for presenting another token's MCP session"),
)
SESSIONS = (
    ("opened", "agent sessions opened"),
    ("reported", "agent sessions reported at their end"),
    ("at_failure", "reports sent as a call failed"),
    ("settled", "reports sent as a session fell quiet"),
    ("unlinked", "sessions of one call nothing tied to others"),
)


def lines(snapshot: Mapping[str, Any]) -> str:
    """``snapshot`` (:meth:`~sidecar.agents.gateway.server.Gateway.snapshot`) as text."""
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float) -> None:
        out.extend(
            (
                f"# HELP sidecar_gateway_{name} {help_}.",
                f"# TYPE sidecar_gateway_{name} {kind}",
                f"sidecar_gateway_{name} {value:g}",
            )
        )

    for key, help_ in COUNTERS:
        metric(f"{key}_total", "counter", help_, float(snapshot.get(key, 0)))
    sessions = snapshot.get("sessions", {})
    for key, help_ in SESSIONS:
        metric(f"sessions_{key}_total", "counter", help_, float(sessions.get(key, 0)))
    metric("open_sessions", "gauge", "agent sessions open now", float(snapshot["open_sessions"]))
    metric(
        "evidence_wait_seconds_total",
        "counter",
        "seconds failing calls' evidence waited from the call to the memory, in all",
        float(snapshot.get("evidence_wait_s", 0.0)),
    )
    metric(
        "evidence_wait_seconds_max",
        "gauge",
        "the longest a failing call's evidence waited for the memory",
        float(snapshot.get("evidence_wait_max_s", 0.0)),
    )
    return "\n".join(out) + "\n"


def route(snapshot: Callable[[], Mapping[str, Any]]) -> Any:
    """A Starlette route serving :func:`lines` of ``snapshot()``."""
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def metrics(_request: Request) -> PlainTextResponse:
        return PlainTextResponse(lines(snapshot()), media_type="text/plain; version=0.0.4")

    return Route("/metrics", metrics, methods=["GET"])
