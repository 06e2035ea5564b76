"""Listing the active tools a page at a time: in tool-id order, each page ending with a
cursor for the next one (opaque: the last id of the page, encoded), so that a client
walks a catalog of any size in bounded answers, and a tool added or removed meanwhile
never makes another tool appear twice or be skipped.

A page has two views.  An operator's holds every active tool as the library lists it.
An agent's holds what a lookup could show that agent: no tool that is evicted or on its
way to the cold store, none that a fatal sequence of one step withholds from every
lookup, and no credential reference nor pin (those are the operator's business).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sidecar.errors import InvalidInput
from sidecar.model import TOOL_ID_PATTERN, Tool

View = Literal["operator", "agent"]
DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000
_AGENT_FIELDS = ("tool_id", "tool_type", "description", "input_schema")


@dataclass(frozen=True)
class ToolPage:
    tools: tuple[Tool, ...]
    next_cursor: str | None
    """Where the next page starts (``None``: this was the last)."""
    view: View = "operator"

    def to_dict(self) -> dict[str, Any]:
        tools = [t.to_dict() for t in self.tools]
        if self.view == "agent":
            tools = [{k: t[k] for k in _AGENT_FIELDS} for t in tools]
        return {"tools": tools, "next_cursor": self.next_cursor, "view": self.view}


def encode_cursor(tool_id: str) -> str:
    return base64.urlsafe_b64encode(tool_id.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The tool id a cursor stands for (``None``: from the start); one this server could
    not have given is :class:`~sidecar.errors.InvalidInput`."""
    if cursor is None or cursor == "":
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError):
        text = ""
    if not isinstance(cursor, str) or not TOOL_ID_PATTERN.fullmatch(text):
        raise InvalidInput("cursor: not a cursor this sidecar gave (start again without one)")
    return text


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}")
    return limit


def page_of(
    fetch: Callable[[str | None, int], Sequence[Tool]],
    after: str | None,
    limit: int,
    hidden: Collection[str],
    view: View,
) -> ToolPage:
    """The page of ``limit`` tools after the id ``after``: ``fetch(after, n)`` gives the
    next ``n`` tools in id order, ``hidden`` ones are left out (fetched past, so a page
    is full whenever enough tools remain)."""
    kept: list[Tool] = []
    cursor = after
    while len(kept) <= limit:
        batch = fetch(cursor, limit + 1 - len(kept) + min(len(hidden), MAX_LIMIT))
        if not batch:
            break
        kept += [t for t in batch if t.tool_id not in hidden]
        cursor = batch[-1].tool_id
    if len(kept) > limit:
        return ToolPage(tuple(kept[:limit]), encode_cursor(kept[limit - 1].tool_id), view)
    return ToolPage(tuple(kept), None, view)
