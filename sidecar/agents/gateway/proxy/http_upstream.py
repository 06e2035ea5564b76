"""The transport to a streamable HTTP upstream: the SDK's, with the link's raw calls
(:mod:`sidecar.agents.gateway.proxy.forwarding`) posted on the same HTTP client and the same
MCP session.

:func:`http_transport` is the SDK's ``streamable_http_client`` with a handle kept on its
transport, whose session id and negotiated protocol version a raw call's POST carries.
A raw call's answer is read here: a JSON body, or an event stream whose events are the
call's answer, its progress, or anything else the upstream sends during it (a log
message, a sampling request), which goes on to the session as the SDK's transport would
hand it.  The HTTP statuses are answered as the SDK answers them (a JSON-RPC error in a
non-2xx body as it came, a 404 in a session as "Session terminated"...); a stream that
ends before the answer fails the call as a closed connection (the SDK would try to
resume such a stream; a raw call is not resumed).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

from sidecar.agents.gateway.proxy.forwarding import RawCalls, parse, session_message

_JSON = "application/json"
_SSE = "text/event-stream"


@contextlib.asynccontextmanager
async def http_transport(
    url: str, max_event_size: int, raw: RawCalls | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable HTTP client transport to ``url``, yielding its (read, write)
    message streams; ``raw``'s calls go out on the same client and session."""
    from mcp.client.streamable_http import StreamableHTTPTransport
    from mcp.shared._compat import resync_tracer
    from mcp.shared._context_streams import create_context_streams
    from mcp.shared._httpx_utils import create_mcp_http_client
    from mcp.shared.message import SessionMessage

    transport = StreamableHTTPTransport(url, max_sse_event_size=max_event_size)
    async with contextlib.AsyncExitStack() as stack:
        client = await stack.enter_async_context(create_mcp_http_client())
        read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
        write_stream, write_reader = create_context_streams[SessionMessage](0)
        async with (
            read_writer,
            read_stream,
            write_stream,
            write_reader,
            anyio.create_task_group() as tg,
        ):

            def start_get_stream() -> None:
                tg.start_soon(transport.handle_get_stream, client, read_writer)

            tg.start_soon(
                transport.post_writer,
                client,
                write_reader,
                read_writer,
                write_stream,
                start_get_stream,
                tg,
            )
            poster = _RawPoster(client, transport, read_writer, raw) if raw is not None else None
            try:
                yield read_stream, write_stream
            finally:
                if poster is not None:
                    poster.close()
                if transport.session_id:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        await transport.terminate_session(client)
                tg.cancel_scope.cancel()
        await resync_tracer()


class _RawPoster:
    """Posts the raw calls of one link and reads their answers."""

    def __init__(self, client: Any, transport: Any, to_session: Any, raw: RawCalls) -> None:
        self._client, self._transport, self._to_session = client, transport, to_session
        self._raw = raw
        raw.attach(self.post, self.notify)

    def close(self) -> None:
        self._raw.detach("the upstream link was closed")

    def _headers(self) -> dict[str, str]:
        from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

        headers: dict[str, str] = self._transport._prepare_headers()
        if self._raw.protocol_version:
            headers[MCP_PROTOCOL_VERSION_HEADER] = self._raw.protocol_version
        return headers

    async def notify(self, body: bytes) -> None:
        from mcp.shared._httpx_utils import request_within_origin

        await request_within_origin(
            self._client, "POST", self._transport.url, content=body, headers=self._headers()
        )

    async def post(self, rid: str, body: bytes) -> None:
        """POST one raw call and hand its answer (and what comes with it) on."""
        from mcp.shared._httpx_utils import stream_within_origin

        async with stream_within_origin(
            self._client, "POST", self._transport.url, content=body, headers=self._headers()
        ) as response:
            kind = response.headers.get("content-type", "").lower()
            if response.status_code in (200, 201) and kind.startswith(_SSE):
                await self._events(rid, response)
            elif response.status_code in (200, 201) and kind.startswith(_JSON):
                await self._answer(rid, await response.aread())
            else:
                await self._failed(rid, response, kind)

    async def _events(self, rid: str, response: Any) -> None:
        from httpx2 import EventSource

        size = self._transport.max_sse_event_size
        async for event in EventSource(response, max_event_size=size):
            if event.event != "message" or not event.data:
                continue  # a priming event: a raw call is not resumed
            if await self._answer(rid, event.data, final=False):
                return
        self._error(rid, _closed(), "the upstream's event stream ended without an answer")

    async def _answer(self, rid: str, data: bytes | str, final: bool = True) -> bool:
        """``data``, one message: the call's answer or progress, or the session's.
        ``True`` once the call is answered."""
        from mcp_types import PARSE_ERROR

        try:
            value = await parse(data)
        except (ValueError, RecursionError) as exc:
            self._error(rid, PARSE_ERROR, f"the upstream's answer is not JSON: {exc}"[:300])
            return True
        answered = isinstance(value, dict) and ("result" in value or "error" in value)
        if answered and "method" not in value:
            # the answer to this POST, whatever id the upstream wrote on it
            self._raw.take({**value, "id": rid})
            return True
        if self._raw.take(value):
            return False
        message = session_message(value)
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._to_session.send(message)
        if final:
            self._error(rid, _closed(), "the upstream answered with no response to the call")
        return final

    async def _failed(self, rid: str, response: Any, kind: str) -> None:
        """A non-success status, answered as the SDK's transport answers it."""
        from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND

        status = response.status_code
        if status >= 400 and kind.startswith(_JSON):
            with contextlib.suppress(Exception):
                value = await parse(await response.aread())
                if isinstance(value, dict) and isinstance(value.get("error"), dict):
                    self._raw.take({"jsonrpc": "2.0", "id": rid, "error": value["error"]})
                    return
        if status == 404:
            if self._transport.session_id is None:
                self._error(rid, METHOD_NOT_FOUND, "Not Found")
            else:
                self._error(rid, INVALID_REQUEST, "Session terminated")
        elif status == 202 or 300 <= status < 400:
            self._error(rid, INVALID_REQUEST, f"the upstream answered HTTP {status} to a request")
        elif status >= 400:
            self._error(rid, INTERNAL_ERROR, "Server returned an error response")
        else:
            self._error(rid, INVALID_REQUEST, f"Unexpected content type: {kind}")

    def _error(self, rid: str, code: int, message: str) -> None:
        self._raw.take({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def _closed() -> int:
    from mcp_types import CONNECTION_CLOSED

    return CONNECTION_CLOSED
