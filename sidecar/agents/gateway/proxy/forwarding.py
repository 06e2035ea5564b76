"""``tools/call`` forwarded upstream as a JSON-RPC body of the gateway's own, below the
SDK's client session: the request is written as it goes on the wire, and its answer is
taken off the wire as a plain value, without the session's message objects, response
streams and validation on the way (the gateway validates the result once, as a
``CallToolResult``).

Everything else still goes through the SDK's session on the same transport, which stays
the link's owner: the handshake, lists, resources, the upstream's notifications and its
sampling and elicitation requests (answered by the session as before).  So a raw call is
only taken where it is correct to take it:

- the link speaks a handshake-era protocol (``2025-11-25`` and before); a 2026-07-28
  link carries the protocol's envelope on every request and goes through the session;
- the ids are strings of the gateway's own (``sidecar-raw-N``), never the integers the
  session counts, so an answer finds its call whichever path it took;
- the request's progress token is its own id: the upstream's
  ``notifications/progress`` for it come back to the caller's progress callback;
- a call given up (its timeout, its caller cancelled) is cancelled upstream with
  ``notifications/cancelled``, as the session does;
- the upstream's JSON-RPC error comes back as ``MCPError`` with its code, message and
  data; a link that breaks fails every raw call in flight with ``CONNECTION_CLOSED``
  (the link then reconnects, as for the session's requests).

The transports route what they read: :func:`route_value` hands a raw call's answer or
progress to it and anything else on to the session.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from sidecar.agents.gateway.proxy.bulk import LARGE_LINE, loads

log = logging.getLogger("sidecar.agents.gateway")

ID_PREFIX = "sidecar-raw-"
MARKER = ID_PREFIX.encode()
CANCEL_BOUND_S = 2.0
"""How long the gateway waits to tell the upstream a call was cancelled."""
Send = Callable[[str, bytes], Awaitable[None]]
"""Writes one request body upstream (``id``, body); over HTTP it also reads the answer
and hands it to :meth:`RawCalls.take` before it returns."""
Notify = Callable[[bytes], Awaitable[None]]
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class _InFlight:
    on_progress: Progress | None = None
    answer: dict[str, Any] | None = None
    events: Any = None  # (send, receive): the call's progress, then its answer, in order

    def __post_init__(self) -> None:
        self.events = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)


class RawCalls:
    """The raw calls in flight on one transport, and how to send them."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._calls: dict[str, _InFlight] = {}
        self.send: Send | None = None
        self.notify: Notify | None = None
        self.enabled = False
        """Set by the link once connected: the negotiated protocol takes raw calls."""
        self.protocol_version: str | None = None
        self.sent = 0

    @property
    def ready(self) -> bool:
        return self.enabled and self.send is not None

    @property
    def in_flight(self) -> int:
        return len(self._calls)

    def attach(self, send: Send, notify: Notify) -> None:
        self.send, self.notify = send, notify

    def detach(self, why: str) -> None:
        """The transport is gone: every call in flight fails as a closed connection."""
        from mcp_types import CONNECTION_CLOSED

        self.send = self.notify = None
        self.enabled = False
        for rid in list(self._calls):
            self._answer(rid, {"error": {"code": CONNECTION_CLOSED, "message": why}})

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None = None,
        on_progress: Progress | None = None,
    ) -> dict[str, Any]:
        """``tools/call`` of ``name``: the result as a plain value.  Raises ``MCPError``
        for the upstream's error (or a closed link); a cancelled caller's call is
        cancelled upstream."""
        send = self.send
        if send is None:
            from mcp.shared.exceptions import MCPError
            from mcp_types import CONNECTION_CLOSED

            raise MCPError(CONNECTION_CLOSED, "the upstream link is not connected")
        rid = f"{ID_PREFIX}{next(self._ids)}"
        body = request_body(rid, name, arguments, meta, with_progress=on_progress is not None)
        call = self._calls[rid] = _InFlight(on_progress=on_progress)
        answered = False
        try:
            self.sent += 1
            await send(rid, body)
            # the progress that came before the answer reaches the client before it
            async for kind, value in call.events[1]:
                if kind == "answer":
                    break
                await _relay_progress(call, value)
            answered = True
        finally:
            self._calls.pop(rid, None)
            for end in call.events:
                end.close()
            if not answered and call.answer is None:
                await self._cancel(rid)
        return _unpacked(call.answer)

    async def _cancel(self, rid: str) -> None:
        notify = self.notify
        if notify is None:
            return
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": rid, "reason": "the gateway gave up on the call"},
            }
        ).encode()
        with anyio.move_on_after(CANCEL_BOUND_S, shield=True), contextlib.suppress(Exception):
            await notify(body)

    def take(self, value: Any) -> bool:
        """``value`` (a message read upstream) delivered when it is a raw call's answer
        or progress; ``False``: it is the session's."""
        if not isinstance(value, dict) or not self._calls:
            return False
        rid = value.get("id")
        if isinstance(rid, str) and rid in self._calls and ("result" in value or "error" in value):
            self._answer(rid, value)
            return True
        params = value.get("params")
        if value.get("method") == "notifications/progress" and isinstance(params, dict):
            token = params.get("progressToken")
            call = self._calls.get(token) if isinstance(token, str) else None
            if call is not None:
                self._progress(call, params)
                return True
        return False

    def _answer(self, rid: str, value: dict[str, Any]) -> None:
        call = self._calls.get(rid)
        if call is not None and call.answer is None:
            call.answer = value
            call.events[0].send_nowait(("answer", value))

    @staticmethod
    def _progress(call: _InFlight, params: dict[str, Any]) -> None:
        if call.on_progress is not None and call.answer is None:
            call.events[0].send_nowait(("progress", params))


async def _relay_progress(call: _InFlight, params: dict[str, Any]) -> None:
    progress, total = params.get("progress"), params.get("total")
    message = params.get("message")
    if call.on_progress is None or not isinstance(progress, int | float):
        return
    with contextlib.suppress(Exception):  # progress is advisory
        await call.on_progress(
            float(progress),
            float(total) if isinstance(total, int | float) else None,
            message if isinstance(message, str) else None,
        )


def request_body(
    rid: str,
    name: str,
    arguments: dict[str, Any],
    meta: dict[str, Any] | None,
    with_progress: bool,
) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    meta_out = dict(meta or {})
    if with_progress:
        meta_out["progressToken"] = rid
    if meta_out:
        params["_meta"] = meta_out
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def _unpacked(answer: dict[str, Any] | None) -> dict[str, Any]:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INTERNAL_ERROR

    if answer is None:
        raise MCPError(INTERNAL_ERROR, "the upstream's answer was lost")
    error = answer.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise MCPError(INTERNAL_ERROR, "the upstream answered with a malformed error")
        code = error.get("code")
        raise MCPError(
            code if isinstance(code, int) else INTERNAL_ERROR,
            str(error.get("message", "")),
            error.get("data"),
        )
    result = answer.get("result")
    if not isinstance(result, dict):
        raise MCPError(INTERNAL_ERROR, "the upstream answered tools/call without a result")
    return result


async def parse(data: bytes | str) -> Any:
    """``json.loads(data)``; a large message's long strings unescaped in slices
    (:func:`sidecar.agents.gateway.proxy.bulk.loads`)."""
    if len(data) < LARGE_LINE:
        return json.loads(data)
    return await loads(data.encode() if isinstance(data, str) else data)


async def route_value(raw: RawCalls | None, data: bytes | str) -> Any | None:
    """One message read upstream: ``None`` when a raw call took it, else the value
    parsed for the session (an exception when it is not JSON).  Only a message that may
    be a raw call's (it names the gateway's id prefix) is parsed here; the rest keep the
    session's own parser (``NOT_OURS``)."""
    if raw is None or not raw.in_flight:
        return NOT_OURS
    text = data.encode() if isinstance(data, str) else data
    if len(text) < LARGE_LINE and MARKER not in text:
        return NOT_OURS
    try:
        value = await parse(text)
    except (ValueError, RecursionError) as exc:
        return exc
    if raw.take(value):
        return None
    return value


NOT_OURS: Any = object()
"""What :func:`route_value` returns for a message left to the session's parser."""


def session_message(value: Any) -> Any:
    """A value :func:`route_value` parsed, as the session's message (or the error)."""
    if isinstance(value, Exception):
        return value
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(value, by_name=False))
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        return exc
