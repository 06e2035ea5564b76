"""The MCP transport at ``/mcp``, built once the server listens.

Importing the ``mcp`` SDK's server and registering the tools is most of what a start
imports (about a second on a small machine), and neither ``/readyz`` nor a lookup needs
it. So the app's lifespan builds the transport in a worker thread after the server has
started, then runs its session manager while the app serves. A request to ``/mcp`` that
arrives before the transport is built waits for it rather than being refused: a client
that connects the moment the server is ready gets a slower first answer, not an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from sidecar.shells.api.gate import ASGIApp, Receive, Scope, Send, envelope
from sidecar.trust.redact import redact_text

if TYPE_CHECKING:
    from mcp.server import MCPServer

log = logging.getLogger("sidecar.service")


class McpMount:
    """An ASGI app that forwards to the MCP transport ``build`` returns (the server and
    its streamable HTTP app), once :meth:`serve` has built it."""

    def __init__(self, build: Callable[[], tuple[MCPServer, ASGIApp]]) -> None:
        self._build = build
        self._ready: anyio.Event | None = None
        self._app: ASGIApp | None = None
        self._failure = ""

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Build the transport and run its session manager until cancelled (started in
        the lifespan's task group; requests wait from the moment it starts)."""
        ready = self._ready = anyio.Event()
        task_status.started()
        try:
            try:
                server, app = await anyio.to_thread.run_sync(self._build)
            except Exception as exc:  # the API serves on; /mcp says why it cannot
                self._failure = redact_text(f"{type(exc).__name__}: {exc}")[:500]
                log.error(json.dumps({"event": "mcp_failed", "error": self._failure}))
                return
            async with server.session_manager.run():
                self._app = app
                ready.set()
                await anyio.sleep_forever()
        finally:
            self._app = None
            if not self._failure:
                self._failure = "the server is stopping"
            ready.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ready = self._ready
        if ready is None:
            await envelope(
                503, "mcp_unavailable", "the MCP transport runs only while the app's lifespan does"
            )(scope, receive, send)
            return
        await ready.wait()
        app = self._app
        if app is None:
            await envelope(
                503, "mcp_unavailable", f"the MCP transport is not available: {self._failure}"
            )(scope, receive, send)
            return
        await app(scope, receive, send)
