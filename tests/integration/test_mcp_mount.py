"""The MCP transport at ``/mcp`` is built after the server starts: requests that come
first wait for it, a transport that cannot be built says why, and building the app
imports nothing of the ``mcp`` SDK."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from sidecar.shells.api.gate import Message, Receive, Scope, Send
from sidecar.shells.api.mcp_mount import McpMount

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Manager:
    def __init__(self) -> None:
        self.running = False

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        self.running = True
        try:
            yield
        finally:
            self.running = False


class _Server:
    def __init__(self) -> None:
        self.session_manager = _Manager()


async def _transport(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"from the transport"})


async def _request(app: Any) -> tuple[int, bytes]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


async def test_a_request_before_the_transport_is_built_waits_for_it() -> None:
    release = threading.Event()
    server = _Server()

    def build() -> tuple[Any, Any]:
        release.wait(10)
        return server, _transport

    mount = McpMount(build)
    answers: list[tuple[int, bytes]] = []

    async def ask() -> None:
        answers.append(await _request(mount))

    async with anyio.create_task_group() as tasks:
        await tasks.start(mount.serve)
        tasks.start_soon(ask)
        await anyio.sleep(0.2)
        assert answers == []  # waiting, not refused
        release.set()
        with anyio.fail_after(10):
            while not answers:
                await anyio.sleep(0.01)
        assert answers == [(200, b"from the transport")]
        assert server.session_manager.running  # the sessions run while the app serves
        tasks.cancel_scope.cancel()
    assert not server.session_manager.running
    # once the lifespan is over, /mcp says so instead of waiting
    with anyio.fail_after(5):
        status, body = await _request(mount)
    assert status == 503
    assert json.loads(body)["error"]["code"] == "mcp_unavailable"


async def test_a_transport_that_cannot_be_built_says_why() -> None:
    def build() -> tuple[Any, Any]:
        raise RuntimeError("no such module: mcp.server")

    mount = McpMount(build)
    async with anyio.create_task_group() as tasks:
        await tasks.start(mount.serve)
        with anyio.fail_after(10):
            status, body = await _request(mount)
        tasks.cancel_scope.cancel()
    assert status == 503
    error = json.loads(body)["error"]
    assert error["code"] == "mcp_unavailable"
    assert "RuntimeError: no such module: mcp.server" in error["message"]


async def test_without_the_lifespan_mcp_is_unavailable_at_once() -> None:
    mount = McpMount(lambda: (_Server(), _transport))
    with anyio.fail_after(5):
        status, body = await _request(mount)
    assert status == 503
    assert "lifespan" in json.loads(body)["error"]["message"]


def test_building_the_app_imports_nothing_of_the_mcp_sdk(tmp_path: Any) -> None:
    """What keeps the start short: the SDK's server is about a second of imports."""
    code = f"""
import sys
from pathlib import Path
from indexes import HashingEmbedder
from sidecar import Sidecar
from sidecar.shells.api import create_app
with Sidecar.open(embedder=HashingEmbedder(), home=Path({str(tmp_path)!r})) as sc:
    create_app(sc, "token-0123456789abcdef")
print(sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp.")))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
