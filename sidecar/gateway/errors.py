"""Errors raised by the gateway: part of the library's one tree (:mod:`sidecar.errors`).

SidecarError
└── GatewayError               root of what :mod:`sidecar.gateway` raises
    ├── UpstreamSpecError      an upstream given as neither NAME=URL nor NAME=COMMAND...
    └── UpstreamUnavailable    an upstream could not be reached (at start, or since)
"""

from sidecar.errors import GatewayError, UpstreamSpecError, UpstreamUnavailable

__all__ = ["GatewayError", "UpstreamSpecError", "UpstreamUnavailable"]
