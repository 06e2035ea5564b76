"""A small shop MCP server whose tools fail deterministically on some arguments and
states, run by the gateway tests as a real subprocess (stdio, or streamable HTTP with
``--http PORT``).

- ``get_order(order_id)``: the order and its status (``#W1``, ``#W2``, ``#W5`` and
  ``#W40`` to ``#W49``: pending; ``#W3``, ``#W4`` and ``#W6`` to ``#W29``: delivered); an
  unknown id fails
  "Order not found".  Annotated read-only (so the gateway may forward a sample of its
  blocked calls).
- ``exchange(order_id, item)``: fails "Non-delivered order cannot be exchanged" unless
  the order is delivered.
- ``slow(x)``: sleeps ~5 ms and echoes ``x`` (for timing).
- ``trace_context()``: the ``traceparent`` the call carried in ``_meta``.
- ``crash()``: ends the process mid-call (the gateway must reconnect).
- ``upgrade()``: moves to catalog v2 (``exchange`` gains a required ``reason``, a new
  ``return_item`` appears, ``slow`` disappears) and announces ``tools/list_changed``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

ORDERS = {"#W1": "pending", "#W2": "pending", "#W3": "delivered", "#W4": "delivered"}
ORDERS |= {"#W5": "pending"} | {f"#W{n}": "delivered" for n in range(6, 30)}
ORDERS |= {f"#W{n}": "pending" for n in range(40, 50)}

server = MCPServer(name="shop")


def _order(order_id: str) -> dict[str, Any]:
    if order_id not in ORDERS:
        raise ToolError(f"Order not found: {order_id}")
    return {"order_id": order_id, "status": ORDERS[order_id]}


@server.tool(
    description="Look up an order and its delivery status.",
    annotations=ToolAnnotations(read_only_hint=True),
)
def get_order(order_id: str) -> dict[str, Any]:
    return _order(order_id)


@server.tool(description="Exchange an item of a delivered order for another one.")
def exchange(order_id: str, item: str) -> dict[str, Any]:
    order = _order(order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be exchanged")
    return {"order_id": order_id, "exchanged": item, "status": "exchange requested"}


@server.tool(description="Sleep five milliseconds and echo x back.")
async def slow(x: int) -> dict[str, Any]:
    await anyio.sleep(0.005)
    return {"x": x}


def exchange_v2(order_id: str, item: str, reason: str) -> dict[str, Any]:
    """Exchange an item of a delivered order, saying why."""
    result = exchange(order_id, item)
    return {**result, "reason": reason}


def return_item(order_id: str) -> dict[str, Any]:
    """Return a delivered order."""
    order = _order(order_id)
    if order["status"] != "delivered":
        raise ToolError("Non-delivered order cannot be returned")
    return {"order_id": order_id, "status": "return requested"}


@server.tool(description="The trace context this call came with.")
def trace_context(ctx: Context) -> dict[str, Any]:
    meta = dict(ctx.request_context.meta or {})
    return {"traceparent": meta.get("traceparent")}


@server.tool(description="Stop the shop process at once, mid-call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Switch the shop to its second catalog.")
async def upgrade(ctx: Context) -> str:
    server.remove_tool("exchange")
    server.remove_tool("slow")
    server.add_tool(exchange_v2, name="exchange")
    server.add_tool(return_item)
    await ctx.session.send_tool_list_changed()
    return "upgraded"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run("stdio")
