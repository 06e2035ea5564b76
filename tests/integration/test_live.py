"""A real ``sidecar serve`` process on a free loopback port: MCP round trip with the
``mcp`` client, the CLI over HTTP, the server lock, and a load test during an eviction."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Sidecar, Tool
from sidecar.demo import demo_tools
from tests.sidecar.helpers import abandoned

SCRIPT = str(Path(sys.executable).with_name("sidecar"))
FATAL = ["web_search", "html_parser", "llm_extractor"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "SIDECAR_HOME": str(home),
            "SIDECAR_EMBEDDER": "hashing",
            "SIDECAR_EVICT_MIN_CHAINS": "1",
        }
        self.env.pop("SIDECAR_TOKEN", None)
        started = time.perf_counter()
        # a file, not a pipe: nobody reads a pipe while the server runs, and once its
        # 64 KiB fill up with request log lines, the server blocks on its next log line
        self.stderr_path = home.parent / f"server-{self.port}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [SCRIPT, "serve", "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/livez", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
            assert self.proc.poll() is None, self.stderr_path.read_text()
        self.ready_s = time.perf_counter() - started
        self.token = (home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._stderr.close()
        return self.stderr_path.read_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("live") / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools(demo_tools())
    srv = Server(home)
    yield srv
    log = srv.stop()
    assert srv.token not in log  # the token is never logged
    assert '"event": "request"' in log  # structured request log


def test_mcp_round_trip(server: Server) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def session_calls() -> dict[str, Any]:
        http = create_mcp_http_client(headers=server.headers)
        async with (
            http,
            streamable_http_client(f"{server.url}/mcp", http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            listed = await session.list_tools()
            tools = {t.name: t for t in listed.tools}
            report = abandoned(FATAL, "HTTP 413", rule="mcp rule")
            reported = await session.call_tool("report_chain", {"report": report})
            search = await session.call_tool(
                "search_tools",
                {"query": "extract prices from text", "k": 3, "after": FATAL[:2]},
            )
            checked = await session.call_tool("check_plan", {"plan": FATAL})
            pointer = reported.structured_content["pointer"]
            audited = await session.call_tool("audit_chain", {"pointer": pointer})
            bad = await session.call_tool("audit_chain", {"pointer": "nope://x"})
            return {
                "tools": tools,
                "reported": reported.structured_content,
                "search": search.structured_content,
                "checked": checked.structured_content,
                "audited": audited.structured_content,
                "bad": bad,
            }

    out = asyncio.run(session_calls())
    tools = out["tools"]
    assert set(tools) == {"search_tools", "check_plan", "report_chain", "audit_chain"}
    assert tools["search_tools"].annotations.read_only_hint is True
    assert tools["check_plan"].annotations.read_only_hint is True
    assert tools["audit_chain"].annotations.read_only_hint is True
    assert tools["report_chain"].annotations.read_only_hint is False
    assert tools["report_chain"].annotations.idempotent_hint is True
    assert out["reported"]["status"] == "archived"
    assert "llm_extractor" not in [h["tool_id"] for h in out["search"]["hits"]]
    assert out["search"]["withheld"][0]["tool_id"] == "llm_extractor"
    assert out["checked"]["safe"] is False
    assert out["audited"]["rule"] == "mcp rule"
    assert out["bad"].is_error
    assert "bad cold storage pointer" in out["bad"].content[0].text


def cli(server: Server, *args: str, url: bool = True) -> subprocess.CompletedProcess[str]:
    extra = ["--url", server.url] if url else []
    return subprocess.run(
        [SCRIPT, *args, *extra], env=server.env, capture_output=True, text=True, timeout=120
    )


def test_cli_over_http(server: Server, tmp_path: Path) -> None:
    found = cli(server, "search", "weather forecast", "-k", "2", "--json")
    assert found.returncode == 0, found.stderr
    assert len(json.loads(found.stdout)["hits"]) == 2
    line = json.dumps(abandoned(["geocoder", "route_planner"], "HTTP 404"))
    reports = tmp_path / "r.jsonl"
    reports.write_text(line + "\n")
    reported = cli(server, "report", str(reports), "--json")
    assert reported.returncode == 0, reported.stderr
    assert json.loads(reported.stdout)["status"] == "archived"
    blocked = cli(server, "check", "geocoder,route_planner", "--json")
    assert blocked.returncode == 3
    missing = cli(server, "audit", "cold://chains/nope")
    assert missing.returncode == 5 and "nothing archived" in missing.stderr


def test_local_writes_refuse_while_the_server_owns_the_home(server: Server, tmp_path: Path) -> None:
    reports = tmp_path / "r.jsonl"
    reports.write_text(json.dumps(abandoned(["a", "b"], "HTTP 400")) + "\n")
    proc = cli(server, "report", str(reports), url=False)
    assert proc.returncode == 6
    assert "a sidecar server owns" in proc.stderr and "--url" in proc.stderr
    assert cli(server, "check", "a,b", url=False).returncode == 0  # reads are fine


def test_load_during_a_batch_eviction(tmp_path: Path) -> None:
    """8 concurrent lookup clients while a batch eviction runs: zero errors, and no
    lookup that started after a tool's eviction committed returns it."""
    home = tmp_path / "home"
    tools = [Tool(f"tool_{i:03d}", f"tool {i} handles task {i % 7}") for i in range(300)]
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools(tools)
        for i in range(0, 200, 2):
            sc.report(
                abandoned([f"tool_{i:03d}", f"tool_{i + 1:03d}", "tool_299"], f"HTTP 400 {i}")
            )
    srv = Server(home)
    try:
        client_errors: list[str] = []
        lookups: list[tuple[float, float, list[str]]] = []
        stop = threading.Event()

        def client(n: int) -> None:
            with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as http:
                while not stop.is_set():
                    started = time.time()
                    r = http.post("/v1/search", json={"query": f"task {n}", "k": 10})
                    if r.status_code != 200:
                        client_errors.append(f"{r.status_code} {r.text[:100]}")
                        continue
                    ids = [h["tool_id"] for h in r.json()["hits"]]
                    lookups.append((started, time.time(), ids))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=600) as http:
            evicted = http.post("/v1/evictions", json={}).json()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()
    finally:
        srv.stop()
    assert client_errors == []
    assert len(evicted["evicted"]) == 200
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        committed = {t: ev.evicted_at for t, ev in sc.journal.evicted().items()}
    assert len(committed) == 200
    violations = [
        (tool, started - committed[tool])
        for started, _done, ids in lookups
        for tool in ids
        if tool in committed and started > committed[tool]
    ]
    assert violations == []
    latencies = sorted(done - started for started, done, _ in lookups)
    assert len(latencies) > 50
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print(f"\nload: {len(latencies)} lookups, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
          f"server ready in {srv.ready_s:.2f}s")  # fmt: skip


def test_mcp_over_stdio(tmp_path: Path) -> None:
    """`sidecar mcp` speaks MCP on stdin/stdout to the `mcp` client."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home, evict_min_chains=1) as sc:
        sc.add_tools(demo_tools())
    params = StdioServerParameters(
        command=SCRIPT,
        args=["mcp", "--home", str(home)],
        env={**os.environ, "SIDECAR_EMBEDDER": "hashing", "SIDECAR_EVICT_MIN_CHAINS": "1"},
    )

    async def calls() -> tuple[set[str], dict[str, Any]]:
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            checked = await session.call_tool("check_plan", {"plan": ["a", "b"]})
            return names, checked.structured_content

    names, checked = asyncio.run(calls())
    assert names == {"search_tools", "check_plan", "report_chain", "audit_chain"}
    assert checked == {"safe": True, "collisions": []}
