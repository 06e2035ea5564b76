from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sidecar.api.deps import Lib, Operator
from sidecar.api.models import SyncIn, ToolsIn
from sidecar.catalog import load_tools
from sidecar.wire import dump, dump_dict

router = APIRouter(tags=["tools"])


@router.post("/v1/tools")
def add_tools(body: ToolsIn, sc: Lib, _who: Operator) -> dict[str, Any]:
    return dump_dict(sc.add_tools(load_tools([body.tools], "request")))


@router.get("/v1/tools")
def list_tools(sc: Lib) -> dict[str, Any]:
    return {"tools": dump(sc.list_tools())}


@router.post("/v1/tools/sync")
def sync_tools(body: SyncIn, sc: Lib, _who: Operator) -> dict[str, Any]:
    """Make the hot index hold exactly ``source``'s tools (an MCP gateway's upstream)."""
    return dump_dict(sc.sync_tools(body.source, load_tools([body.tools], "request")))


@router.get("/v1/tools/hidden")
def hidden_tools(sc: Lib) -> dict[str, Any]:
    """Tools never to be listed or called: evicted, or with their move begun."""
    return {"tools": sorted(sc.hidden_tools())}
