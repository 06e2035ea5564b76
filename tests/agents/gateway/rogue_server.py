"""A misbehaving MCP upstream for the gateway's isolation tests, run as a real subprocess
(stdio, or streamable HTTP with ``--http PORT``).

- ``echo(x)``: answers at once.
- ``flood(mb)``: a text result of ``mb`` megabytes (log-like lines, with a secret near
  the start, so that redaction has work to do).
- ``sleepy(seconds)``: sleeps, then answers.
- ``deep(levels)``: a text result that is a JSON array nested ``levels`` deep.
- ``rename()``: lists two tools whose names break the MCP name grammar (``files/read``,
  ``read file``) and announces ``tools/list_changed``.

``--bad-names`` lists the two badly named tools from the start.
"""

from __future__ import annotations

import sys

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

SECRET = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8"
LINE = "order #W{n:06d} status=pending carrier=ups note=left at the door\n"

server = MCPServer(name="rogue")


@server.tool(description="Echo x back at once.")
def echo(x: int) -> str:
    return str(x)


@server.tool(description="A text result of `mb` megabytes.", structured_output=False)
def flood(mb: float) -> str:
    size = int(mb * 1_000_000)
    head = f"api_key={SECRET}\n"
    lines = (LINE.format(n=i) for i in range(size // len(LINE.format(n=0)) + 1))
    return (head + "".join(lines))[:size]


@server.tool(description="Sleep, then answer.")
async def sleepy(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "awake"


@server.tool(description="A JSON array nested `levels` deep, as text.", structured_output=False)
def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def read_file(path: str) -> str:
    return f"contents of {path}"


def _add_bad_names() -> None:
    server.add_tool(read_file, name="files/read", description="Read a file.")
    server.add_tool(read_file, name="read file", description="Read a file, too.")


@server.tool(description="List two badly named tools from now on.")
async def rename(ctx: Context) -> str:
    _add_bad_names()
    await ctx.session.send_tool_list_changed()
    return "renamed"


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--bad-names" in args:
        args.remove("--bad-names")
        _add_bad_names()
    if len(args) == 2 and args[0] == "--http":
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(args[1]), log_level="warning")
    else:
        server.run("stdio")
