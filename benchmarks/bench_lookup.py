"""Question: what does constraint-aware lookup cost over a raw, unfiltered Chroma query,
and what does a lookup cost end to end with the real model?

Part 1 (``--tools`` synthetic tools, hashing embedder so the catalog builds quickly):
the same query vector goes to (a) Chroma directly, unfiltered, and (b) the sidecar's
lookup with an executed prefix that activates 0 or ``--constraints`` fatal
continuations, the embedding being excluded from both.  Part 2: the 62-tool demo
catalog with all-MiniLM-L6-v2, first and repeated query, embedding included.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit, machine, summary, timed
from indexes import HashingEmbedder, MiniLMEmbedder
from sidecar import Sidecar, Tool
from sidecar.demo import demo_tools

WORDS = [
    "search",
    "parse",
    "extract",
    "weather",
    "stock",
    "email",
    "calendar",
    "file",
    "image",
    "audio",
    "translate",
    "summarize",
    "convert",
    "route",
    "map",
    "price",
    "currency",
    "database",
    "query",
    "chart",
    "code",
    "review",
    "news",
    "flight",
    "hotel",
    "recipe",
    "product",
    "invoice",
    "payment",
    "ticket",
    "user",
    "account",
    "report",
]


def synthetic_tools(n: int, rng: random.Random) -> list[Tool]:
    return [
        Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12)), "unspecified")
        for i in range(n)
    ]


def constrained_part(n_tools: int, n_constraints: int, repeat: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with (
        tempfile.TemporaryDirectory(prefix="bench-lookup-") as tmp,
        Sidecar.open(embedder=HashingEmbedder(), home=Path(tmp)) as sc,
    ):
        t0 = time.perf_counter()
        sc.add_tools(synthetic_tools(n_tools, rng))
        build_s = time.perf_counter() - t0
        # every constraint is prefix (a, b) -> a distinct terminal tool
        for i in range(n_constraints):
            sc.report(
                {
                    "topology": ["tool_0", "tool_1", f"tool_{2 + i % (n_tools - 2)}"],
                    "outcome": "abandoned",
                    "failure": {"signature": "HTTP 413", "kind": "deterministic"},
                    "constraint": {"rule": f"r{i}"},
                }
            )
        collection = sc.index._collection
        queries = [
            sc.embedder.embed([" ".join(rng.choice(WORDS) for _ in range(6))])[0]
            for _ in range(repeat)
        ]
        q_raw = iter(queries * 2)
        raw = timed(lambda: collection.query(query_embeddings=[next(q_raw)], n_results=10), repeat)
        results: dict[str, Any] = {"raw_chroma": summary(raw)}
        for label, after in (("no_prefix", []), ("prefix_active", ["tool_0", "tool_1"])):
            q_it = iter(queries * 2)
            samples = timed(lambda a=after, it=q_it: sc.search_vector(next(it), 10, a), repeat)
            results[label] = summary(samples)
            results[label]["ratio_vs_raw_chroma"] = round(
                results[label]["p50_ms"] / results["raw_chroma"]["p50_ms"], 3
            )
        blocked = sc.matcher().next_steps(["tool_0", "tool_1"])[0]
        results["constraints_active_after_prefix"] = len(blocked)
        results["index_build_s"] = round(build_s, 2)
        return results


def model_part(repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-lookup-model-") as tmp:
        embedder = MiniLMEmbedder()
        t0 = time.perf_counter()
        with Sidecar.open(embedder=embedder, home=Path(tmp)) as sc:
            sc.add_tools(demo_tools())
            load_and_index_s = time.perf_counter() - t0
            first = timed(lambda: sc.search("what's the weather in Lisbon", k=5), 1)
            again = timed(lambda: sc.search("what's the weather in Lisbon", k=5), repeat)
            vec = embedder.embed(["x"])[0]
            embed_only = timed(lambda: embedder.embed(["what's the weather in Lisbon"]), repeat)
            del vec
    return {
        "catalog_tools": len(demo_tools()),
        "model_load_and_index_s": round(load_and_index_s, 2),
        "first_query_ms": round(first[0], 2),
        "repeated_query": summary(again),
        "embedding_only": summary(embed_only),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--constraints", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    np.random.seed(args.seed)
    result: dict[str, Any] = {
        "benchmark": "lookup",
        "question": "constrained lookup vs raw Chroma; end-to-end lookup with the model",
        "machine": machine(),
        "params": vars(args) | {"out": str(args.out) if args.out else None},
        "constrained": constrained_part(args.tools, args.constraints, args.repeat, args.seed),
    }
    if not args.skip_model:
        result["model"] = model_part(min(args.repeat, 100))
    emit(result, args.out)


if __name__ == "__main__":
    main()
