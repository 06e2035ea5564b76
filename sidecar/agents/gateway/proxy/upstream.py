"""Upstream MCP servers: how one is named on the command line, and the live link to it.

``NAME=URL`` (``http://`` or ``https://``) is a streamable HTTP server; ``NAME=COMMAND
ARGS...`` is started as a subprocess and spoken to over stdio, with only the SDK's safe
subset of the environment (``PATH``, ``HOME``...): the gateway's own token never reaches
an upstream.

One :class:`UpstreamLink` per upstream owns a single long-lived client session, shared by
every downstream session (a fresh upstream session per call costs a handshake each
time).  Its supervisor task connects, waits until the link breaks, and reconnects with
backoff; callers wait for it to be up again.  What the upstream sends on its own (list
changes, log messages, resource updates, sampling and elicitation requests) goes to the
link's :class:`LinkEvents`.  A first connection that fails says which upstream and why, in
one line (:class:`~sidecar.errors.UpstreamUnavailable`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from sidecar.agents.gateway.errors import UpstreamSpecError, UpstreamUnavailable
from sidecar.agents.gateway.proxy.forwarding import RawCalls
from sidecar.trust.redact import redact_text

if TYPE_CHECKING:
    import mcp_types
    from anyio.abc import TaskStatus
    from mcp import Client
    from pydantic import BaseModel

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
ResultT = TypeVar("ResultT", bound="BaseModel")
UPSTREAM_MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The largest message taken from an upstream (an HTTP event, a stdio line)."""


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
        """``NAME=URL`` or ``NAME=COMMAND ARGS...`` (shell-style quoting).  A command that
        is plain ``python`` (or ``python3``) runs this interpreter, the one the gateway
        runs in (its virtual environment), whatever ``PATH`` says."""
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
        if argv and argv[0] in ("python", "python3") and sys.executable:
            argv = (sys.executable, *argv[1:])
        return cls(name.strip(), command=argv)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        target = self.url if self.url else " ".join(self.command)
        return f"{self.name}={redact_text(target)}"


# exceptions that mean the connection itself is gone (not a tool's own failure)
def is_link_failure(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    links = (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)
    return isinstance(exc, links + _http_errors("TransportError"))


def _http_errors(name: str) -> tuple[type[BaseException], ...]:
    """``name`` of httpx and of httpx2 (the fork the MCP SDK's HTTP client uses)."""
    import importlib

    found: list[type[BaseException]] = []
    for module in ("httpx", "httpx2"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


class LinkEvents(Protocol):
    """What an :class:`UpstreamLink` tells its owner (the gateway)."""

    def tools_changed(self, upstream: str) -> None:
        """The upstream announced ``tools/list_changed``, or came back after a break."""
        ...

    async def notification(self, upstream: str, message: Any) -> None:
        """Any other server notification (logging, resources, prompts)."""
        ...

    async def server_request(self, upstream: str, method: str, params: Any) -> Any:
        """A request from the upstream to its client (sampling, elicitation): the result,
        or ``mcp.types.ErrorData``."""
        ...


class CallClocks:
    """The deadlines of one link's calls in flight.  A clock runs only while the upstream
    is being waited for: :meth:`paused` stops every clock of the link while the gateway
    waits on a client for the upstream (a sampling or elicitation request it relays),
    so a person answering an elicitation does not use up the call's timeout."""

    def __init__(self) -> None:
        self._live: dict[anyio.CancelScope, float] = {}  # scope -> budget left while paused
        self._paused = 0

    @contextlib.contextmanager
    def clock(self, timeout: float | None) -> Iterator[anyio.CancelScope]:
        """A scope cancelled once ``timeout`` seconds of upstream time have passed (none
        for ``None``); read ``cancelled_caught`` after it."""
        scope = anyio.CancelScope()
        if timeout is None:
            with scope:
                yield scope
            return
        if self._paused:
            self._live[scope] = timeout
        else:
            scope.deadline = anyio.current_time() + timeout
            self._live[scope] = math.inf
        try:
            with scope:
                yield scope
        finally:
            self._live.pop(scope, None)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        if not self._paused:
            now = anyio.current_time()
            for scope in self._live:
                self._live[scope] = scope.deadline - now
                scope.deadline = math.inf
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            if not self._paused:
                now = anyio.current_time()
                for scope, left in self._live.items():
                    if math.isfinite(left):
                        scope.deadline = now + max(left, 0.0)
                    self._live[scope] = math.inf


class CallTimedOut(Exception):
    """A relayed request had no answer within the call timeout (internal: the gateway
    answers it as a tool error or an MCP error, never raises it out)."""

    def __init__(self, upstream: str, method: str, timeout: float) -> None:
        super().__init__(f"upstream {upstream} did not answer {method} within {timeout:g} s")
        self.timeout = timeout


class UpstreamLink:
    """The live connection to one upstream."""

    def __init__(
        self,
        upstream: Upstream,
        events: LinkEvents,
        connect_timeout_s: float = 30.0,
        relay_requests: bool = True,
        raw_calls: bool = True,
    ) -> None:
        """``raw_calls``: ``tools/call`` forwarded as JSON-RPC bodies below the SDK's
        session where the protocol allows (:mod:`sidecar.agents.gateway.proxy.forwarding`)."""
        self.upstream = upstream
        self.connect_timeout_s = connect_timeout_s
        self.clocks = CallClocks()
        self._events = events
        self._relay_requests = relay_requests
        self._live: Client | None = None
        self._up = anyio.Event()
        self._broken = anyio.Event()
        self._stopping = False
        self.connects = 0
        self.capabilities: mcp_types.ServerCapabilities | None = None
        self.raw: RawCalls | None = RawCalls() if raw_calls else None

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
            error: BaseException | None = None
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
                        self.capabilities = client.server_capabilities
                        self._take_raw_calls(client)
                        self.connects += 1
                        self._broken = anyio.Event()
                        self._up.set()
                        if first:
                            first = False
                            task_status.started()
                        else:
                            self._events.tools_changed(self.name)  # it may have moved meanwhile
                        backoff = 0.2
                        await self._broken.wait()
                        scope.deadline = anyio.current_time() + 5  # bound the goodbye
            except Exception as exc:
                error = exc
            finally:
                self._up = anyio.Event()
                self._live = None
            if first and not connected:
                detail = "timed out connecting" if error is None else self._why(error)
                raise UpstreamUnavailable(self.name, detail) from error
            if not self._stopping:
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _take_raw_calls(self, client: Client) -> None:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        if self.raw is not None:
            version = client.protocol_version
            self.raw.protocol_version = version
            # a 2026-07-28 request carries the protocol's envelope: the session's
            self.raw.enabled = version not in MODERN_PROTOCOL_VERSIONS

    def _why(self, error: BaseException) -> str:
        """Why the first connection failed, in a line: the cause, not a traceback."""
        cause = _innermost(error)
        if self.upstream.url:
            target = redact_text(self.upstream.url)
            if isinstance(cause, TimeoutError):
                return f"{target} did not answer the MCP handshake in time"
            status = _http_status(cause)
            if status is not None:
                return f"{target} answered HTTP {status} (not an MCP endpoint?)"
            if _is_connect_error(cause):
                return f"cannot connect to {target} (connection refused or no such host)"
            return f"{target}: {_describe(cause)}"
        command = redact_text(" ".join(self.upstream.command))[:200]
        if isinstance(cause, FileNotFoundError):
            return f"cannot start {command!r}: command not found"
        if isinstance(cause, PermissionError):
            return f"cannot start {command!r}: permission denied"
        if _is_closed(cause):
            return (
                f"{command!r} exited or closed its output before the MCP handshake "
                "(is it an MCP server speaking stdio?)"
            )
        return f"{command!r}: {_describe(cause)}"

    def _client(self) -> Client:
        from mcp import Client, StdioServerParameters

        from sidecar.agents.gateway.proxy.http_upstream import http_transport
        from sidecar.agents.gateway.proxy.stdio import stdio_transport

        target: Any
        if self.upstream.url:
            # the SDK's client refuses an SSE event over 1 MiB by default; a relay takes
            # what its upstream sends, up to a bound (the evidence is capped anyway)
            target = http_transport(self.upstream.url, UPSTREAM_MAX_EVENT_BYTES, self.raw)
        else:
            head, *tail = self.upstream.command
            params = StdioServerParameters(
                command=head, args=list(tail), env=dict(self.upstream.env) or None
            )
            # the SDK's default error log is the sys.stderr of when it was imported,
            # which may since have been replaced by an object with no file descriptor
            target = stdio_transport(params, _errlog(), UPSTREAM_MAX_EVENT_BYTES, self.raw)
        callbacks: dict[str, Any] = {}
        if self._relay_requests:
            callbacks = {
                "sampling_callback": self._on_sampling,
                "elicitation_callback": self._on_elicitation,
            }
        return Client(
            target,
            mode=self.upstream.mode,
            message_handler=self._on_message,
            cache=None,  # a relay passes every request on; the clients cache for themselves
            **callbacks,
        )

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            return  # a transport fault: the supervisor sees the link break
        method = getattr(message, "method", None)
        if method == "notifications/tools/list_changed":
            self._events.tools_changed(self.name)
            return
        await self._events.notification(self.name, message)

    async def _on_sampling(self, _ctx: Any, params: Any) -> Any:
        with self.clocks.paused():
            return await self._events.server_request(self.name, "sampling/createMessage", params)

    async def _on_elicitation(self, _ctx: Any, params: Any) -> Any:
        with self.clocks.paused():
            return await self._events.server_request(self.name, "elicitation/create", params)

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

    async def list_tools(self, timeout: float | None = None) -> list[mcp_types.Tool]:
        """Every tool the upstream lists, all pages."""
        from mcp import types

        return [
            t
            async for t in self.pages(
                "tools/list", types.ListToolsRequest, types.ListToolsResult, "tools", timeout
            )
        ]

    async def pages(
        self,
        method: str,
        request_type: type[Any],
        result_type: type[Any],
        field: str,
        timeout: float | None = None,
    ) -> AsyncIterator[Any]:
        """The items of every page of a paginated list (``tools``, ``resources``...)."""
        from mcp import types

        cursor: str | None = None
        for _ in range(1_000):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.request(request_type(params=params), result_type, timeout=timeout)
            for item in getattr(page, field):
                yield item
            cursor = page.next_cursor
            if not cursor:
                return
        raise UpstreamUnavailable(self.name, f"{method} pagination did not end")

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: Any | None = None,
    ) -> mcp_types.CallToolResult:
        """``tools/call``: the session's own ``call_tool`` re-validates structured output
        against the tool's output schema (~0.3 ms a call here); a relay leaves that to the
        caller's client and passes the result on as it came.  Sent as a raw JSON-RPC body
        when the link takes raw calls (:mod:`sidecar.agents.gateway.proxy.forwarding`)."""
        from mcp import types

        if self.raw is not None and self.raw.ready and self._live is not None:
            return await self._raw_call(self.raw, name, arguments, meta, timeout, on_progress)

        params = types.CallToolRequestParams(name=name, arguments=arguments)
        if meta:
            params = params.model_copy(update={"meta": meta})
        return await self.request(
            types.CallToolRequest(params=params),
            types.CallToolResult,
            timeout=timeout,
            on_progress=on_progress,
        )

    async def request(
        self,
        request: Any,
        result_type: type[ResultT],
        *,
        timeout: float | None = None,
        on_progress: Any | None = None,
    ) -> ResultT:
        """Send ``request`` and return its typed result.  Raises :class:`CallTimedOut`
        after ``timeout`` seconds of upstream time (the upstream is told the request is
        cancelled), ``MCPError`` when the upstream answered with an error."""
        client = await self._connected()
        result: ResultT | None = None
        with self.clocks.clock(timeout):
            try:
                result = await client.session.send_request(
                    request, result_type, progress_callback=on_progress
                )
            except Exception as exc:
                self._fail(exc)
                raise
        if result is None:  # the clock ran out
            raise CallTimedOut(self.name, str(request.method), timeout or 0.0)
        return result

    async def _raw_call(
        self,
        raw: RawCalls,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        timeout: float | None,
        on_progress: Any | None,
    ) -> mcp_types.CallToolResult:
        from mcp import types

        result: dict[str, Any] | None = None
        with self.clocks.clock(timeout):
            try:
                result = await raw.call(name, arguments, meta, on_progress)
            except Exception as exc:
                self._fail(exc)
                raise
        if result is None:  # the clock ran out (the call was cancelled upstream)
            raise CallTimedOut(self.name, "tools/call", timeout or 0.0)
        return types.CallToolResult.model_validate(result)

    def _fail(self, exc: BaseException) -> None:
        if is_link_failure(exc):
            self._broken.set()


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _http_status(exc: BaseException) -> int | None:
    if isinstance(exc, _http_errors("HTTPStatusError")):
        return int(exc.response.status_code)  # type: ignore[attr-defined]
    return None


def _is_connect_error(exc: BaseException) -> bool:
    return isinstance(exc, (*_http_errors("ConnectError"), ConnectionRefusedError))


def _is_closed(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.error.code == CONNECTION_CLOSED
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError)


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
