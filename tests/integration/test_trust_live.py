"""The poisoning probes against a real ``sidecar serve`` with named tokens: one agent's
fabricated sessions never block, a second source does, ``sidecar forget`` undoes one,
and an agent may neither write a condition by hand nor act as an operator."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.sidecar.test_call_memory import good_session, lookup
from tests.sidecar.test_trust import TOKENS, fabricated, tokens_file

BIN = Path(sys.executable).parent


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    home = tmp_path / "home"
    home.mkdir()
    tokens_file(home / "tokens.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
    env["SIDECAR_MODEL_CACHE"] = os.environ["SIDECAR_MODEL_CACHE"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(BIN / "sidecar"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                if httpx.get(f"{url}/livez", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, home, env
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def post(url: str, token: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(
        f"{url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )


def decision(url: str, token: str) -> str:
    body = {"steps": [lookup("#C3000", "pending")],
            "next": {"tool": "exchange_items", "arguments": {"order_id": "#C3000"}}}  # fmt: skip
    answer = post(url, token, "/v1/check", body)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["decision"])


def test_poisoning_probes_on_a_running_server(server: tuple[str, Path, dict[str, str]]) -> None:
    url, home, env = server
    operator = (home / "token").read_text().strip()
    alice, bob = TOKENS["alice"], TOKENS["bob"]
    reports = [good_session(n) for n in range(20)]
    assert post(url, operator, "/v1/reports", {"reports": reports}).status_code == 200
    post(url, alice, "/v1/reports", {"reports": [fabricated(n, "alice") for n in range(4)]})
    assert decision(url, alice) == "warn"  # one untrusted source: never a block
    post(url, bob, "/v1/reports", {"reports": [fabricated(0, "bob")]})
    assert decision(url, alice) == "block"  # two sources
    # the CLI, beside the server, forgets one source through it
    forgot = subprocess.run(
        [str(BIN / "sidecar"), "forget", "--source", "bob", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["source"] == "bob"
    assert decision(url, alice) == "warn"
    # an agent writes no condition by hand, and is no operator
    condition = {"tool": "get_order", "signature": "Error: no",
                 "predicate": {"feature": "value:*", "op": "==", "value": "{}"}}  # fmt: skip
    hand = {**fabricated(9, "alice"), "constraint": {"conditions": [condition]}}
    (result,) = post(url, alice, "/v1/reports", {"reports": [hand]}).json()["results"]
    assert result["status"] == "rejected"
    assert post(url, alice, "/v1/evictions", {}).status_code == 403
    assert post(url, alice, "/v1/sources/alice/forget", {}).status_code == 403
    # over MCP too: an agent may not forget; the operator's forget restores the verdict
    post(url, bob, "/v1/reports", {"reports": [fabricated(1, "bob")]})
    assert decision(url, alice) == "block"
    refused = mcp_call(url, alice, "forget_source", {"source": "bob"})
    assert refused.is_error and "forbidden" in refused.content[0].text
    assert decision(url, alice) == "block"
    forgot = mcp_call(url, operator, "forget_source", {"source": "bob"})
    assert not forgot.is_error and forgot.structured_content["source"] == "bob"
    assert decision(url, alice) == "warn"


def mcp_call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def once() -> Any:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            http,
            streamable_http_client(f"{url}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            return await session.call_tool(tool, arguments)

    return asyncio.run(once())
