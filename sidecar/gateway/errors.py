"""Errors raised by the gateway.

SidecarError
└── GatewayError               root of what :mod:`sidecar.gateway` raises
    ├── UpstreamSpecError      an upstream given as neither NAME=URL nor NAME=COMMAND...
    └── UpstreamUnavailable    an upstream could not be reached (at start, or since)
"""

from __future__ import annotations

from sidecar.errors import SidecarError


class GatewayError(SidecarError):
    code = "gateway"


class UpstreamSpecError(GatewayError, ValueError):
    code = "upstream_spec"


class UpstreamUnavailable(GatewayError):
    code = "upstream_unavailable"

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"upstream {name} unavailable: {detail}")
        self.name = name
