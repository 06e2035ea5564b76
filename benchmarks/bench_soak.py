"""Soak: does a server's footprint stay flat under steady traffic, hour after hour?

``python -m benchmarks.run soak [--quick | --full] [--minutes M]``: a real ``sidecar
serve`` on the demo catalog (the model's ONNX embedder) and a real ``sidecar gateway``
beside it (the example shop over stdio, its memory the server), under steady mixed
traffic from one client process:

- lookups (``POST /v1/search``, a query never asked before each time),
- checks (``POST /v1/check``, a plan and its next call),
- reports (``POST /v1/reports``, sessions with a task text, a fifth of them abandoned at
  a deterministic failure, so the archive and the memory both learn),
- gateway tasks (an MCP session per task, as stateless clients do: look up an order,
  then exchange it; pending orders are refused).

Each minute it samples the resident memory of both processes (with their children),
the size of the home (state, index, archive), what the traffic did and the lookups'
median. The last part of the run (``QUIET_SHARE`` of it) brings no new evidence:
reports are replays of earlier ones and the gateway is left alone, so a state that
grows there grows without evidence.

Targets: each process's RSS after warm-up within 20% of its value at the end of the
warm-up; the state does not grow while no evidence comes in.  ``--quick`` runs four
minutes (one of warm-up), ``--full`` sixty-five (ten of warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_serve import _build_cache, build_demo_home
from benchmarks.harness.progress import progress
from benchmarks.harness.results import (
    REPO_ROOT,
    emit,
    machine,
    md_table,
    md_targets,
    pyplot,
    revision,
    save_figure,
    target,
)
from benchmarks.harness.services import sidecar_argv, stop_process, wait_until
from benchmarks.serve_process import ServerProcess, server_env

VERDICT = {True: "met", False: "missed", None: "not measured"}
QUIET_SHARE = 0.15
"""The last part of the run, in which no new evidence comes in."""
FLAT = 1.20
"""Most a process's RSS may reach after warm-up, against its value at warm-up's end."""
RATES = {"lookup": 4.0, "check": 3.0, "report": 1.0, "gateway": 0.5}
"""Operations per second the client aims at (a gateway task is two calls)."""
_TEXT = (
    "weather forecast price stock flight hotel translate summarize email calendar file "
    "image chart query table convert currency route search news review recipe product "
    "timezone word define speech text extract parse html pdf csv sentiment language "
    "spell crypto company report archive resize caption code sandbox python unit"
)
WORDS = tuple(_TEXT.split())
FAILURE = "Error: 404 Not Found: the page {url} does not exist"
"""A deterministic refusal (the classifier archives it at once)."""


# ---- the traffic ---------------------------------------------------------------------
def query(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, rng.randint(3, 7))) + f" {rng.randint(0, 10**6)}"


def fetch_steps(rng: random.Random, n: int, fail: bool) -> list[dict[str, Any]]:
    url = f"https://example.org/{rng.choice(WORDS)}/{n}"
    steps: list[dict[str, Any]] = [
        {
            "tool": "web_search",
            "arguments": {"query": query(rng)},
            "output": {"results": [{"url": url, "title": rng.choice(WORDS)}]},
            "error": None,
        },
        {
            "tool": "web_fetch",
            "arguments": {"url": url},
            "output": None if fail else {"status": 200, "html": "<p>" + query(rng) + "</p>"},
            "error": FAILURE.format(url=url) if fail else None,
        },
    ]
    if not fail:
        steps.append(
            {
                "tool": rng.choice(("html_parser", "html_to_markdown", "text_summarizer")),
                "arguments": {"html": steps[1]["output"]["html"]},
                "output": {"text": query(rng)},
                "error": None,
            }
        )
    return steps


def report(rng: random.Random, n: int) -> dict[str, Any]:
    fail = rng.random() < 0.2
    return {
        "steps": fetch_steps(rng, n, fail),
        "outcome": "abandoned" if fail else "completed",
        "task_input": "Find and read " + query(rng),
        "session_id": f"soak-{n}",
        "report_id": f"soak-{n}",
    }


def check(rng: random.Random, n: int) -> dict[str, Any]:
    steps = fetch_steps(rng, n, fail=False)[:1]
    url = steps[0]["output"]["results"][0]["url"]
    return {"steps": steps, "next": {"tool": "web_fetch", "arguments": {"url": url}}}


@dataclass
class Counts:
    ops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RATES, 0))
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RATES, 0))
    new_sessions: int = 0
    replays: int = 0
    lookup_ms: list[float] = field(default_factory=list)
    quiet: bool = False
    last_error: str = ""


async def paced(kind: str, deadline: float, counts: Counts, one: Any) -> None:
    """``one(n)`` at ``RATES[kind]`` per second until ``deadline`` (a slow answer is
    not made up for: the rate is a ceiling)."""
    gap = 1.0 / RATES[kind]
    n = 0
    while (now := time.monotonic()) < deadline:
        try:
            await one(n)
            counts.ops[kind] += 1
        except Exception as exc:  # counted and shown: a soak goes on through errors
            counts.errors[kind] += 1
            counts.last_error = f"{kind}: {type(exc).__name__}: {exc}"[:300]
        n += 1
        await asyncio.sleep(max(0.0, gap - (time.monotonic() - now)))


async def http_traffic(url: str, token: str, deadline: float, counts: Counts, seed: int) -> None:
    import httpx

    rng = random.Random(seed)
    sent: list[dict[str, Any]] = []
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    ) as http:

        async def lookup(n: int) -> None:
            started = time.perf_counter()
            answer = await http.post("/v1/search", json={"query": query(rng), "k": 5})
            answer.raise_for_status()
            counts.lookup_ms.append((time.perf_counter() - started) * 1000)

        async def one_check(n: int) -> None:
            (await http.post("/v1/check", json=check(rng, n))).raise_for_status()

        async def one_report(n: int) -> None:
            replay = counts.quiet and bool(sent)
            body = rng.choice(sent) if replay else report(rng, counts.new_sessions + n)
            answer = await http.post("/v1/reports", json={"reports": [body]})
            answer.raise_for_status()
            if replay:
                counts.replays += 1
            else:
                sent.append(body)
                counts.new_sessions += 1

        await asyncio.gather(
            paced("lookup", deadline, counts, lookup),
            paced("check", deadline, counts, one_check),
            paced("report", deadline, counts, one_report),
        )


async def gateway_traffic(url: str, token: str, deadline: float, counts: Counts) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def task(n: int) -> None:
        if counts.quiet:  # a new session is new evidence
            return
        order = f"#W{n % 50}"
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("get_order", {"order_id": order})
            await session.call_tool("exchange", {"order_id": order, "item": f"item-{n}"})

    await paced("gateway", deadline, counts, task)


# ---- the samples ---------------------------------------------------------------------
def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, ()))
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
        total += int(found.group(1)) if found else 0
    return round(total / 1024, 1)


def sizes_mb(home: Path) -> dict[str, float]:
    """The home's bytes by part: the state (with its journal), the index, the archive."""
    parts = {"state": 0, "index": 0, "archive": 0, "other": 0}
    for path in home.rglob("*"):
        if not path.is_file():
            continue
        rel = path.relative_to(home).parts
        kind = (
            "state"
            if rel[0].startswith("state")
            else "index"
            if rel[0] in ("chroma", "index", "indexes")
            else "archive"
            if rel[0] in ("cold", "archive", "cold_store")
            else "other"
        )
        try:
            parts[kind] += path.stat().st_size
        except OSError:
            continue
    return {k: round(v / 2**20, 2) for k, v in parts.items()}


def sample(start: float, server: int, gateway: int, home: Path, counts: Counts) -> dict[str, Any]:
    lookups, counts.lookup_ms = counts.lookup_ms, []
    return {
        "minute": round((time.monotonic() - start) / 60, 2),
        "server_rss_mb": tree_rss_mb(server),
        "gateway_rss_mb": tree_rss_mb(gateway),
        "home_mb": sizes_mb(home),
        "ops": dict(counts.ops),
        "errors": dict(counts.errors),
        "new_sessions": counts.new_sessions,
        "replays": counts.replays,
        "quiet": counts.quiet,
        "lookup_p50_ms": round(statistics.median(lookups), 2) if lookups else None,
    }


async def sampler(
    every_s: float, quiet_at: float, deadline: float, pids: tuple[int, int], home: Path,
    counts: Counts, samples: list[dict[str, Any]],
) -> None:  # fmt: skip
    start = time.monotonic()
    while True:
        samples.append(sample(start, *pids, home, counts))
        last = samples[-1]
        progress(
            f"soak: minute {last['minute']}: server {last['server_rss_mb']} MB, gateway "
            f"{last['gateway_rss_mb']} MB, home {sum(last['home_mb'].values()):.1f} MB, "
            f"ops {last['ops']}, errors {sum(last['errors'].values())}"
        )
        if time.monotonic() >= deadline:
            return
        counts.quiet = time.monotonic() >= quiet_at
        await asyncio.sleep(min(every_s, max(0.0, deadline - time.monotonic())))


# ---- the processes -------------------------------------------------------------------
class Gateway:
    """``sidecar gateway`` beside the server that owns ``home``, its URL read from what
    it announces."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        shop = f"shop={sys.executable} {REPO_ROOT / 'examples' / 'shop_server.py'}"
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            [*sidecar_argv(), "gateway", "--port", "0", shop],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._out,
        )

    def wait_url(self, timeout_s: float = 120) -> str:
        def announced() -> str | None:
            found = re.search(r"serving (http://\S+/mcp)", self.log.read_text(errors="replace"))
            return found.group(1) if found else None

        return wait_until(announced, self.proc, timeout_s, "sidecar gateway", self.log, poll=0.2)

    def stop(self) -> None:
        stop_process(self.proc)
        self._out.close()


@dataclass(frozen=True)
class Plan:
    minutes: float
    warmup_min: float
    every_s: float


def plan(quick: bool, minutes: float | None) -> Plan:
    total = minutes if minutes is not None else (4.0 if quick else 65.0)
    return Plan(total, min(10.0, max(1.0, total / 6)), 10.0 if total <= 10 else 60.0)


def soak(p: Plan, tmp: Path, seed: int) -> tuple[list[dict[str, Any]], Counts]:
    cache, home = tmp / "model", tmp / "home"
    _build_cache(cache)
    build_demo_home(home, cache)
    env = server_env(home, "minilm-onnx", cache)
    counts, samples = Counts(), []
    with ServerProcess(home, env, tmp / "serve.log") as server:
        server.wait_url()
        server.wait_ready()
        token = server.headers["Authorization"].split()[1]
        gateway = Gateway(env, tmp / "gateway.log")
        try:
            mcp_url = gateway.wait_url()
            start = time.monotonic()
            deadline = start + p.minutes * 60
            quiet_at = start + p.minutes * 60 * (1 - QUIET_SHARE)
            pids = (server.proc.pid, gateway.proc.pid)

            async def everything() -> None:
                await asyncio.gather(
                    sampler(p.every_s, quiet_at, deadline, pids, home, counts, samples),
                    http_traffic(server.url, token, deadline, counts, seed),
                    gateway_traffic(mcp_url, token, deadline, counts),
                )

            asyncio.run(everything())
        finally:
            gateway.stop()
    return samples, counts


# ---- the verdict ---------------------------------------------------------------------
def flatness(samples: list[dict[str, Any]], warmup_min: float, key: str) -> dict[str, Any]:
    after = [s for s in samples if s["minute"] >= warmup_min]
    if not after:  # a run shorter than its warm-up says nothing of flatness
        keys = ("at_warmup_mb", "peak_mb", "last_mb", "peak_over_warmup", "slope_mb_per_hour")
        return dict.fromkeys(keys) | {"met": None}
    base = after[0][key]
    peak = max(s[key] for s in after)
    minutes = [s["minute"] for s in after]
    values = [s[key] for s in after]
    slope = statistics.linear_regression(minutes, values).slope if len(after) > 1 else 0.0
    return {
        "at_warmup_mb": base,
        "peak_mb": peak,
        "last_mb": after[-1][key],
        "peak_over_warmup": round(peak / base, 3) if base else None,
        "slope_mb_per_hour": round(slope * 60, 1),
        "met": bool(base) and peak / base <= FLAT,
    }


def state_growth(samples: list[dict[str, Any]]) -> dict[str, Any]:
    def total(s: dict[str, Any]) -> float:
        return float(sum(s["home_mb"].values()))

    busy = [s for s in samples if not s["quiet"]]
    quiet = [s for s in samples if s["quiet"]]
    first, last_busy = busy[0], busy[-1]
    sessions = last_busy["new_sessions"] - first["new_sessions"]
    per_session_kb = (total(last_busy) - total(first)) * 1024 / sessions if sessions else None
    grown = total(quiet[-1]) - total(quiet[0]) if len(quiet) > 1 else None
    return {
        "busy_growth_mb": round(total(last_busy) - total(first), 2),
        "new_sessions": sessions,
        "kb_per_new_session": round(per_session_kb, 2) if per_session_kb is not None else None,
        "quiet_minutes": round(quiet[-1]["minute"] - quiet[0]["minute"], 2) if quiet else 0,
        "quiet_replays": quiet[-1]["replays"] if quiet else 0,
        "quiet_growth_mb": round(grown, 3) if grown is not None else None,
        "met": None if grown is None else grown <= 0.5,
    }


def run(quick: bool, seed: int = 7, minutes: float | None = None) -> dict[str, Any]:
    p = plan(quick, minutes)
    with tempfile.TemporaryDirectory(prefix="sidecar-soak-") as tmp:
        samples, counts = soak(p, Path(tmp), seed)
    return {
        "benchmark": "soak",
        "question": "does a server's footprint stay flat under steady mixed traffic, and does "
        "its state grow only with new evidence",
        "revision": revision(),
        "machine": machine(),
        "plan": p.__dict__,
        "rates_per_s": RATES,
        "samples": samples,
        "last_error": counts.last_error,
        "server": (server := flatness(samples, p.warmup_min, "server_rss_mb")),
        "gateway": (gateway := flatness(samples, p.warmup_min, "gateway_rss_mb")),
        "state": (state := state_growth(samples)),
        "targets": [
            target(
                "server RSS flat",
                f"peak <= {FLAT}x warm-up",
                server["peak_over_warmup"],
                server["met"],
            ),
            target(
                "gateway RSS flat",
                f"peak <= {FLAT}x warm-up",
                gateway["peak_over_warmup"],
                gateway["met"],
            ),
            target(
                "state without new evidence",
                "grows <= 0.5 MB",
                state["quiet_growth_mb"],
                state["met"],
            ),
        ],
    }


def markdown(result: dict[str, Any]) -> str:
    p, state = result["plan"], result["state"]
    last = result["samples"][-1]
    rows = [
        [name, r["at_warmup_mb"], r["peak_mb"], r["last_mb"], r["peak_over_warmup"],
         r["slope_mb_per_hour"], VERDICT[r["met"]]]
        for name, r in (("server", result["server"]), ("gateway", result["gateway"]))
    ]  # fmt: skip
    lines = [
        f"Soak: {p['minutes']} min ({p['warmup_min']} of warm-up), sampled every "
        f"{p['every_s']:.0f} s; operations {last['ops']}, errors {last['errors']}.",
        "",
        md_table(
            [
                "process",
                "RSS at warm-up MB",
                "peak MB",
                "last MB",
                "peak / warm-up",
                "slope MB/h",
                f"flat (<= {FLAT})",
            ],
            rows,
        ),
        "",
        f"State: +{state['busy_growth_mb']} MB over {state['new_sessions']} new sessions "
        f"({state['kb_per_new_session']} KB each); over the last {state['quiet_minutes']} "
        f"min, {state['quiet_replays']} replayed reports and no new evidence: "
        f"+{state['quiet_growth_mb']} MB ({VERDICT[state['met']]}).",
        "",
        md_targets(result["targets"]),
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    samples = result["samples"]
    minutes = [s["minute"] for s in samples]
    fig, (rss, home) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    rss.plot(minutes, [s["server_rss_mb"] for s in samples], label="sidecar serve")
    rss.plot(minutes, [s["gateway_rss_mb"] for s in samples], label="sidecar gateway")
    rss.axvline(result["plan"]["warmup_min"], color="grey", linestyle=":", label="warm-up")
    rss.set_ylabel("RSS (MB)")
    rss.set_ylim(bottom=0)
    rss.legend()
    for part in ("state", "index", "archive"):
        home.plot(minutes, [s["home_mb"][part] for s in samples], label=part)
    quiet = [s["minute"] for s in samples if s["quiet"]]
    if quiet:
        home.axvspan(quiet[0], minutes[-1], color="grey", alpha=0.15, label="no new evidence")
    home.set_ylabel("home (MB)")
    home.set_xlabel("minutes")
    home.legend()
    fig.suptitle("Soak: steady mixed traffic")
    return [save_figure(plt, fig, out_dir / "soak.png")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true")
    size.add_argument("--full", action="store_true")
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    emit(run(quick=not args.full, minutes=args.minutes), args.out)


if __name__ == "__main__":
    main()
