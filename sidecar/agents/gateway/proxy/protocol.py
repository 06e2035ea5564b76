"""The gateway's face to MCP clients: the low-level MCP server and its handlers, and who
each request comes from.

A request comes from a *connection* (the ``Mcp-Session-Id`` session over streamable
HTTP, the process over stdio) in the handshake era; requests of the stateless 2026-07-28
era have none.  :class:`Connections` keeps what the gateway knows of each connection
(:class:`~sidecar.agents.gateway.guard.linking.ConnectionState`), and says where a request comes
from: its principal, its connection and the session it declares
(:mod:`sidecar.agents.gateway.guard.linking`).  The relay (resources, prompts, logging...) keys its
per-client state by connection.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.agents.gateway.guard.linking import (
    ConnectionState,
    Linker,
    Origin,
    declared_session,
    new_connection,
    principal_of,
    token_name,
    trace_session,
)
from sidecar.agents.gateway.proxy.relay import Relay
from sidecar.agents.gateway.proxy.security import PRINCIPAL_HEADER

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server

INSTRUCTIONS = (
    "Tools behind this gateway are checked against a memory of calls that failed in "
    "earlier sessions: a call known to fail is refused with the rule and evidence, a "
    "risky one carries a warning. Call report_outcome when you finish or give up."
)
log = logging.getLogger("sidecar.agents.gateway")
_CONNECTION_KEY = "sidecar.agents.gateway.connection"
_SESSION_ID = "mcp-session-id"
INVALID_REQUEST = -32600
NOT_YOURS = (
    "this MCP session was opened with another token: a session belongs to the token "
    "that opened it (open one of your own)"
)
Ctx = Any  # ServerRequestContext[Any, Any]


class Handlers(Protocol):
    """What the MCP server's handlers call on the gateway."""

    relay: Relay
    connections: Connections

    async def list_tools(self) -> list[types.Tool]: ...

    async def on_call(self, ctx: Ctx, name: str, arguments: dict[str, Any]) -> Any: ...

    def input_schema(self, name: str) -> dict[str, Any] | None: ...


class Connections:
    """What the gateway knows of each connection, and where a request comes from."""

    def __init__(
        self,
        linker: Linker,
        live: dict[str, Any],
        on_close: Callable[[ConnectionState], Awaitable[None]],
    ) -> None:
        self._linker = linker
        self._live = live  # connection id -> its connection, for notifications
        self._on_close = on_close
        self.crossed = 0
        """Requests refused for presenting another token's MCP session."""
        self._quiet: dict[str, str] = {}  # Mcp-Session-Id -> its connection's id

    def quiet(self, session_id: str) -> bool:
        """Whether nothing but an answer can reach the client of the MCP session
        ``session_id`` during its call: it declared neither sampling nor elicitation and
        set no log level (:mod:`sidecar.agents.gateway.proxy.json_answers`)."""
        return session_id in self._quiet

    def noisy(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """The client of ``ctx`` asked for log messages: its calls keep the stream."""
        session_id = _headers(ctx).get(_SESSION_ID)
        if session_id is not None:
            self._quiet.pop(session_id, None)

    def origin(self, ctx: ServerRequestContext[Any, Any]) -> Origin:
        headers = _headers(ctx)
        conn = self._state(ctx, headers)
        principal = conn.principal if conn is not None else _principal(ctx, headers)
        meta = ctx.meta or {}
        return Origin(
            principal, conn, declared_session(headers, meta), trace_session(headers, meta)
        )

    def relay_key(self, ctx: ServerRequestContext[Any, Any], count: bool = True) -> str:
        """The key the relay keeps this client's state under (a connection's id, or for a
        request with no connection the session it declares, else its own); with
        ``count``, the request counts as one the connection made."""
        headers = _headers(ctx)
        conn = self._state(ctx, headers)
        if conn is not None:
            if count:
                self._linker.request(conn)
            return conn.id
        meta = ctx.meta or {}
        declared = declared_session(headers, meta) or trace_session(headers, meta)
        return declared or f"call:{uuid.uuid4().hex}"

    def _state(
        self, ctx: ServerRequestContext[Any, Any], headers: Mapping[str, str]
    ) -> ConnectionState | None:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        # the SDK keeps no public handle on the connection; only this line reads it
        connection = getattr(ctx.session, "_connection", None)
        if connection is None or connection.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        state = connection.state.get(_CONNECTION_KEY)
        if state is None:
            state = new_connection(_principal(ctx, headers))
            connection.state[_CONNECTION_KEY] = state
            connection.exit_stack.push_async_callback(self._closed, state)
            self._live[state.id] = connection
            self._note_quiet(connection, headers, state)
        assert isinstance(state, ConnectionState)
        if "authorization" in headers and _principal(ctx, headers) != state.principal:
            # an MCP session belongs to the token that opened it: another token that
            # presents its id (a value any client may copy) touches nothing of it
            from mcp.shared.exceptions import MCPError

            self.crossed += 1
            log.warning(
                '{"event": "session_refused", "why": "opened with another token", "token": %s}',
                json.dumps(token_name(_principal(ctx, headers)) or "(the home's token)"),
            )
            raise MCPError(INVALID_REQUEST, NOT_YOURS)
        return state

    def _note_quiet(
        self, connection: Any, headers: Mapping[str, str], state: ConnectionState
    ) -> None:
        session_id = headers.get(_SESSION_ID)
        params = getattr(connection, "client_params", None)
        caps = getattr(params, "capabilities", None)
        if session_id and caps is not None and caps.sampling is None and caps.elicitation is None:
            self._quiet[session_id] = state.id

    async def _closed(self, state: ConnectionState) -> None:
        self._live.pop(state.id, None)
        for session_id in [s for s, c in self._quiet.items() if c == state.id]:
            del self._quiet[session_id]
        await self._on_close(state)


def _headers(ctx: ServerRequestContext[Any, Any]) -> Mapping[str, str]:
    headers = getattr(ctx.request, "headers", None)
    return headers if isinstance(headers, Mapping) else {}


def _principal(ctx: ServerRequestContext[Any, Any], headers: Mapping[str, str]) -> str:
    connection = getattr(ctx.session, "_connection", None)
    params = getattr(connection, "client_params", None)
    name = getattr(getattr(params, "client_info", None), "name", None)
    return principal_of(
        headers.get("authorization"),
        name if isinstance(name, str) else None,
        headers.get(PRINCIPAL_HEADER.decode(), ""),
    )


def build_server(handlers: Handlers, name: str) -> Server[Any]:
    """The low-level MCP server whose handlers call ``handlers``."""
    from mcp import types

    relay = handlers.relay
    lists = relay.listings
    connections = handlers.connections

    async def on_list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> Any:
        connections.relay_key(ctx)
        return types.ListToolsResult(tools=await handlers.list_tools())

    async def on_call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> Any:
        return await handlers.on_call(ctx, params.name, params.arguments or {})

    def keyed(method: Any, with_params: bool = True) -> Any:
        async def handler(ctx: Ctx, params: Any) -> Any:
            key = connections.relay_key(ctx)
            return await (method(key, ctx, params) if with_params else method(key, ctx))

        return handler

    async def on_set_level(ctx: Ctx, params: types.SetLevelRequestParams) -> Any:
        connections.noisy(ctx)
        return await relay.set_level(connections.relay_key(ctx), ctx, params.level)

    server = _server_class(relay)(
        name,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=keyed(lists.list_resources, with_params=False),
        on_list_resource_templates=keyed(lists.list_templates, with_params=False),
        on_read_resource=keyed(lists.read_resource),
        on_subscribe_resource=keyed(lists.subscribe),
        on_unsubscribe_resource=keyed(lists.unsubscribe),
        on_list_prompts=keyed(lists.list_prompts, with_params=False),
        on_get_prompt=keyed(lists.get_prompt),
        on_completion=keyed(lists.complete),
        get_tool_input_schema=handlers.input_schema,
    )
    # registered here, not as on_set_logging_level, which warns that 2026-07-28 drops
    # logging: the handshake-era clients the gateway serves still use it
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, on_set_level)
    return server


def _server_class(relay: Relay) -> type[Server[Any]]:
    from mcp.server.lowlevel import NotificationOptions, Server

    class _Server(Server[Any]):
        def create_initialization_options(self, *args: Any, **kwargs: Any) -> Any:
            if not args and "notification_options" not in kwargs:
                kwargs["notification_options"] = NotificationOptions(
                    tools_changed=True, resources_changed=True, prompts_changed=True
                )
            return super().create_initialization_options(*args, **kwargs)

        def get_capabilities(self, *args: Any, **kwargs: Any) -> Any:
            # what the gateway can relay, cut to what its upstreams offer
            return relay.shape(super().get_capabilities(*args, **kwargs))

    return _Server
