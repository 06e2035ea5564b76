"""A toy shop MCP server for the gateway example: two tools, one of which fails
deterministically on some orders.

- ``get_order(order_id)``: the order and its status (``#W1``, ``#W2``, ``#W5`` and
  ``#W40`` to ``#W49``: pending; ``#W3``, ``#W4`` and ``#W6`` to ``#W29``: delivered); an
  unknown id fails "Order not found".
- ``exchange(order_id, item)``: fails "Non-delivered order cannot be exchanged" unless the
  order is delivered.

Run over stdio by the gateway: ``sidecar gateway shop='python examples/shop_server.py'``.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
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


if __name__ == "__main__":
    server.run("stdio")
