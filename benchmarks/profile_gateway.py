"""Where a forwarded ``tools/call`` spends its time inside the gateway.

An upstream whose one tool sleeps 5 ms (the one ``bench_gateway`` uses) and the gateway
in front of it over streamable HTTP, each in its own process; one ``mcp`` client calls
the tool through the gateway ``--calls`` times (after a warm-up).  Inside the gateway,
each step of the call's path is timed (wall clock, per call): where the request comes
from (``origin``), the session it joins (``linking``), the session's steps, the check
against the memory (with its thread hop, and the check's own work inside the thread),
the upstream round trip, the evidence a result becomes, the session's record, and the
response's serialisation pass; the whole handler too, and a ``cProfile`` of the process
(its top functions by own time).  The client's own round trip is next to it: what is
not inside the handler is the SDK's (parsing the request, writing the response, the
transports).

``python -m benchmarks.profile_gateway [--calls N] [--cprofile] [--out FILE]`` (JSON on
stdout; ``--cprofile`` adds the profile, which slows every step it times).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.bench_gateway import _http_session, _start_http
from benchmarks.gateway_servers import TOKEN
from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine, revision
from benchmarks.harness.services import stop_process

STEPS = (
    ("on_call", "sidecar.agents.gateway.server", "Gateway", "on_call"),
    ("origin", "sidecar.agents.gateway.proxy.protocol", "Connections", "origin"),
    ("relay_key", "sidecar.agents.gateway.proxy.protocol", "Connections", "relay_key"),
    ("linking", "sidecar.agents.gateway.guard.linking", "Linker", "for_call"),
    ("session_steps", "sidecar.agents.gateway.guard.sessions", "SessionBook", "steps"),
    ("check_with_hop", "sidecar.agents.gateway.guard.workers", "Workers", "checked"),
    ("check_itself", "sidecar.agents.gateway.guard.calls", "CallPath", "_guard"),
    ("upstream", "sidecar.agents.gateway.proxy.upstream", "UpstreamLink", "call_tool"),
    ("evidence", "sidecar.agents.gateway.guard.calls", "CallPath", "_evidence"),
    ("record", "sidecar.agents.gateway.guard.calls", "CallPath", "record"),
    ("learn", "sidecar.agents.gateway.guard.calls", "CallPath", "learn"),
    ("serialise_pass", "sidecar.agents.gateway.proxy.bulk", None, "present"),
)


def _timed(name: str, fn: Callable[..., Any], times: dict[str, list[float]]) -> Any:
    import inspect

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                times.setdefault(name, []).append(time.perf_counter() - start)

        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times.setdefault(name, []).append(time.perf_counter() - start)

    return wrapper


def _instrument(times: dict[str, list[float]]) -> None:
    import importlib

    for name, module_name, owner, attr in STEPS:
        module = importlib.import_module(module_name)
        target = module if owner is None else getattr(module, owner)
        fn = getattr(target, attr, None)
        if fn is not None:
            setattr(target, attr, _timed(name, fn, times))


def serve(port: int, upstream: str, out: Path, profiled: bool) -> None:
    """The instrumented gateway (in its own process), until SIGTERM."""
    import uvicorn

    from benchmarks.standalone_backend import StandaloneBackend
    from sidecar.agents.gateway import build_gateway

    times: dict[str, list[float]] = {}
    _instrument(times)
    # uvicorn raises the signal it stopped on again once it has shut down: with the
    # default handler the process would die before writing what it measured
    signal.signal(signal.SIGTERM, lambda *_: None)
    gateway = build_gateway(StandaloneBackend(), [upstream], token=TOKEN)
    profile = cProfile.Profile() if profiled else None
    if profile is not None:
        profile.enable()
    try:
        uvicorn.run(gateway.asgi_app, host="127.0.0.1", port=port, log_level="warning")
    finally:
        text = io.StringIO()
        if profile is not None:
            profile.disable()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(30)
        out.write_text(json.dumps({"times": times, "profile": text.getvalue()}))


def _per_call(values: list[float], warmup: int) -> dict[str, float]:
    kept = values[warmup:] if len(values) > warmup else values
    return {
        "n": len(kept),
        "p50_us": round(statistics.median(kept) * 1e6, 1),
        "mean_us": round(statistics.fmean(kept) * 1e6, 1),
    }


def run(calls: int, profiled: bool, warmup: int = 50) -> dict[str, Any]:
    import tempfile

    import anyio

    procs = []
    client: list[float] = []
    with tempfile.TemporaryDirectory(prefix="profile-gw-") as tmp:
        out = Path(tmp) / "profile.json"
        try:
            up, up_url = _start_http("upstream-http")
            procs.append(up)
            gw, gw_url = _start_http_profiled(f"up={up_url}", out, profiled)
            procs.append(gw)

            async def calling() -> None:
                async with _http_session(gw_url, TOKEN) as session:
                    for i in range(warmup + calls):
                        start = time.perf_counter()
                        result = await session.call_tool("slow", {"x": i})
                        if i >= warmup:
                            client.append(time.perf_counter() - start)
                        if result.is_error:
                            raise RuntimeError("the call failed")

            progress(f"profile_gateway: {calls} calls through an instrumented gateway")
            anyio.run(calling)
        finally:
            for proc in reversed(procs):
                stop_process(proc, 60)
        found = json.loads(out.read_text())
    steps = {name: _per_call(v, warmup) for name, v in found["times"].items()}
    round_trip = _per_call(client, 0)
    handler = steps.get("on_call", {}).get("p50_us", 0.0)
    upstream = steps.get("upstream", {}).get("p50_us", 0.0)
    return {
        "benchmark": "profile_gateway",
        "revision": revision(),
        "machine": machine(),
        "calls": calls,
        "client_round_trip": round_trip,
        "steps": steps,
        "derived_p50_us": {
            "handler_minus_upstream": round(handler - upstream, 1),
            "outside_handler (SDK, transports)": round(round_trip["p50_us"] - handler, 1),
        },
        "profile_top": found["profile"],
    }


def _start_http_profiled(upstream: str, out: Path, profiled: bool) -> tuple[Any, str]:
    import subprocess

    from benchmarks.bench_gateway import ROOT, _env
    from benchmarks.harness.services import free_port, wait_mcp

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "benchmarks.profile_gateway", "--serve", str(port), upstream),
            *(str(out), "1" if profiled else "0"),
        ],
        env=_env(),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, wait_mcp(proc, port, "the gateway")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        serve(int(argv[1]), argv[2], Path(argv[3]), argv[4] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument(
        "--cprofile", action="store_true", help="also run cProfile (which slows every step)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.calls, args.cprofile), args.out)


if __name__ == "__main__":
    main()
