"""The gateway's HTTP guard: the same rules as the sidecar's own ``/mcp`` route.

Every HTTP request needs ``Authorization: Bearer <token>`` (compared in constant time,
never logged); the MCP transport refuses a ``Host`` or ``Origin`` that is not loopback
(DNS-rebinding protection).  Binding a non-loopback address without a token is refused
by :meth:`~sidecar.agents.gateway.server.Gateway.serve_http`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from sidecar.trust.principals import Principals

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def loopback_only() -> Any:
    """``TransportSecuritySettings`` that accept only loopback ``Host`` and ``Origin``."""
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(LOOPBACK_HOSTS),
        allowed_origins=list(LOOPBACK_ORIGINS),
    )


PRINCIPAL_HEADER = b"x-sidecar-principal"
"""The name of the named token a request was authenticated with, set by the gate (one
a client sends is dropped): whose sessions the gateway reports them as."""


class BearerGate:
    """Refuses every HTTP request without a bearer token it knows with 401: the home's
    token, or a named token (``principals``), whose name it passes on
    (:data:`PRINCIPAL_HEADER`); lifespan and other scopes pass through."""

    def __init__(
        self, app: ASGIApp, token: str | None, principals: Principals | None = None
    ) -> None:
        if not token and not (principals and len(principals)):
            raise ValueError("a bearer token is required")
        self.app = app
        self._token = token.encode() if token else None
        self._principals = principals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name: str | None = ""
        if scope["type"] == "http":
            headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != PRINCIPAL_HEADER]
            scope = {**scope, "headers": headers}
            name = self._authorized(scope)
            if name:
                scope["headers"] = [*headers, (PRINCIPAL_HEADER, name.encode())]
        if scope["type"] == "http" and name is None:
            body = json.dumps(
                {
                    "error": {
                        "code": "unauthorized",
                        "message": "a bearer token is required (Authorization: Bearer <token>)",
                    }
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b"Bearer"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> str | None:
        """The caller: ``""`` for the home's token, a named token's name, ``None`` for
        anyone else."""
        header = next(
            (v for k, v in scope.get("headers", []) if k.lower() == b"authorization"), b""
        )
        scheme, _, value = header.partition(b" ")
        value = value.strip()
        if scheme.lower() != b"bearer" or not value:
            return None
        if self._token is not None and hmac.compare_digest(value, self._token):
            return ""
        found = self._principals.authenticate(value) if self._principals else None
        return found.name if found is not None else None
