"""Question: what does a lookup cost over HTTP at 10k tools, with and without an
executed prefix, and how fast is a server ready?

Builds a seeded 10k-tool home (hashing embedder, so the catalog builds fast) with
``--constraints`` fatal continuations after ``tool_0 > tool_1``, starts a real
``sidecar serve`` on a free loopback port, and times ``POST /v1/search`` from one
client, against ``GET /livez`` (the HTTP floor) in the same run.  Emits JSON.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_lookup import WORDS
from benchmarks.harness.results import emit, machine
from benchmarks.harness.services import (
    free_port,
    operator_headers,
    start_serve,
    stop_process,
    wait_until,
)
from benchmarks.harness.timing import summary, timed
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--constraints", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        home = Path(tmp) / "home"
        _seed_home(home, rng, args.tools, args.constraints)
        port = free_port()
        env = {**os.environ, "SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing"}
        started = time.perf_counter()
        proc = start_serve(env, subprocess.DEVNULL, port)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: _live(url), proc, START_TIMEOUT_S, "sidecar serve", poll=0.02)
            result: dict[str, Any] = {"server_ready_s": round(time.perf_counter() - started, 2)}
            result |= _measure(url, operator_headers(home), rng, args.repeat)
        finally:
            stop_process(proc)
    for label in ("no_prefix", "prefix_active"):
        result[label]["ratio_vs_livez"] = round(
            result[label]["p50_ms"] / result["livez_floor"]["p50_ms"], 2
        )
    emit(
        {
            "benchmark": "http",
            "question": "lookup latency over HTTP at 10k tools; server ready time",
            "machine": machine(),
            "params": {k: v for k, v in vars(args).items() if k != "out"},
            **result,
        },
        args.out,
    )


START_TIMEOUT_S = 600.0
"""A 10k-tool home loads in well under this on a busy machine."""


def _seed_home(home: Path, rng: random.Random, tools: int, constraints: int) -> None:
    with Sidecar.open(embedder=HashingEmbedder(), home=home) as sc:
        sc.add_tools(
            [
                Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12)))
                for i in range(tools)
            ]
        )
        sc.report_many(
            {
                "topology": ["tool_0", "tool_1", f"tool_{2 + i}"],
                "outcome": "abandoned",
                "failure": {"signature": "HTTP 413", "kind": "deterministic"},
                "constraint": {"rule": f"r{i}"},
            }
            for i in range(constraints)
        )


def _live(url: str) -> bool | None:
    return httpx.get(f"{url}/livez", timeout=1).status_code == 200 or None


def _measure(url: str, headers: dict[str, str], rng: random.Random, repeat: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    with httpx.Client(base_url=url, headers=headers) as http:
        queries = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(64)]
        for label, after in (("no_prefix", []), ("prefix_active", ["tool_0", "tool_1"])):
            it = iter(queries * (repeat // len(queries) + 2))
            for _ in range(20):  # warm
                http.post("/v1/search", json={"query": next(it), "k": 10, "after": after})
            result[label] = summary(
                timed(
                    lambda a=after, i=it: http.post(
                        "/v1/search", json={"query": next(i), "k": 10, "after": a}
                    ).raise_for_status(),
                    repeat,
                )
            )
        result["livez_floor"] = summary(timed(lambda: http.get("/livez"), repeat))
    return result


if __name__ == "__main__":
    main()
