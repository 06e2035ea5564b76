"""A client that opens a new MCP session for every call, as ``langchain-mcp-adapters``
does by default, with or without trace context of its own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tests.agents.gateway.conftest import TOKEN


@contextlib.asynccontextmanager
async def _client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


_TRACER: Any = None


def root_span(name: str) -> contextlib.AbstractContextManager[Any]:
    """A root span of a tracer of this module's own (no global provider: the ``mcp``
    client propagates the current context, whichever provider made it)."""
    global _TRACER
    if _TRACER is None:
        from opentelemetry.sdk.trace import TracerProvider

        _TRACER = TracerProvider().get_tracer("agent")
    return _TRACER.start_as_current_span(name)  # type: ignore[no-any-return]


async def call(url: str, tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
    """One call in an MCP session of its own, as a stateless client makes it (in a
    trace of its own, with ``traced="call"``)."""
    headers = kw.pop("headers", None)
    traced = kw.pop("traced", "no")
    with root_span(f"call {tool}") if traced == "call" else contextlib.nullcontext():
        async with _client(url, headers) as session:
            return await session.call_tool(tool, arguments, **kw)
