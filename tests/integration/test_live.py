"""A real ``sidecar serve`` process on a free loopback port: MCP round trip with the
``mcp`` client, the CLI over HTTP, the server lock, and a load test during an eviction."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from indexes import HashingEmbedder
from sidecar import Busy, Sidecar, Tool
from sidecar.demo import demo_tools
from tests.sidecar.helpers import abandoned
from tests.support.live import SCRIPT, STALL_S, Server, wait_for_url

FATAL = ["web_search", "html_parser", "llm_extractor"]


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
    assert f"the operator's console: {srv.url}/console" in log  # announced as it starts


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
    assert set(tools) == {
        "search_tools", "check_plan", "report_chain", "audit_chain", "forget_source",
        "appeal_block",
    }  # fmt: skip
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


def test_commands_on_a_served_home_go_through_its_server(server: Server, tmp_path: Path) -> None:
    """Without --url, a command on a home a server owns is sent to that server (the home's
    server.json names it): the CLI never opens the embedded store behind its back, and
    the library refuses to open the home for writing."""
    reports = tmp_path / "r.jsonl"
    reports.write_text(json.dumps(abandoned(["a", "b"], "HTTP 400")) + "\n")
    proc = cli(server, "report", str(reports), "--json", url=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "archived"
    served = httpx.post(f"{server.url}/v1/check", json={"plan": ["a", "b"]}, headers=server.headers)
    assert served.json()["safe"] is False  # the server itself archived it
    assert cli(server, "check", "a,b", url=False).returncode == 3
    with pytest.raises(Busy, match=r"a sidecar server owns .* --url http://127\.0\.0\.1"):
        Sidecar.open(embedder=HashingEmbedder(), home=server.home)


def until_lookups(lookups: list[Any], n: int, deadline_s: float = 600.0) -> None:
    """Until ``n`` lookups have come back (a hang fails after ``deadline_s``)."""
    deadline = time.monotonic() + deadline_s
    while len(lookups) < n:
        assert time.monotonic() < deadline, f"only {len(lookups)} lookups came back"
        time.sleep(0.05)


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
        # lookups before and after the eviction counted, not timed: a loaded machine
        # serves fewer of them a second
        until_lookups(lookups, 30)
        with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=600) as http:
            evicted = http.post("/v1/evictions", json={}).json()
        until_lookups(lookups, len(lookups) + 30)
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
    p50, p99, p999 = (latencies[int(len(latencies) * q)] * 1000 for q in (0.5, 0.99, 0.999))
    worst = latencies[-1] * 1000
    print(f"\nload: {len(latencies)} lookups, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
          f"p99.9 {p999:.1f} ms, max {worst:.1f} ms, ready in {srv.ready_s:.2f}s")  # fmt: skip
    # a stall detector, not a speed target: nothing a lookup waits on during an
    # eviction may hold it for seconds
    assert worst < STALL_S * 1000, worst


def test_a_server_whose_log_nobody_reads_keeps_answering(tmp_path: Path) -> None:
    """The request log must never block the event loop: here the server's stderr is a
    pipe that is never read, and 64 KiB of log lines would fill it after ~700 requests."""
    home = tmp_path / "home"
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(demo_tools())
    port_env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
    port_env.pop("SIDECAR_TOKEN", None)
    proc = subprocess.Popen(
        [SCRIPT, "serve", "--port", "0"],
        env=port_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = wait_for_url(home, proc)
        headers = {"Authorization": f"Bearer {(home / 'token').read_text().strip()}"}
        with httpx.Client(base_url=url, headers=headers, timeout=STALL_S) as http:
            for i in range(2_000):
                assert http.get("/livez" if i % 2 else "/v1/tools").status_code == 200
    finally:
        proc.kill()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


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

    # the server's stderr goes to a real file: whatever sys.stderr is in this test run
    # (a capture without a file descriptor) must not decide whether the server starts
    errlog = (tmp_path / "mcp.stderr").open("w")

    async def calls() -> tuple[set[str], dict[str, Any]]:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            checked = await session.call_tool("check_plan", {"plan": ["a", "b"]})
            return names, checked.structured_content

    try:
        names, checked = asyncio.run(calls())
    finally:
        errlog.close()
    assert names == {
        "search_tools", "check_plan", "report_chain", "audit_chain", "forget_source",
        "appeal_block",
    }  # fmt: skip
    assert checked == {"safe": True, "collisions": []}


def test_mcp_over_stdio_beside_a_running_server(server: Server, tmp_path: Path) -> None:
    """`sidecar mcp` on a home a server owns (or with --url) sends every call to that
    server over HTTP instead of refusing to open the home."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    errlog = (tmp_path / "mcp.stderr").open("w")
    report = abandoned(["mcp_a", "mcp_b"], "HTTP 400 Bad Request")

    async def calls(args: list[str], **env: str) -> list[Any]:
        params = StdioServerParameters(command=SCRIPT, args=args, env={**server.env, **env})
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            reported = await session.call_tool("report_chain", {"report": report})
            checked = await session.call_tool("check_plan", {"plan": ["mcp_a", "mcp_b"]})
            return [reported.structured_content, checked.structured_content]

    try:
        reported, checked = asyncio.run(calls(["mcp", "--home", str(server.home)]))
        elsewhere = ["mcp", "--home", str(tmp_path / "none"), "--url", server.url]
        by_url = asyncio.run(calls(elsewhere, SIDECAR_TOKEN=server.token))
    finally:
        errlog.close()
    assert reported["status"] == "archived" and checked["safe"] is False
    assert by_url[1] == checked  # the same server answered
    assert not (tmp_path / "none").exists()  # --url opened no home
    served = httpx.post(
        f"{server.url}/v1/check", json={"plan": ["mcp_a", "mcp_b"]}, headers=server.headers
    )
    assert served.json()["safe"] is False  # the server itself archived it
    note = (tmp_path / "mcp.stderr").read_text()
    assert f"every call sent to the sidecar at {server.url}" in note


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_shuts_the_server_down_cleanly(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """SIGTERM (what a supervisor sends) stops `sidecar serve` as SIGINT does: exit 0,
    server.json withdrawn, the home released for the next owner."""
    home = tmp_path / "home"
    Sidecar.open(embedder=HashingEmbedder(), home=home).close()
    srv = Server(home)
    assert (home / "server.json").exists()
    srv.proc.send_signal(signum)
    assert srv.proc.wait(timeout=60) == 0
    log = srv.stop()
    assert f"sidecar stopped ({signum.name})" in log
    assert "Traceback" not in log
    assert not (home / "server.json").exists()
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:  # the lock is free
        assert sc.list_tools() == []


@pytest.mark.parametrize("client", ["urllib", "httpx"])
def test_an_oversized_body_gets_its_413_from_clients_that_send_it_whole(
    server: Server, client: str
) -> None:
    """Python's standard library and httpx send the whole body before they read the
    answer: the server reads and drops it (bounded), so they read the 413, not a broken
    pipe."""
    import urllib.error
    import urllib.request

    body = json.dumps({"query": "x" * 2_000_000}).encode()
    headers = {**server.headers, "content-type": "application/json"}
    url = f"{server.url}/v1/search"
    if client == "urllib":
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        status, answer = refused.value.code, json.loads(refused.value.read())
        refused.value.close()
    else:
        response = httpx.post(url, content=body, headers=headers, timeout=60)
        status, answer = response.status_code, response.json()
    assert status == 413
    assert answer["error"]["code"] == "body_too_large"
