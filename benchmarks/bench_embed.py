"""Question: can a text lookup cost less than a raw Chroma query, end to end, by embedding
the query with all-MiniLM-L6-v2 under onnxruntime (int8) instead of torch, caching
repeated queries, and ranking up to tens of thousands of tools exactly in the process,
without losing retrieval quality; and where does the exact tier stop paying?

Five parts, each a ratio against a baseline measured in the same run:

- ``embedding``: one query's embedding, p50 / p99, short (9 tokens) and long (~90
  tokens) queries, ONNX fp32 and int8 against sentence-transformers (torch), interleaved;
- ``lookup``: text in, hits out, through ``ActiveIndex.search_fields`` (k = 10, the
  sidecar's hit fields) over 10,000 tools embedded by the model, with the exact tier
  and with Chroma ranking, against a raw Chroma query given a precomputed vector
  (metadatas and distances, what a lookup needs); a repeated query answered by the
  query cache (and the tier's ranking memo); today's path (torch embedding, Chroma
  ranking) in a round robin of its own, with its own raw query, since torch's worker
  threads keep spinning after each call.  Tool texts are 12 words drawn (seeded) from
  a fixed vocabulary; every other timed call gets a query of its own, and the hits'
  fields have been read once before (the steady state of a running server);
- ``quality``: top-5 agreement with the torch reference (torch documents, torch
  queries) of every ONNX configuration, on the ToolBench and Seal-Tools catalogs
  (documents as the sidecar embeds them) with their own task queries (``--dataset``;
  quick runs a seeded sample of 500 queries per set);
- ``crossover``: the exact tier against Chroma, both through ``search_fields``, at 1k,
  10k, 20k, 50k (and 30k, 100k in full runs) tools with synthetic clustered unit vectors
  (seeded), a query of its own for each timed call; recall@10 of both against brute
  force, the tier's load time and size;
- ``startup``: a fresh ``python -c`` process from start to its first query vector,
  ONNX (cached files, warm disk) against torch, next to ``python -c pass``; and which
  heavy modules ``sidecar --help`` imports (none of onnxruntime, torch, numpy).
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.embed_lookup import _each, lookup_part
from benchmarks.embed_report import markdown, plot
from benchmarks.embed_setup import (
    FIELDS,
    HEAVY,
    INCLUDE,
    SHORT_QUERIES,
    WARMUP,
    K,
    long_query,
)
from benchmarks.harness.progress import progress
from benchmarks.harness.results import REPO_ROOT, machine, target
from benchmarks.harness.timing import interleaved, ratio, summary

if TYPE_CHECKING:
    import numpy as np

    from indexes import ActiveIndex, MiniLMEmbedder, OnnxMiniLMEmbedder

__all__ = ["markdown", "plot", "run"]
LOOKUP_TOOLS = 10_000
QUICK_SIZES = (1_000, 10_000, 20_000, 50_000)
FULL_SIZES = (1_000, 10_000, 20_000, 30_000, 50_000, 100_000)


# ---- embedding ------------------------------------------------------------------------
def embedding_part(cache: Path, repeat: int, seed: int) -> dict[str, Any]:
    from indexes import MiniLMEmbedder, OnnxMiniLMEmbedder

    rng = random.Random(f"embed:{seed}")
    fp32 = OnnxMiniLMEmbedder(cache, queries="fp32")
    int8 = OnnxMiniLMEmbedder(cache, queries="int8")
    torch = MiniLMEmbedder()
    torch.embed(["warm up"])
    longs = [long_query(rng) for _ in range(8)]
    out: dict[str, Any] = {
        "tokens": {
            "short": round(statistics.fmean(fp32.tokenizer_count(q) + 2 for q in SHORT_QUERIES)),
            "long": round(statistics.fmean(fp32.tokenizer_count(q) + 2 for q in longs)),
        }
    }
    out["short"] = _embedding_runs(torch, fp32, int8, SHORT_QUERIES, repeat)
    out["long"] = _embedding_runs(torch, fp32, int8, longs, max(20, repeat // 3))
    return out


def _embedding_runs(
    torch: MiniLMEmbedder,
    fp32: OnnxMiniLMEmbedder,
    int8: OnnxMiniLMEmbedder,
    queries: Sequence[str],
    repeat: int,
) -> dict[str, Any]:
    its = {name: itertools.cycle(queries) for name in ("torch", "fp32", "int8")}
    samples = interleaved(
        {
            "onnx_fp32": lambda: fp32.embed_query(next(its["fp32"])),
            "onnx_int8": lambda: int8.embed_query(next(its["int8"])),
        },
        repeat,
    )
    # torch's worker threads keep spinning for a while after each call: interleaved
    # with the others, they would slow whatever runs next, so torch runs on its own
    samples |= interleaved({"torch": lambda: torch.embed([next(its["torch"])])}, repeat)
    stats = {name: summary(v) for name, v in samples.items()}
    base = stats["torch"]["p50_ms"]
    return {
        **stats,
        "onnx_fp32_vs_torch_p50": ratio(stats["onnx_fp32"]["p50_ms"], base),
        "onnx_int8_vs_torch_p50": ratio(stats["onnx_int8"]["p50_ms"], base),
        "onnx_int8_vs_torch_p99": ratio(stats["onnx_int8"]["p99_ms"], stats["torch"]["p99_ms"]),
    }


# ---- quality --------------------------------------------------------------------------
def quality_part(cache: Path, dataset: Path, quick: bool, seed: int) -> dict[str, Any]:
    from benchmarks.datasets import seal_tools, toolbench
    from indexes import MiniLMEmbedder, OnnxMiniLMEmbedder
    from sidecar.tools.records import embedding_text

    torch = MiniLMEmbedder()
    fp32 = OnnxMiniLMEmbedder(cache, queries="fp32")
    int8 = OnnxMiniLMEmbedder(cache, documents="int8", queries="int8")
    per_tensor = _per_tensor_int8(cache) if not quick else None
    out: dict[str, Any] = {}
    for corpus in (toolbench(dataset), seal_tools(dataset, seed)):
        progress(f"embed: quality on {corpus.name}")
        docs = [embedding_text(t) for t in corpus.tools]
        queries = sorted({t.query for t in corpus.tasks if t.query.strip()})
        total = len(queries)
        if quick and len(queries) > 500:
            queries = sorted(random.Random(f"quality:{seed}").sample(queries, 500))
        vectors = {
            "torch": (torch.embed(docs), torch.embed(queries)),
            "onnx_fp32": (fp32.embed(docs), fp32.embed(queries)),
            "onnx_int8": (int8.embed(docs), _queries(int8, queries)),
        }
        if per_tensor is not None:
            vectors["onnx_int8_per_tensor"] = (per_tensor(docs), per_tensor(queries))
        ref_docs, ref_queries = vectors["torch"]
        reference = _top(ref_docs, ref_queries, 5)
        configs = {
            # the default fast path: fp32 documents (the index), int8 queries
            "fast_fp32_docs_int8_queries": (vectors["onnx_fp32"][0], vectors["onnx_int8"][1]),
            "onnx_fp32_both": vectors["onnx_fp32"],
            "onnx_int8_both": vectors["onnx_int8"],
            # an index built by torch, queried by the fast path (compatibility)
            "torch_docs_int8_queries": (ref_docs, vectors["onnx_int8"][1]),
            # an index built by the int8 graph, queried by torch
            "int8_docs_torch_queries": (vectors["onnx_int8"][0], ref_queries),
        }
        if per_tensor is not None:
            configs["onnx_int8_per_tensor_both"] = vectors["onnx_int8_per_tensor"]
        out[corpus.name] = {
            "catalog_tools": len(docs),
            "queries": len(queries),
            "queries_in_set": total,
            "top5_agreement": {
                name: _agreement(_top(d, q, 5), reference) for name, (d, q) in configs.items()
            },
            "top1_agreement": {
                name: _agreement(_top(d, q, 1), _top(ref_docs, ref_queries, 1))
                for name, (d, q) in configs.items()
            },
            "query_cosine_to_torch": {
                name: _cosines(vectors[name][1], ref_queries) for name in vectors if name != "torch"
            },
        }
    return out


def _queries(embedder: OnnxMiniLMEmbedder, queries: Sequence[str]) -> np.ndarray:
    import numpy as np

    return np.vstack([embedder.embed_query(q) for q in queries])


def _top(docs: np.ndarray, queries: np.ndarray, k: int) -> list[set[int]]:
    import numpy as np

    scores = queries @ docs.T
    best = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return [set(row.tolist()) for row in best]


def _agreement(ours: list[set[int]], reference: list[set[int]]) -> float:
    k = len(reference[0])
    return round(statistics.fmean(len(a & b) / k for a, b in zip(ours, reference, strict=True)), 4)


def _cosines(ours: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    import numpy as np

    cos = np.sum(ours * reference, axis=1)
    return {"mean": round(float(cos.mean()), 6), "min": round(float(cos.min()), 6)}


def _per_tensor_int8(cache: Path) -> Callable[[Sequence[str]], np.ndarray]:
    """The fp32 graph through onnxruntime's own dynamic quantization (per-tensor
    activation scales, per-channel weights): the alternative the block-wise int8
    graph is measured against."""
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from indexes import OnnxMiniLMEmbedder
    from indexes.onnx_artifact import artifact_path

    target_path = cache / "per-tensor-int8.onnx"
    quantize_dynamic(
        artifact_path(cache, "fp32"),
        target_path,
        op_types_to_quantize=["MatMul"],
        per_channel=True,
        weight_type=QuantType.QInt8,
    )
    session = ort.InferenceSession(str(target_path), providers=["CPUExecutionProvider"])
    tokenizer = OnnxMiniLMEmbedder(cache)._tokenizer()[0]

    def embed(texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:  # one at a time: per-tensor scales depend on the batch
            ids = np.asarray([tokenizer.encode(text).ids], dtype=np.int64)
            rows.append(session.run(None, {"input_ids": ids, "attention_mask": ids * 0 + 1})[0])
        return np.vstack(rows)

    return embed


# ---- crossover ------------------------------------------------------------------------
def clustered_vectors(n: int, seed: int, dim: int = 384) -> np.ndarray:
    """Unit vectors around 256 seeded centres: tool catalogs cluster by domain."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((256, dim)).astype(np.float32)
    out = centres[rng.integers(0, 256, n)] + 0.8 * rng.standard_normal((n, dim))
    out = out.astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def crossover_part(sizes: Sequence[int], repeat: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in sizes:
        progress(f"embed: crossover at {n:,} tools")
        out[str(n)] = _crossover_at(n, max(sizes), repeat, seed)
    return out


def _crossover_at(n: int, limit: int, repeat: int, seed: int) -> dict[str, Any]:
    import numpy as np

    from indexes import ActiveIndex, HashingEmbedder, IndexRecord

    vectors = clustered_vectors(n, seed)
    queries = clustered_vectors(64, seed + 1)
    # each timed call its own query (a repeated one would hit the tier's ranking memo)
    timed = {
        name: list(clustered_vectors(repeat + WARMUP, seed + 2 + i))
        for i, name in enumerate(("e", "c", "r", "n"))
    }
    records = [
        IndexRecord(f"t{i}", "", {"description": "d", "tool_type": "unspecified"}) for i in range(n)
    ]
    truth = [set(np.argsort(-(vectors @ q), kind="stable")[:K].tolist()) for q in queries]
    with tempfile.TemporaryDirectory(prefix="bench-embed-cross-") as tmp:
        stand_in = HashingEmbedder()
        started = time.perf_counter()
        ActiveIndex.persistent(tmp, stand_in).upsert(records, embeddings=vectors)
        build_s = time.perf_counter() - started
        exact = ActiveIndex.persistent(tmp, stand_in, exact_limit=limit)
        chroma = ActiveIndex.persistent(tmp, stand_in, exact_limit=None)
        loads = _tier_loads(exact, queries[0])
        chroma.search_fields(queries[0], K, (), FIELDS)
        snapshot = exact._exact.current() if exact._exact is not None else None
        assert snapshot is not None and len(snapshot) == n
        recalls = {
            "exact": _recall(exact, queries, truth),
            "chroma": _recall(chroma, queries, truth),
        }
        # steady state: the hits' fields read once, then a fresh tier (no memo)
        for index, name in ((exact, "e"), (chroma, "c")):
            for q in timed[name]:
                index.search_fields(q, K, (), FIELDS)
        exact.exact_limit = exact.exact_limit
        exact.search_fields(queries[0], K, (), FIELDS)
        collection = chroma._collection
        samples = interleaved(
            {
                "exact": _each(lambda q: exact.search_fields(q, K, (), FIELDS), timed["e"]),
                "chroma": _each(lambda q: chroma.search_fields(q, K, (), FIELDS), timed["c"]),
                "raw_chroma": _each(_raw_query(collection), timed["r"]),
                "matrix_top_only": _each(lambda q: snapshot.top(q, K), timed["n"]),
            },
            repeat,
        )
    stats = {name: summary(v) for name, v in samples.items()}
    return {
        "build_s": round(build_s, 1),
        **stats,
        "exact_vs_chroma_p50": ratio(stats["exact"]["p50_ms"], stats["chroma"]["p50_ms"]),
        "exact_vs_raw_chroma_p50": ratio(stats["exact"]["p50_ms"], stats["raw_chroma"]["p50_ms"]),
        "recall_at_10": recalls,
        "tier_load_ms_median": round(statistics.median(loads), 1),
        "matrix_mib": round(snapshot.matrix.nbytes / 2**20, 1),
    }


def _raw_query(collection: Any) -> Callable[[Any], Any]:
    """A query straight to the Chroma collection, as its own client makes it."""
    import numpy as np

    return lambda q: collection.query(
        query_embeddings=np.asarray([q], dtype=np.float32), n_results=K, include=INCLUDE
    )


def _tier_loads(exact: ActiveIndex, query: Any) -> list[float]:
    """Milliseconds of three loads of the exact tier, each by a first lookup."""
    loads = []
    for _ in range(3):
        exact.invalidate()
        started = time.perf_counter()
        exact.search_fields(query, K, (), FIELDS)
        loads.append((time.perf_counter() - started) * 1000.0)
    return loads


def _recall(index: ActiveIndex, queries: Any, truth: list[set[int]]) -> float:
    found = 0
    for q, want in zip(queries, truth, strict=True):
        got = {int(h.id[1:]) for h in index.search_fields(q, K, (), FIELDS)[0]}
        found += len(got & want)
    return round(found / (K * len(queries)), 4)


def crossover_size(result: dict[str, Any]) -> int | None:
    """The largest measured size at which the exact tier is still faster."""
    faster = [int(n) for n, r in result.items() if r["exact_vs_chroma_p50"] < 1.0]
    return max(faster) if faster else None


# ---- start-up -------------------------------------------------------------------------
ONNX_CHILD = (
    "import sys\n"
    "from indexes import OnnxMiniLMEmbedder\n"
    "OnnxMiniLMEmbedder(sys.argv[1]).embed_query('weather in Lisbon')\n"
)
TORCH_CHILD = "from indexes import MiniLMEmbedder\nMiniLMEmbedder().embed(['weather in Lisbon'])\n"
HELP_CHILD = (
    "import contextlib, io, json, sys\n"
    "sys.argv = ['sidecar', '--help']\n"
    "import sidecar.shells.cli\n"
    "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
    "    sidecar.shells.cli.main()\n"
    f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
)


def _child(code: str, *args: str) -> tuple[float, str]:
    env_path = str(REPO_ROOT)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=env_path,
        env=_env(),
    )
    return (time.perf_counter() - started) * 1000.0, out.stdout


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def startup_part(cache: Path, runs: int) -> dict[str, Any]:
    commands = {
        "python_pass": ("pass",),
        "onnx_first_query": (ONNX_CHILD, str(cache)),
        "torch_first_query": (TORCH_CHILD,),
    }
    for code, *args in commands.values():  # warm the disk cache for each
        _child(code, *args)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(runs):
        order = list(commands) if i % 2 == 0 else list(reversed(commands))
        for name in order:
            code, *args = commands[name]
            times[name].append(_child(code, *args)[0])
    med = {name: round(statistics.median(v), 1) for name, v in times.items()}
    heavy = json.loads(_child(HELP_CHILD)[1].strip().splitlines()[-1])
    return {
        "runs": runs,
        "median_ms": med,
        "min_ms": {name: round(min(v), 1) for name, v in times.items()},
        "onnx_vs_torch": ratio(med["onnx_first_query"], med["torch_first_query"]),
        "sidecar_help_imports": heavy,
    }


def _build_cache(cache: Path) -> dict[str, float]:
    """Build both ONNX files from the packaged weights, timing each (first use)."""
    from indexes.onnx_artifact import load_artifact
    from indexes.onnx_embedder import _model_dir

    out: dict[str, float] = {}
    for variant in ("fp32", "int8"):
        started = time.perf_counter()
        got = load_artifact(cache, _model_dir(), variant)  # type: ignore[arg-type]
        assert got.built
        out[f"{variant}_build_s"] = round(time.perf_counter() - started, 2)
        out[f"{variant}_mib"] = round(len(got.content) / 2**20, 1)
    return out


# ---- the run --------------------------------------------------------------------------
def run(quick: bool, seed: int = 7, dataset: Path = DEFAULT_DATASETS) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-embed-cache-") as tmp:
        cache = Path(tmp)
        progress("embed: building the ONNX files from the packaged weights")
        build = _build_cache(cache)
        progress("embed: start-up")
        start = startup_part(cache, 3 if quick else 7)
        progress("embed: query embedding")
        embedding = embedding_part(cache, 150 if quick else 400, seed)
        progress(f"embed: end-to-end lookup at {LOOKUP_TOOLS:,} tools")
        lookup = lookup_part(cache, 150 if quick else 400, seed, LOOKUP_TOOLS)
        quality = quality_part(cache, dataset, quick, seed)
    crossover = crossover_part(QUICK_SIZES if quick else FULL_SIZES, 100 if quick else 300, seed)
    cross = crossover_size(crossover)
    return {
        "benchmark": "embed",
        "question": "ONNX int8 query embedding, a query cache and an exact in-process tier "
        "against a raw Chroma query, with retrieval quality against the torch model",
        "machine": machine(),
        "params": {
            "k": K,
            "lookup_tools": LOOKUP_TOOLS,
            "crossover_sizes": list(crossover),
            "seed": seed,
            "dataset": str(dataset),
        },
        "build": build,
        "startup": start,
        "embedding": embedding,
        "lookup": lookup,
        "quality": quality,
        "crossover": crossover,
        "crossover_size": cross,
        "targets": _targets(lookup, quality, crossover, start, quick),
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _targets(
    lookup: dict[str, Any],
    quality: dict[str, Any],
    crossover: dict[str, Any],
    start: dict[str, Any],
    quick: bool,
) -> list[dict[str, Any]]:
    ratios = lookup["ratio_vs_raw_chroma_p50"]
    fast = {name: r["top5_agreement"]["fast_fp32_docs_int8_queries"] for name, r in quality.items()}
    recall_ok = all(r["recall_at_10"]["exact"] == 1.0 for r in crossover.values())
    return [
        target(
            "embed: text lookup (int8 query + exact tier) p50 / raw Chroma query p50",
            "<= 1.0 at 10k tools",
            ratios["text_exact"],
            ratios["text_exact"] <= 1.0,
        ),
        target(
            "embed: repeated text lookup (cache hit) p50 / raw Chroma query p50",
            "<= 0.25 at 10k tools",
            ratios["text_repeated_cached"],
            ratios["text_repeated_cached"] <= 0.25,
        ),
        target(
            "embed: top-5 agreement of the fast path with torch",
            ">= 0.98 on ToolBench and Seal-Tools",
            fast,
            min(fast.values()) >= 0.98,
            "fp32 documents, int8 queries"
            + ("; quick: 500 sampled queries per set" if quick else ""),
        ),
        target(
            "embed: exact tier recall@10 against brute force",
            "1.0 at every size",
            {n: r["recall_at_10"]["exact"] for n, r in crossover.items()},
            recall_ok,
        ),
        target(
            "embed: sidecar --help imports no model runtime",
            "none of onnxruntime, onnx, tokenizers, torch, numpy",
            start["sidecar_help_imports"] or "none",
            not start["sidecar_help_imports"],
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import dataset_main

    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
