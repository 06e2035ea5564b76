"""Large JSON-RPC messages taken apart in slices, so that relaying one session's 20 MB
result never holds the event loop that serves every other session.

Turning JSON text into Python values and back holds the interpreter lock from start to
end, so a worker thread does not help: parsing a 20 MB line took 0.1-0.5 s here, during
which no other request moved.  What costs is the escaping of the few long strings such a
message holds (a text block, an image's base64 data), never its structure.  So:

- :func:`parse_line` lifts every string literal of :data:`BULK_CHARS` or more out of a
  long line, unescapes each in slices of about :data:`SLICE` characters (yielding to the
  event loop between them), parses the small skeleton that is left, and puts the strings
  back; every other line is parsed at once, as before.
- :func:`present` does the reverse for a large response: its long strings become
  placeholders, the skeleton is serialised at once, each string is escaped in slices, and
  the response carries the finished text, which the transports then write as is
  (:class:`PresentingStream` wraps a transport's write stream to do this).

A slice boundary never falls inside an escape sequence, between the two halves of an
escaped surrogate pair, or inside a UTF-8 character.  Stdio upstreams are read through
:mod:`sidecar.agents.gateway.proxy.stdio`, which parses with :func:`parse_line`; an HTTP upstream's
messages are parsed by the SDK's own client, at once (about 5 ms per MB on the event loop).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import re
import secrets
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from mcp.shared.message import SessionMessage

BULK_CHARS = 65_536
"""A string literal at least this long is (un)escaped in slices."""
SLICE = 262_144
LARGE_LINE = 524_288
"""A line at least this long is parsed by :func:`parse_line`'s slices."""
_BACKSLASH = 0x5C
_QUOTE = b'"'
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


# ---- parsing ------------------------------------------------------------------------
async def parse_line(line: bytes) -> SessionMessage | Exception:
    """One JSON-RPC message from one line (a parse error is returned, not raised)."""
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    try:
        if len(line) < LARGE_LINE:
            return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
        value = await loads(line)
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(value, by_name=False))
    except (ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
        return exc


async def loads(data: bytes) -> Any:
    """``json.loads(data)``, its long strings unescaped in slices."""
    token = f"@@bulk-{secrets.token_hex(8)}-"
    parts: list[bytes] = []
    strings: list[str] = []
    pos = 0
    opened: int | None = None
    scan = 0
    seen = 0
    while (quote := data.find(_QUOTE, scan)) >= 0:
        scan = quote + 1
        seen += 1
        if seen % 4_096 == 0:
            await anyio.lowlevel.checkpoint()
        if opened is None:
            opened = quote
            continue
        if _escaped(data, quote):
            continue
        if quote - opened - 1 >= BULK_CHARS:
            parts.append(data[pos:opened])
            parts.append(json.dumps(f"{token}{len(strings)}").encode())
            strings.append(await _unescape(data[opened + 1 : quote]))
            pos = quote + 1
        opened = None
    if not strings:
        return json.loads(data)
    parts.append(data[pos:])
    skeleton = json.loads(b"".join(parts))
    return _put_back(skeleton, token, strings)


def _escaped(data: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    run = 0
    i = quote - 1
    while i >= 0 and data[i] == _BACKSLASH:
        run += 1
        i -= 1
    return run % 2 == 1


async def _unescape(literal: bytes) -> str:
    """The string a JSON string literal's body stands for, in slices."""
    if b"\\" not in literal:
        # as json.loads reads bytes: an escaped-free lone surrogate passes through
        decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
        out = []
        for start in range(0, len(literal), SLICE):
            out.append(decoder.decode(literal[start : start + SLICE]))
            await anyio.lowlevel.checkpoint()
        out.append(decoder.decode(b"", final=True))
        return "".join(out)
    out = []
    start = 0
    while start < len(literal):
        end = len(literal) if len(literal) - start <= SLICE else _safe_cut(literal, start + SLICE)
        if end <= start:  # no boundary found in the slice: the rest at once
            end = len(literal)
        out.append(json.loads(b'"' + literal[start:end] + b'"'))
        start = end
        await anyio.lowlevel.checkpoint()
    return "".join(out)


def _safe_cut(data: bytes, cut: int) -> int:
    """A position at or before ``cut`` that splits no escape, surrogate pair or UTF-8
    character of the literal body ``data``."""
    while cut > 0 and data[cut] & 0xC0 == 0x80:  # inside a UTF-8 character
        cut -= 1
    last = data.rfind(b"\\", max(cut - 12, 0), cut)
    if last < 0:
        return cut  # an escape is at most 6 bytes: any before the window ended in it
    run_start = last
    while run_start > 0 and data[run_start - 1] == _BACKSLASH:
        run_start -= 1
    run_end = last + 1
    while run_end < len(data) and data[run_end] == _BACKSLASH:
        run_end += 1
    # a run of backslashes reads as pairs ("\\\\"), the last one starting an escape
    # when the run is odd: a cut an even number of backslashes into it splits nothing
    cut = run_start + (min(cut, run_end) - run_start) // 2 * 2
    previous = cut - 6
    if (
        previous >= 0
        and data[cut : cut + 2] == b"\\u"
        and _HIGH_SURROGATE.fullmatch(data, previous, cut)
        and not _escaped(data, previous)
    ):
        cut = previous  # an escaped surrogate pair stays whole
    return cut


def _put_back(value: Any, token: str, strings: list[str]) -> Any:
    if isinstance(value, str):
        if value.startswith(token):
            return strings[int(value[len(token) :])]
        return value
    if isinstance(value, dict):
        return {
            _put_back(k, token, strings): _put_back(v, token, strings) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_put_back(v, token, strings) for v in value]
    return value


# ---- serialising --------------------------------------------------------------------
async def present(message: SessionMessage) -> SessionMessage:
    """``message`` ready to be written: a response holding long strings carries its
    JSON text, escaped in slices; anything else is returned as it is."""
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCResponse

    response = message.message
    if not isinstance(response, JSONRPCResponse) or not _holds_bulk(response.result, 0):
        return message
    token = f"@@bulk-{secrets.token_hex(8)}-"
    strings: list[str] = []
    skeleton = _lift(response.result, token, strings, 0)
    text = JSONRPCResponse.model_construct(
        jsonrpc=response.jsonrpc, id=response.id, result=skeleton
    ).model_dump_json(by_alias=True, exclude_unset=True)
    pieces: list[bytes] = []
    rest = text
    for i, value in enumerate(strings):
        marker = json.dumps(f"{token}{i}")
        before, _, rest = rest.partition(marker)
        pieces.append(before.encode())
        pieces.append(b'"')
        async for escaped in _escape(value):
            pieces.append(escaped)
        pieces.append(b'"')
    pieces.append(rest.encode())
    presented = _presented_type().model_construct(
        jsonrpc=response.jsonrpc, id=response.id, result=response.result
    )
    presented.data = b"".join(pieces)
    return SessionMessage(presented, metadata=message.metadata)


_DEPTH = 16
"""Levels searched for long strings (deeper ones are written at once)."""


def _holds_bulk(value: Any, depth: int) -> bool:
    if isinstance(value, str):
        return len(value) >= BULK_CHARS
    if depth > _DEPTH:
        return False
    if isinstance(value, dict):
        return any(_holds_bulk(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_holds_bulk(v, depth + 1) for v in value)
    return False


def _lift(value: Any, token: str, strings: list[str], depth: int) -> Any:
    if isinstance(value, str) and len(value) >= BULK_CHARS:
        strings.append(value)
        return f"{token}{len(strings) - 1}"
    if depth > _DEPTH:
        return value
    if isinstance(value, dict):
        return {k: _lift(v, token, strings, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_lift(v, token, strings, depth + 1) for v in value]
    return value


async def _escape(value: str) -> AsyncIterator[bytes]:
    for start in range(0, len(value), SLICE):
        piece = json.dumps(value[start : start + SLICE], ensure_ascii=False)[1:-1]
        yield piece.encode("utf-8", "surrogatepass")
        await anyio.lowlevel.checkpoint()


@functools.cache
def _presented_type() -> type[Any]:
    """A response whose JSON text is already written (built on first use: the SDK is
    imported lazily)."""
    from mcp_types import JSONRPCResponse
    from pydantic import PrivateAttr

    class Presented(JSONRPCResponse):
        _data: bytes = PrivateAttr(default=b"")

        @property
        def data(self) -> bytes:
            """The response as UTF-8 JSON."""
            return self._data

        @data.setter
        def data(self, value: bytes) -> None:
            self._data = value

        def model_dump_json(self, *args: Any, **kwargs: Any) -> str:
            # the transports write responses with by_alias=True, as present() did
            if self._data and not args and kwargs.get("by_alias", False):
                return self._data.decode("utf-8", "surrogatepass")
            return super().model_dump_json(*args, **kwargs)

    return Presented


class PresentingStream:
    """A transport's write stream whose large responses are serialised in slices first
    (:func:`present`); everything else passes through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: Any) -> None:
        from mcp.shared.message import SessionMessage

        if isinstance(item, SessionMessage):
            # a response that cannot be taken apart (nested past the recursion limit) is
            # written at once, as it would be without this stream
            with contextlib.suppress(Exception):
                item = await present(item)
        await self._inner.send(item)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> PresentingStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


def on_each_session(session_manager: Any, apply: Callable[[Any], None]) -> bool:
    """Call ``apply(transport)`` on every session ``session_manager`` (streamable HTTP)
    admits from now on.  Returns whether it could: the hook is the SDK's private session
    admission, without which sessions are left as the SDK makes them."""
    admit = getattr(session_manager, "_admit_session", None)
    if admit is None:
        return False

    def admitted(requestor: Any) -> Any:
        transport = admit(requestor)
        if transport is not None:
            apply(transport)
        return transport

    session_manager._admit_session = admitted
    return True


def present_http_responses(session_manager: Any) -> bool:
    """Make every session of ``session_manager`` (streamable HTTP) write its large
    responses through :class:`PresentingStream`.  Returns whether it could (without the
    hook, responses are written as before, only all at once)."""
    return on_each_session(session_manager, _present_through)


def _present_through(transport: Any) -> None:
    connect = transport.connect

    @contextlib.asynccontextmanager
    async def presenting() -> AsyncIterator[tuple[Any, Any]]:
        async with connect() as (read, write):
            yield read, PresentingStream(write)

    transport.connect = presenting
    create = getattr(transport, "_create_event_data", None)
    if create is None:
        return

    def event_data(event_message: Any) -> Any:
        # the SSE library would split the text by line breaks (a JSON text has none),
        # copy it twice and encode it, all at once: a presented response is framed from
        # its bytes (event streams accept bytes as finished frames)
        data = getattr(event_message.message, "data", None)
        if not isinstance(data, bytes) or not data:
            return create(event_message)
        head = b"event: message\r\n"
        if event_message.event_id:
            head += b"id: " + str(event_message.event_id).encode() + b"\r\n"
        return b"".join((head, b"data: ", data, b"\r\n\r\n"))

    transport._create_event_data = event_data
