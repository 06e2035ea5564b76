"""An MCP server that shows what reached it on the wire, for the tests of the gateway's
raw ``tools/call`` (stdio, or streamable HTTP with ``--http PORT``).

- ``request_id()``: the JSON-RPC id of this request and the ``_meta`` keys it carried;
- ``fail()``: answers with the JSON-RPC error ``-32042`` (message and data);
- ``hang()``: never answers; a cancelled one is remembered;
- ``cancelled()``: the ids of the ``hang`` calls that were cancelled;
- ``count(n)``: ``n`` progress notifications, then ``counted n``;
- ``big(chars)``: a text result of ``chars`` characters.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

state: dict[str, Any] = {"cancelled": []}
_EMPTY = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(name=name, description=name, input_schema=schema)
    for name, schema in (
        ("request_id", _EMPTY),
        ("fail", _EMPTY),
        ("hang", _EMPTY),
        ("cancelled", _EMPTY),
        ("count", {"type": "object", "properties": {"n": {"type": "integer"}}}),
        ("big", {"type": "object", "properties": {"chars": {"type": "integer"}}}),
    )
]


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "request_id":
        meta = params.meta or {}
        meta = meta if isinstance(meta, dict) else meta.model_dump(by_alias=True)
        return _text(json.dumps({"id": ctx.request_id, "meta": sorted(meta)}))
    if params.name == "fail":
        raise MCPError(-32042, "refused by the upstream", {"why": "a test"})
    if params.name == "hang":
        try:
            await anyio.sleep_forever()
        finally:
            state["cancelled"].append(ctx.request_id)
    if params.name == "cancelled":
        return _text(json.dumps(state["cancelled"]))
    if params.name == "count":
        n = int(args["n"])
        for i in range(1, n + 1):
            await ctx.session.report_progress(i, n, f"step {i}")
        return _text(f"counted {n}")
    if params.name == "big":
        return _text("x" * int(args["chars"]))
    raise MCPError(types.INVALID_PARAMS, f"no tool {params.name}")


server = Server("wire-test", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        anyio.run(main)
