"""The processes the gateway benchmark starts (``python -m benchmarks.bench_gateway --serve
ROLE ...``): the upstream MCP server, the gateway in each of its modes, the reference
relays, the flooding client and the gateway whose event loop is watched."""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

TOKEN = "bench-token-0123456789"
"""The bearer token of every gateway the benchmark starts over HTTP."""


# ---- the processes -------------------------------------------------------------------
def _upstream_server() -> Any:
    import anyio
    from mcp.server import MCPServer

    server = MCPServer(name="upstream")

    @server.tool(description="Sleep five milliseconds and echo x back.")
    async def slow(x: int) -> dict[str, int]:
        await anyio.sleep(0.005)
        return {"x": x}

    line = "order #W{n:06d} status=pending carrier=ups note=left at the door\n"

    @server.tool(description="A text result of `mb` megabytes.", structured_output=False)
    def flood(mb: float) -> str:
        size = int(mb * 1_000_000)
        return "".join(line.format(n=i) for i in range(size // len(line) + 1))[:size]

    return server


def serve(role: str, args: list[str]) -> None:
    """The processes the benchmark starts (``--serve ROLE ...``)."""
    import uvicorn

    if role == "upstream-http":
        app = _upstream_server().streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(args[0]), log_level="warning")
    elif role == "upstream-stdio":
        _upstream_server().run("stdio")
    elif role == "gateway-lag":
        _serve_gateway_with_lag(int(args[0]), Path(args[1]), Path(args[2]), args[3:])
    elif role.startswith("gateway-"):
        from benchmarks.standalone_backend import StandaloneBackend
        from sidecar.agents.gateway import build_gateway

        spec = args[-1]
        inline = role.endswith("-inline")
        if role.startswith("gateway-http"):
            gateway = build_gateway(
                StandaloneBackend(),
                [spec],
                token=TOKEN,
                inline_checks=inline,
                json_response=role.endswith("-json"),
            )
            uvicorn.run(gateway.asgi_app, host="127.0.0.1", port=int(args[0]), log_level="warning")
        else:
            build_gateway(StandaloneBackend(), [spec], inline_checks=inline).run_stdio()
    elif role in ("fastmcp-http", "fastmcp-stdio"):
        _serve_fastmcp(role, args)
    elif role in ("relay-http", "relay-stdio"):
        _serve_bare_relay(role, args)
    elif role == "flooder":
        _flood_forever(args[0], args[1], float(args[2]), float(args[3]))
    else:
        raise SystemExit(f"unknown role {role}")


def _serve_fastmcp(role: str, args: list[str]) -> None:
    import asyncio
    import contextlib
    import shlex

    import uvicorn
    from fastmcp import Client, FastMCP
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
    from fastmcp.server.providers.proxy import ProxyProvider

    _name, _, target = args[-1].partition("=")
    if target.startswith("http"):
        client = Client(StreamableHttpTransport(target))
    else:
        head, *tail = shlex.split(target)
        client = Client(StdioTransport(head, tail))
    proxy = FastMCP(name="reference")
    proxy.add_provider(ProxyProvider(lambda: client))  # one shared, connected session
    if role == "fastmcp-stdio":

        async def main() -> None:
            async with client:
                await proxy.run_stdio_async(show_banner=False)

        asyncio.run(main())
        return
    app = proxy.http_app(path="/mcp")
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[None]:
        async with client, inner(a):
            yield

    app.router.lifespan_context = lifespan
    uvicorn.run(app, host="127.0.0.1", port=int(args[0]), log_level="warning")


def _serve_bare_relay(role: str, args: list[str]) -> None:
    """The least a relay on the ``mcp`` SDK does: list and call forwarded over one
    upstream session, nothing checked, nothing recorded (the floor the gateway is
    compared with)."""
    import contextlib
    import shlex

    import anyio
    import uvicorn
    from mcp import Client, StdioServerParameters, types
    from mcp.server.lowlevel import Server

    _name, _, target = args[-1].partition("=")
    if target.startswith("http"):
        client = Client(target, mode="legacy")
    else:
        head, *tail = shlex.split(target)
        client = Client(StdioServerParameters(command=head, args=tail), mode="legacy")

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return await client.list_tools()

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        request = types.CallToolRequest(params=params)
        return await client.session.send_request(request, types.CallToolResult)

    relay = Server("relay", on_list_tools=list_tools, on_call_tool=call_tool)
    if role == "relay-stdio":
        from mcp.server.stdio import stdio_server

        async def main() -> None:
            async with client, stdio_server() as (read, write):
                await relay.run(read, write, relay.create_initialization_options())

        anyio.run(main)
        return
    app = relay.streamable_http_app()  # an event stream per request, as the gateway answers
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(a: Any) -> AsyncIterator[None]:
        async with client, inner(a):
            yield

    app.router.lifespan_context = lifespan
    uvicorn.run(app, host="127.0.0.1", port=int(args[0]), log_level="warning")


# ---- 3. isolation --------------------------------------------------------------------
def _flood_forever(url: str, token: str, mb: float, pace_s: float) -> None:
    """Session A: ``big_flood`` every ``pace_s`` seconds (0: back to back) until
    killed, one line per result (its size in bytes).  A raw HTTP client that reads the
    answer's bytes without parsing them: on two cores, a client parsing 20 MB would
    mostly measure its own CPU."""
    import httpx

    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "flooder", "version": "1"},
        },
    }
    with httpx.Client(timeout=120) as http:
        opened = http.post(url, json=init, headers=headers)
        opened.raise_for_status()
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        for n in itertools.count(1):
            started = time.monotonic()
            call = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "big_flood", "arguments": {"mb": mb}},
            }
            size = 0
            with http.stream("POST", url, json=call, headers=headers) as answer:
                for chunk in answer.iter_bytes():
                    size += len(chunk)
            print(size, flush=True)
            time.sleep(max(0.0, pace_s - (time.monotonic() - started)))


def _serve_gateway_with_lag(port: int, home: Path, lag_file: Path, specs: list[str]) -> None:
    """The gateway as ``sidecar gateway`` runs it (the library backend, on a fresh home
    with the hashing embedder), with a task that sleeps 5 ms over and over and records
    the CPU time the event loop's thread spent meanwhile: work that held the loop, apart
    from time the process merely waited for a core (on a shared machine, lateness alone
    would mostly measure the other processes).  The samples (wall-clock time, CPU
    seconds) go to ``lag_file`` when SIGTERM stops it."""
    import anyio

    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from sidecar.agents.gateway import build_gateway
    from sidecar.agents.gateway.guard.library import LibraryBackend
    from sidecar.agents.gateway.proxy.serving import serve_on
    from sidecar.shells.api.serve import bind

    samples: list[tuple[float, float]] = []

    async def sampler() -> None:
        while True:
            start, cpu = time.time(), time.thread_time()
            await anyio.sleep(0.005)
            samples.append((start, time.thread_time() - cpu))

    async def main(gateway: Any, sock: socket.socket) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(sampler)
            await serve_on(gateway, sock)
            tg.cancel_scope.cancel()

    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        gateway = build_gateway(LibraryBackend(sc), specs, token=TOKEN, report_clean=True)
        sock = bind("127.0.0.1", port)
        try:
            anyio.run(main, gateway, sock)
        finally:
            sock.close()
    lag_file.write_text(json.dumps(samples))
