"""A ``tools/call`` over streamable HTTP answered with one JSON body instead of an event
stream, when nothing but its answer can be sent during it.

An event stream costs the gateway's HTTP server a stream, a writer task and the event
framing per request (about 1 ms of a call on this machine), for what is usually one
message.  The SDK's transport answers either way, but for the whole server at once
(``json_response``); here the choice is made per request, for a request that:

- is a ``tools/call`` with no ``progressToken`` (progress needs the stream);
- comes in an MCP session (``Mcp-Session-Id``) whose client declared neither sampling
  nor elicitation and set no log level (:meth:`Connections.quiet`): the upstream's
  requests for it could not be asked on a JSON body, and it asked for no log messages.

Such a request's channel says it cannot carry a server request (the relay refuses the
upstream's sampling and elicitation requests as it does for any client that cannot take
them), and a log message relayed during it goes on the session's standalone stream
(:meth:`sidecar.agents.gateway.proxy.relay.Relay`), which it keeps.  Every other request is
answered on an event stream, as before.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from typing import Any

from sidecar.agents.gateway.proxy.bulk import on_each_session
from sidecar.agents.gateway.proxy.security import ASGIApp, Receive, Scope, Send

_ANSWER_JSON: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sidecar_gateway_answer_json", default=False
)
_SESSION_HEADER = b"mcp-session-id"
_subclasses: dict[type[Any], type[Any]] = {}


class JsonAnswers:
    """ASGI middleware: marks a plain ``tools/call`` of a quiet session to be answered
    with a JSON body (see the module)."""

    def __init__(self, app: ASGIApp, path: str, quiet: Callable[[str], bool]) -> None:
        self.app = app
        self._path = path.rstrip("/")
        self._quiet = quiet

    def _ours(self, scope: Scope) -> bool:
        path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
        if root and path.startswith(root):
            path = path[len(root) :]
        return path.rstrip("/") == self._path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not self._ours(scope):
            await self.app(scope, receive, send)
            return
        session = next((v for k, v in scope.get("headers", []) if k == _SESSION_HEADER), None)
        if session is None or not self._quiet(session.decode("latin-1")):
            await self.app(scope, receive, send)
            return
        body, receive = await _read_body(receive)
        if not plain_call(body):
            await self.app(scope, receive, send)
            return
        token = _ANSWER_JSON.set(True)
        try:
            await self.app(scope, receive, send)
        finally:
            _ANSWER_JSON.reset(token)


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request's body, and a ``receive`` that hands it on again."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # the client went away: hand that on as it came
            async def gone(message: Any = message) -> Any:
                return message

            return b"", gone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def plain_call(body: bytes) -> bool:
    """Whether ``body`` is one ``tools/call`` request that asks for no progress."""
    if b'"tools/call"' not in body:
        return False
    try:
        message = json.loads(body)
    except ValueError:
        return False
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    if message.get("id") is None:
        return False
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return not (isinstance(meta, dict) and "progressToken" in meta)


def answer_json_when_marked(transport: Any) -> None:
    """Make ``transport`` (the SDK's streamable HTTP server transport of one session)
    answer a marked request with a JSON body, every other as it was built to."""
    cls = type(transport)
    if cls in _subclasses.values():
        return
    sub = _subclasses.get(cls)
    if sub is None:
        sub = type(f"JsonWhenMarked{cls.__name__}", (cls,), {"is_json_response_enabled": _FLAG})
        _subclasses[cls] = sub
    transport.__class__ = sub


def _flag_get(self: Any) -> bool:
    # read in the request's own task (its POST handling) only where it is marked
    return _ANSWER_JSON.get() or bool(self.__dict__.get("is_json_response_enabled", False))


def _flag_set(self: Any, value: bool) -> None:
    self.__dict__["is_json_response_enabled"] = value


_FLAG = property(_flag_get, _flag_set)


def hook(session_manager: Any) -> bool:
    """Every session ``session_manager`` admits answers a marked request with a JSON
    body (:func:`answer_json_when_marked`).  Returns whether it could: the hook is the
    SDK's private session admission, without which every request keeps its stream."""
    return on_each_session(session_manager, answer_json_when_marked)
