"""Question: how long does a batch eviction take over 10k tools, and how does its cost
grow with the number of archived chains (10k -> 100k)?

Synthetic, seeded world per size: ``--tools`` tools (hashing embedder, so the index
builds fast; the model tokenizer is not used, token counts are approximate), 30% of
them used by completed chains, and N abandoned chains of 2-4 tools.  The intake of the
chains is timed apart (batched ``report_many``); the eviction is ``Sidecar.evict``
with all its moves.  The same-run baseline of a move is the indexing of the catalog
(seconds per evicted tool over seconds per indexed tool).  Emits JSON.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import open_sidecar
from benchmarks.harness.progress import progress, steps
from benchmarks.harness.results import (
    emit,
    machine,
    md_table,
    md_targets,
    pyplot,
    save_figure,
    target,
)
from indexes import HashingEmbedder
from sidecar import Tool
from sidecar.model import CredentialRef


def world(n_tools: int, n_chains: int, seed: int) -> tuple[list[Tool], list[dict[str, Any]]]:
    rng = random.Random(seed)
    tools = [
        Tool(
            f"tool_{i}",
            f"synthetic tool {i} for benchmark",
            credentials=(CredentialRef(f"env:CRED_{i % (n_tools // 4)}"),),
        )
        for i in range(n_tools)
    ]
    reports: list[dict[str, Any]] = []
    reused = rng.sample(range(n_tools), int(n_tools * 0.3))
    for i in range(0, len(reused) - 1, 2):
        reports.append(
            {"topology": [f"tool_{reused[i]}", f"tool_{reused[i + 1]}"], "outcome": "completed"}
        )
    for i in range(n_chains):
        topology = [f"tool_{t}" for t in rng.sample(range(n_tools), rng.randint(2, 4))]
        reports.append(
            {
                "topology": topology,
                "outcome": "abandoned",
                "failure": {"signature": f"HTTP 413 #{i}", "kind": "deterministic"},
                "constraint": {"rule": f"rule {i}"},
            }
        )
    return tools, reports


def run_size(n_tools: int, n_chains: int, seed: int) -> dict[str, Any]:
    tools, reports = world(n_tools, n_chains, seed)
    with (
        tempfile.TemporaryDirectory(prefix="bench-evict-") as tmp,
        open_sidecar(Path(tmp), HashingEmbedder()) as sc,
    ):
        t0 = time.perf_counter()
        sc.add_tools(tools)
        t1 = time.perf_counter()
        results = sc.report_many(reports)
        t2 = time.perf_counter()
        assert sum(r.status == "archived" for r in results) == n_chains
        report = sc.evict()
        t3 = time.perf_counter()
        hot_left = sc.index.count()
    seconds = t3 - t2
    return {
        "tools": n_tools,
        "archived_chains": n_chains,
        "index_build_s": round(t1 - t0, 2),
        "intake_s": round(t2 - t1, 2),
        "intake_chains_per_s": round(n_chains / (t2 - t1), 1),
        "evict_s": round(seconds, 2),
        "evicted": len(report.evicted),
        "kept_with_constraint": len(report.kept),
        "mandates": report.mandates,
        "hot_left": hot_left,
        "tools_per_s": round(len(report.evicted) / seconds, 1),
        "chains_per_s": round(n_chains / seconds, 1),
        "ms_per_chain": round(seconds * 1000 / n_chains, 4),
        "ms_per_evicted_tool": round(seconds * 1000 / max(1, len(report.evicted)), 3),
        "move_vs_index_per_tool": round(
            (seconds / max(1, len(report.evicted))) / ((t1 - t0) / n_tools), 2
        ),
    }


QUICK: tuple[int, tuple[int, ...]] = (2_000, (2_000, 20_000))
"""(tools, archived chains per run)"""
FULL: tuple[int, tuple[int, ...]] = (10_000, (10_000, 100_000))


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    n_tools, sizes = QUICK if quick else FULL
    return measure(n_tools, sizes, seed)


def measure(n_tools: int, sizes: Sequence[int], seed: int) -> dict[str, Any]:
    started = time.perf_counter()
    runs = []
    for n in steps("evict: sizes", sizes):
        progress(f"evict: {n:,} archived chains over {n_tools:,} tools")
        runs.append(run_size(n_tools, n, seed))
    small, large = runs[0], runs[-1]
    growth = round(large["ms_per_chain"] / small["ms_per_chain"], 3)
    return {
        "benchmark": "evict",
        "question": "batch eviction time as the archive grows",
        "machine": machine(),
        "params": {"tools": n_tools, "sizes": list(sizes), "seed": seed},
        "runs": runs,
        "per_chain_cost_growth": growth,
        "per_evicted_tool_cost_growth": round(
            large["ms_per_evicted_tool"] / small["ms_per_evicted_tool"], 3
        ),
        "targets": [
            target(
                f"evict: per-chain cost growth {sizes[0]:,} -> {sizes[-1]:,} chains",
                "<= 1.5",
                growth,
                growth <= 1.5,
            )
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def markdown(result: dict[str, Any]) -> str:
    keys = (
        "archived_chains",
        "intake_s",
        "intake_chains_per_s",
        "evict_s",
        "evicted",
        "kept_with_constraint",
        "mandates",
        "tools_per_s",
        "chains_per_s",
        "ms_per_chain",
        "ms_per_evicted_tool",
        "move_vs_index_per_tool",
    )
    rows = [[r[k] for k in keys] for r in result["runs"]]
    return "\n".join(
        [
            f"## Batch eviction ({result['params']['tools']:,} tools)",
            "",
            md_table(list(keys), rows),
            "",
            f"Per-chain cost growth: {result['per_chain_cost_growth']}; per evicted tool: "
            f"{result['per_evicted_tool_cost_growth']}.",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    chains = [r["archived_chains"] for r in result["runs"]]
    ax.plot(chains, [r["ms_per_chain"] for r in result["runs"]], marker="o", label="ms per chain")
    ax.plot(
        chains,
        [r["ms_per_evicted_tool"] for r in result["runs"]],
        marker="s",
        label="ms per evicted tool",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("archived chains")
    ax.set_title(f"Eviction over {result['params']['tools']:,} tools")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "evict.png")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--sizes", default="10000,100000", help="archived chains per run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    emit(measure(args.tools, sizes, args.seed), args.out)


if __name__ == "__main__":
    main()
