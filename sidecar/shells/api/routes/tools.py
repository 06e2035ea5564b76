from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from sidecar.shells.api.deps import Caller, Lib, route
from sidecar.shells.api.models import SyncIn, ToolsIn
from sidecar.tools.catalog import load_tools
from sidecar.tools.paging import DEFAULT_LIMIT, MAX_LIMIT
from sidecar.wire import dump_dict

router = APIRouter(tags=["tools"])


@route(router, "add_tools")
def add_tools(body: ToolsIn, sc: Lib) -> dict[str, Any]:
    return dump_dict(sc.add_tools(load_tools([body.tools], "request")))


@route(router, "list_tools_page")
def list_tools(
    sc: Lib,
    who: Caller,
    cursor: Annotated[
        str | None,
        Query(max_length=256, description="`next_cursor` of the page before (none: the first)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="tools on this page")] = (
        DEFAULT_LIMIT
    ),
) -> dict[str, Any]:
    """The active tools, a page at a time in tool-id order: follow `next_cursor` until it
    is null.  An operator's token sees every active tool as stored; an agent's sees what
    a lookup could show it: no tool evicted or withheld from every lookup, and no
    credential references nor pins (`view` says which)."""
    return dump_dict(sc.list_tools_page(cursor, limit, agent=not who.operator))


@route(router, "sync_tools")
def sync_tools(body: SyncIn, sc: Lib) -> dict[str, Any]:
    """Make the hot index hold exactly ``source``'s tools (an MCP gateway's upstream)."""
    return dump_dict(sc.sync_tools(body.source, load_tools([body.tools], "request")))


@route(router, "hidden_tools")
def hidden_tools(sc: Lib) -> dict[str, Any]:
    """Tools never to be listed or called: evicted, or with their move begun."""
    return {"tools": sorted(sc.hidden_tools())}
