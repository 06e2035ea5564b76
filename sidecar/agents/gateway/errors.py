"""Errors raised by the gateway: part of the library's one tree (:mod:`sidecar.errors`).

SidecarError
└── GatewayError                root of what :mod:`sidecar.agents.gateway` raises (exit 11)
    ├── UpstreamSpecError       an upstream given as neither NAME=URL nor NAME=COMMAND...
    └── GatewayUnavailable      the gateway cannot serve (exit 11, never 3: 3 is "blocked")
        └── UpstreamUnavailable an upstream could not be reached (at start, or since)
"""

from sidecar.errors import GatewayError, GatewayUnavailable, UpstreamSpecError, UpstreamUnavailable

__all__ = ["GatewayError", "GatewayUnavailable", "UpstreamSpecError", "UpstreamUnavailable"]
