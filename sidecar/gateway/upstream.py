"""Upstream MCP servers: how one is named on the command line, and the live link to it.

``NAME=URL`` (``http://`` or ``https://``) is a streamable HTTP server; ``NAME=COMMAND
ARGS...`` is started as a subprocess and spoken to over stdio, with only the SDK's safe
subset of the environment (``PATH``, ``HOME``...): the gateway's own token never reaches
an upstream.

One :class:`UpstreamLink` per upstream owns a single long-lived client session, shared by
every downstream session (a fresh upstream session per call costs a handshake each
time).  Its supervisor task connects, waits until the link breaks, and reconnects with
backoff; callers wait for it to be up again.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from sidecar.gateway.errors import UpstreamSpecError, UpstreamUnavailable
from sidecar.redact import redact_text

if TYPE_CHECKING:
    import mcp_types
    from anyio.abc import TaskStatus
    from mcp import Client

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@dataclass(frozen=True)
class Upstream:
    name: str
    url: str | None = None
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables for a stdio upstream (over the SDK's safe subset)."""
    mode: str = "legacy"
    """The protocol era spoken upstream: ``legacy`` (the initialize handshake: one
    stateful session, and the upstream can announce ``tools/list_changed``), or ``auto``
    / a version to let the SDK negotiate (2026-07-28 sessions are stateless and deliver
    list changes only to subscribers, so changes are then seen by polling)."""

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise UpstreamSpecError(
                f"upstream name {self.name!r}: letters, digits, '_' and '-' only, at most 64"
            )
        if (self.url is None) == (not self.command):
            raise UpstreamSpecError(f"upstream {self.name}: give exactly one of a URL or a command")

    @classmethod
    def parse(cls, spec: str) -> Upstream:
        """``NAME=URL`` or ``NAME=COMMAND ARGS...`` (shell-style quoting)."""
        name, sep, rest = spec.partition("=")
        rest = rest.strip()
        if not sep or not name.strip() or not rest:
            raise UpstreamSpecError(f"upstream {spec!r}: expected NAME=URL or NAME=COMMAND ARGS...")
        if re.match(r"https?://", rest):
            return cls(name.strip(), url=rest)
        try:
            argv = tuple(shlex.split(rest))
        except ValueError as exc:
            raise UpstreamSpecError(f"upstream {name}: {exc}") from exc
        return cls(name.strip(), command=argv)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        target = self.url if self.url else " ".join(self.command)
        return f"{self.name}={redact_text(target)}"


# exceptions that mean the connection itself is gone (not a tool's own failure)
def is_link_failure(exc: BaseException) -> bool:
    import httpx
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(
        exc, anyio.ClosedResourceError | anyio.BrokenResourceError | httpx.TransportError | OSError
    )


class UpstreamLink:
    """The live connection to one upstream."""

    def __init__(
        self,
        upstream: Upstream,
        on_tools_changed: Callable[[str], None],
        connect_timeout_s: float = 30.0,
        call_timeout_s: float | None = None,
    ) -> None:
        self.upstream = upstream
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self._on_tools_changed = on_tools_changed
        self._live: Client | None = None
        self._up = anyio.Event()
        self._broken = anyio.Event()
        self._stopping = False
        self.connects = 0

    @property
    def name(self) -> str:
        return self.upstream.name

    # -- supervisor
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect (failing fast the first time), then keep the link up until cancelled."""
        first = True
        backoff = 0.2
        while not self._stopping:
            connected = False
            error: Exception | None = None
            try:
                # the client's own scopes must nest inside this one, so the connect
                # deadline is a scope around the whole connection, lifted once it is up
                with anyio.CancelScope(
                    deadline=anyio.current_time() + self.connect_timeout_s
                ) as scope:
                    async with self._client() as client:
                        scope.deadline = math.inf
                        connected = True
                        self._live = client
                        self.connects += 1
                        self._broken = anyio.Event()
                        self._up.set()
                        if first:
                            first = False
                            task_status.started()
                        else:
                            self._on_tools_changed(self.name)  # it may have moved meanwhile
                        backoff = 0.2
                        await self._broken.wait()
                        scope.deadline = anyio.current_time() + 5  # bound the goodbye
            except Exception as exc:
                error = exc
            finally:
                self._up = anyio.Event()
                self._live = None
            if first and not connected:
                detail = "timed out connecting" if error is None else _describe(error)
                raise UpstreamUnavailable(self.name, detail) from error
            if not self._stopping:
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _client(self) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        target: Any
        if self.upstream.url:
            target = self.upstream.url
        else:
            head, *tail = self.upstream.command
            params = StdioServerParameters(
                command=head, args=list(tail), env=dict(self.upstream.env) or None
            )
            # the SDK's default error log is the sys.stderr of when it was imported,
            # which may since have been replaced by an object with no file descriptor
            target = stdio_client(params, errlog=_errlog())
        return Client(
            target,
            mode=self.upstream.mode,
            message_handler=self._on_message,
            read_timeout_seconds=self.call_timeout_s,
        )

    async def _on_message(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self._on_tools_changed(self.name)

    def stop(self) -> None:
        self._stopping = True
        self._broken.set()

    # -- use
    async def _connected(self) -> Client:
        client = self._live
        if client is not None:
            return client
        with anyio.move_on_after(self.connect_timeout_s):
            await self._up.wait()
        if self._live is None:
            raise UpstreamUnavailable(self.name, "not connected")
        return self._live

    async def list_tools(self) -> list[mcp_types.Tool]:
        """Every tool the upstream lists, all pages, bypassing the client's cache."""
        client = await self._connected()
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            for _ in range(1_000):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    return tools
        except Exception as exc:
            self._fail(exc)
            raise
        raise UpstreamUnavailable(self.name, "tools/list pagination did not end")

    async def call_tool(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> mcp_types.CallToolResult:
        from mcp import types

        client = await self._connected()
        params = types.CallToolRequestParams(name=name, arguments=arguments)
        if meta:
            params = params.model_copy(update={"meta": meta})
        request = types.CallToolRequest(params=params)
        try:
            # the session's own call_tool re-validates structured output against the
            # tool's output schema (~0.3 ms a call here); a relay leaves that to the
            # caller's client and passes the result on as it came
            return await client.session.send_request(request, types.CallToolResult)
        except Exception as exc:
            self._fail(exc)
            raise

    def _fail(self, exc: BaseException) -> None:
        if is_link_failure(exc):
            self._broken.set()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out connecting"
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    text = str(exc) or type(exc).__name__
    return redact_text(text)[:300]


def _errlog() -> Any:
    """Where an upstream's stderr goes: this process's, if it has a real descriptor."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (OSError, ValueError, AttributeError):
            continue
    return open(os.devnull, "w")
