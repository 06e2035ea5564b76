"""A bank as an MCP server over stdio, for the approval tests: ``refund`` is annotated
destructive and counts every refund it makes (so a test sees how many calls reached it,
and with which arguments); ``balance`` is read-only."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer(name="bank")
REFUNDS: list[dict[str, Any]] = []


@server.tool(
    description="Refund an amount to a customer.",
    annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False),
)
def refund(customer: str, amount: int) -> dict[str, Any]:
    REFUNDS.append({"customer": customer, "amount": amount})
    return {"refunded": amount, "to": customer, "refunds_so_far": list(REFUNDS)}


@server.tool(description="A customer's balance.", annotations=ToolAnnotations(read_only_hint=True))
def balance(customer: str) -> dict[str, Any]:
    return {"customer": customer, "balance": 100}


if __name__ == "__main__":
    server.run("stdio")
