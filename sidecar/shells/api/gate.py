"""The outer ASGI layer of the HTTP service.

In this order: it times every request for ``/metrics`` (labelled by route template,
so no request can add a series), refuses bodies over the limit with 413 before reading
them whole (it reads and drops up to :data:`DRAIN_BYTES` of such a body first, so that a
client that sends its whole body before reading the answer, as Python's ``urllib`` and
``httpx`` do, reads the 413 instead of a broken pipe), requires the bearer token on
every route but the public ones (compared in constant time, never logged), and sends
``/mcp`` to the MCP transport (which checks ``Origin`` and ``Host`` against loopback).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse

from sidecar.errors import BodyTooLarge
from sidecar.metrics import Metrics
from sidecar.shells.operations import BY_NAME, public_paths
from sidecar.trust.principals import PRINCIPAL, Principal, Principals
from sidecar.trust.redact import redact_text

log = logging.getLogger("sidecar.service")
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PUBLIC, PUBLIC_FOLDERS = public_paths()
"""Routes served without the token, as :mod:`sidecar.shells.operations` declares them:
liveness and readiness (for probes, which send none: readiness shows its checks only to
a caller with a token), and the API's documentation (no data), with the folder of its
scripts and styles.  Every other path needs a token; the role a route needs beyond one
is the route's own dependency (:func:`sidecar.shells.api.deps.route`), read from the
same declaration."""


_MCP_ROUTE = BY_NAME["mcp_http"].http
assert _MCP_ROUTE is not None
MCP_PATH = _MCP_ROUTE.path
"""Where the MCP transport is served (every method of streamable HTTP, and the paths
under it), as declared."""


def is_mcp(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


CONSOLE = "/console"
"""The operator's console: its pages check their own session cookie, not a bearer token
(:mod:`sidecar.shells.console`)."""


def is_public(path: str) -> bool:
    """Whether ``path`` is served without the token (a path in a public folder may not
    climb out of it: the router never sees it as another route, and it is not even
    asked)."""
    if path in PUBLIC:
        return True
    if path == CONSOLE or path.startswith(CONSOLE + "/"):
        return ".." not in path.split("/")
    return path.startswith(PUBLIC_FOLDERS) and ".." not in path.split("/")


UNMATCHED = "(unmatched)"
DRAIN_BYTES = 32 * 1_048_576
"""Bytes of a refused body read and dropped before the 413 is sent; past them (or
:data:`DRAIN_S`) the connection is closed after the answer."""
DRAIN_S = 10.0


def envelope(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


class Gate:
    def __init__(
        self,
        api: ASGIApp,
        mcp: ASGIApp | None,
        principals: Principals,
        limit: int,
        metrics: Metrics,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        """``limits``: body limits of their own for some paths (the OTLP intake)."""
        self.api = api
        self.mcp = mcp
        self.principals = principals
        self.limit = limit
        self.limits = dict(limits or {})
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)  # lifespan: runs the MCP session manager
            return
        started = time.perf_counter()
        status_box = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_box[0] = message["status"]
            await send(message)

        path = scope.get("path", "")
        try:
            await self._handle(scope, receive, send_status, path)
        finally:
            seconds = time.perf_counter() - started
            route = self.route_label(scope)
            self.metrics.observe(scope.get("method", ""), route, status_box[0], seconds)
            log.info(
                json.dumps(
                    {
                        "event": "request",
                        "method": scope.get("method"),
                        "path": redact_text(path)[:256],
                        "status": status_box[0],
                        "ms": round(seconds * 1000, 2),
                    }
                )
            )

    def route_label(self, scope: Scope) -> str:
        """The template of the route that served the request (the router leaves it in
        the scope: ``/v1/tools/{tool_id}/restore``), or one shared label: a bounded set,
        whatever paths clients send."""
        path = scope.get("path", "")
        if self.mcp is not None and is_mcp(path):
            return MCP_PATH
        template = getattr(scope.get("route"), "path", None)
        return template if isinstance(template, str) else UNMATCHED

    async def _handle(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        if not is_public(path):
            refusal, principal = self._refusal(headers.get("authorization"))
            if refusal is not None:
                await envelope(401, "unauthorized", refusal, {"WWW-Authenticate": "Bearer"})(
                    scope, receive, send
                )
                return
            # who asks: the routes and the MCP tools read it (the source of what it reports)
            scope.setdefault("state", {})[PRINCIPAL] = principal
        elif headers.get("authorization"):
            # a public route may show more to a caller with a token (readiness's checks)
            _refusal, principal = self._refusal(headers.get("authorization"))
            if principal is not None:
                scope.setdefault("state", {})[PRINCIPAL] = principal
        limit = self.limits.get(path, self.limit)
        length = headers.get("content-length")
        if length is not None:
            try:
                too_big = int(length) > limit
            except ValueError:
                too_big = True
            if too_big:
                await self._too_large(scope, receive, send, limit)
                return
        target = self.mcp if self.mcp is not None and is_mcp(path) else self.api
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            # read at most `limit` bytes (chunked bodies have no Content-Length), then
            # replay them to the app
            body, complete = await _read_capped(receive, limit)
            if not complete:
                await self._too_large(scope, receive, send, limit)
                return
            receive = _replay(body, receive)
        await target(scope, receive, send)

    def _refusal(self, header: bytes | None) -> tuple[str | None, Principal | None]:
        """Why the request is not authorized (missing or wrong token), or the principal
        its token names."""
        if not header:
            return (
                # not "Authorization: Bearer <token>": a client's redaction masks "Bearer"
                "no bearer token was sent: the Authorization header must be `Bearer <token>` "
                "(the token is in the sidecar home's `token` file, or $SIDECAR_TOKEN, or a "
                "named token)"
            ), None
        scheme, _, value = header.partition(b" ")
        if scheme.lower() != b"bearer":
            return "the Authorization header must be `Bearer <token>`", None
        principal = self.principals.authenticate(value.strip())
        if principal is None:
            return "the bearer token is wrong (it matches none of this sidecar's tokens)", None
        return None, principal

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        await _drain(receive)
        message = f"request body over {limit} bytes"
        response = envelope(
            BodyTooLarge.status, BodyTooLarge.code, message, {"Connection": "close"}
        )
        await response(scope, _disconnected, send)


async def _drain(receive: Receive) -> None:
    """Read and drop what is left of a refused body, up to :data:`DRAIN_BYTES` within
    :data:`DRAIN_S`."""
    import anyio

    read = 0
    with anyio.move_on_after(DRAIN_S):
        while read <= DRAIN_BYTES:
            message = await receive()
            if message["type"] != "http.request":
                return
            read += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


async def _read_capped(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, or ``complete=False`` as soon as it passes ``limit``."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(parts), True  # client went away; the app will see it
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return b"", False
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts), True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # e.g. http.disconnect

    return replay
