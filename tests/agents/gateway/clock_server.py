"""A clock MCP server whose calls share no id-like value (as ``mcp-server-time``): what a
stateless client's calls of it show links nothing.  Run by the gateway tests as a real
subprocess over stdio.

- ``current_time(timezone)``: the time in an IANA zone; a zone it does not know fails
  "Invalid timezone: <zone>" (deterministically).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer(name="clock")


@server.tool(description="The current time in an IANA time zone.")
def current_time(timezone: str) -> dict[str, Any]:
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"Invalid timezone: {timezone}") from None
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": timezone, "datetime": now.isoformat(timespec="seconds")}


if __name__ == "__main__":
    server.run("stdio")
