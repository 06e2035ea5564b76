"""An MCP gateway that gives agents the failure memory with no code of their own.

``build_gateway(backend, ["shop=python shop_server.py"])`` puts an MCP server in front of
upstream MCP servers: it curates ``tools/list`` (evicted tools hidden, or a search mode
that replaces a long list), checks every ``tools/call`` against the memory before
forwarding it, relays everything else of MCP (resources, prompts, logging, progress,
sampling, elicitation), and turns what it sees into session reports.  The backend is anything
implementing :class:`GatewayBackend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sidecar.agents.gateway.errors import (
    GatewayError,
    GatewayUnavailable,
    UpstreamSpecError,
    UpstreamUnavailable,
)
from sidecar.agents.gateway.guard.backend import (
    Decision,
    GatewayBackend,
    GuardReason,
    GuardVerdict,
    Hit,
    Outcome,
    Step,
    SyncedTools,
)
from sidecar.agents.gateway.guard.contest import ContestPolicy
from sidecar.agents.gateway.proxy.upstream import Upstream
from sidecar.agents.sessions import SessionLimits

if TYPE_CHECKING:
    from sidecar.agents.gateway.server import Gateway, build_gateway

__all__ = [
    "ContestPolicy",
    "Decision",
    "Gateway",
    "GatewayBackend",
    "GatewayError",
    "GatewayUnavailable",
    "GuardReason",
    "GuardVerdict",
    "Hit",
    "Outcome",
    "SessionLimits",
    "Step",
    "SyncedTools",
    "Upstream",
    "UpstreamSpecError",
    "UpstreamUnavailable",
    "build_gateway",
]


def __getattr__(name: str) -> Any:
    # the server pulls in the MCP SDK; the value types above stay cheap to import
    if name in ("Gateway", "build_gateway"):
        from sidecar.agents.gateway import server

        return getattr(server, name)
    raise AttributeError(name)
