"""Real parts for the gateway tests: the shop server as a subprocess (stdio or HTTP), the
gateway served by uvicorn on a loopback port the OS chooses, and the ``mcp`` client."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from sidecar.agents.gateway import Upstream
from sidecar.agents.gateway.server import Gateway

SHOP = str(Path(__file__).with_name("shop_server.py"))
TOKEN = "test-token-0123456789"


def shop_stdio(name: str = "shop") -> Upstream:
    return Upstream(name, command=(sys.executable, SHOP))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def shop_http() -> Iterator[str]:
    """The shop over streamable HTTP in its own process; yields its URL."""
    yield from serving_script(SHOP)


def serving_script(script: str) -> Iterator[str]:
    """``python script --http PORT`` (an MCP server over streamable HTTP) in its own
    process, once it answers; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, script, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            assert proc.poll() is None, f"{script} exited"
            assert time.monotonic() < deadline, f"{script} did not start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def serving(target: Gateway | Any, path: str = "/mcp") -> AsyncIterator[str]:
    """The gateway's ASGI app (or any app holding it at ``path``) under uvicorn on a
    socket bound to 127.0.0.1:0; yields the MCP URL.  Leaving stops the server and runs
    the app's shutdown."""
    import uvicorn

    app = target.asgi_app if isinstance(target, Gateway) else target
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    with sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(30):
                while not server.started:
                    assert not server.should_exit, "the gateway failed to start"
                    await anyio.sleep(0.02)
            try:
                yield f"http://127.0.0.1:{port}{path}"
            finally:
                server.should_exit = True


@contextlib.asynccontextmanager
async def mcp_session(
    url: str,
    token: str | None = TOKEN,
    on_message: Callable[[Any], Any] | None = None,
    max_event: int | None = 1024 * 1024,
    **callbacks: Any,
) -> AsyncIterator[Any]:
    """A real MCP client session (initialize handshake) over streamable HTTP.
    ``max_event``: the client's bound on one event (the SDK's 1 MiB; ``None``: none);
    ``callbacks``: ``ClientSession`` callbacks (sampling, elicitation, logging)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = create_mcp_http_client(headers=headers)
    kwargs: dict[str, Any] = {} if on_message is None else {"message_handler": on_message}
    kwargs.update(callbacks)
    async with (
        http,
        streamable_http_client(url, http_client=http, max_sse_event_size=max_event) as (
            read,
            write,
        ),
        ClientSession(read, write, **kwargs) as session,
    ):
        await session.initialize()
        yield session


async def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait for something the gateway does in the background (a report after a session
    ends); fails after ``timeout``."""
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.02)


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)
