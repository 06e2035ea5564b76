"""Large messages in slices: the same values as parsing and serialising at once, with
the event loop free between slices (shown by ordering: another task runs in the middle
of one message)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from unittest import mock

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.agents.gateway.proxy import bulk
from sidecar.agents.gateway.proxy.stdio import LineTooLong, lines

# the characters that make slicing hard: escapes, quotes, surrogates, multi-byte UTF-8
TRICKY = st.text(
    alphabet=st.sampled_from(list('ab"\\/\n\t\x01\u00e9\u2028\U0001f600\ud83d\ude00')), max_size=120
)


WRITABLE = st.text(  # what a response can hold: no lone surrogates
    alphabet=st.sampled_from(list('ab"\\/\n\t\x01\u00e9\u2028\U0001f600')), max_size=120
)


@contextlib.contextmanager
def small_slices() -> Iterator[None]:
    """Slices of a few bytes, so that every boundary case is met by short values."""
    with mock.patch.object(bulk, "BULK_CHARS", 4), mock.patch.object(bulk, "SLICE", 7):
        yield


JSON_VALUES = st.recursive(
    TRICKY | st.integers() | st.none(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_loads_in_slices_is_json_loads(value: Any, ascii_only: bool) -> None:
    data = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(data)
    except ValueError:  # a lone surrogate written raw is not valid UTF-8 JSON
        return
    with small_slices():
        assert anyio.run(bulk.loads, data) == expected


@settings(max_examples=100, deadline=None)
@given(text=WRITABLE, other=WRITABLE)
def test_a_presented_response_is_the_same_json(text: str, other: str) -> None:
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCResponse

    response = JSONRPCResponse(
        jsonrpc="2.0", id=7, result={"content": [{"type": "text", "text": text}], other: [other]}
    )
    with small_slices():
        presented = anyio.run(bulk.present, SessionMessage(response)).message
    written = presented.model_dump_json(by_alias=True, exclude_unset=True)
    direct = response.model_dump_json(by_alias=True, exclude_unset=True)
    assert json.loads(written) == json.loads(direct)


def test_parsing_a_long_line_lets_other_tasks_run_in_between() -> None:
    text = 'line with \\ backslash and "quotes"\n' * 60_000  # ~2.2 MB
    line = json.dumps(
        {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": text}]}}
    ).encode()
    assert len(line) > bulk.LARGE_LINE
    order: list[str] = []

    async def main() -> Any:
        async def other() -> None:
            await anyio.sleep(0)
            order.append("other task")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            message = await bulk.parse_line(line)
            order.append("parsed")
        return message

    message = anyio.run(main)
    assert order == ["other task", "parsed"]
    assert message.message.result["content"][0]["text"] == text


def test_lines_are_framed_across_chunks_and_an_oversized_one_is_dropped() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for chunk in (b'{"a"', b":1}\n{", b'"b":2}\n', b"x" * 50, b"y" * 50 + b"\n", b"{}\n"):
            yield chunk

    async def main() -> list[Any]:
        return [line async for line in lines(chunks(), max_line=64)]

    framed = anyio.run(main)
    assert framed[:2] == [b'{"a":1}', b'{"b":2}']
    assert isinstance(framed[2], LineTooLong)
    assert framed[3] == b"{}"
