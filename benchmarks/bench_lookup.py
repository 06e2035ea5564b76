"""Question: what does constraint-aware lookup cost over a raw, unfiltered Chroma query,
compared with Chroma's own ``where`` ``$nin`` filter and with an exact numpy top-k, as
the catalog grows; and what does a lookup cost end to end with the real model?

Part 1, per catalog size (1k / 10k, and 100k in full runs): synthetic tools embedded
with the hashing embedder (the vectors' values do not change the costs, and the catalog
builds in seconds; the embedding is excluded from every timing: the same query vectors
go to every method).  The archive holds 1,100 abandoned chains: prefix
``tool_0 > tool_1`` leads to 100 fatal continuations, ``tool_2 > tool_3`` to 1,000, so
an executed prefix activates 0 (``tool_4 > tool_5``), 100 or 1,000 constraints.  The
continuations are seeded random tools, ``min(count, size / 2)`` distinct ones (at 1k
tools, 1,000 constraints name 500 tools twice).  Methods, interleaved round robin on the
same queries (k = 10):

- ``raw_chroma``: ``collection.query`` unfiltered, asking what the sidecar asks
  (metadatas and distances: a hit's description and type are metadata; the document,
  the embedded text, is not returned by a lookup); a diagnostic row also asks for the
  documents;
- ``sidecar``: ``Sidecar.search_vector`` with the executed prefix (compiled constraints,
  in-flight moves, over-fetch sized from the excluded share, warnings); its ranking
  query asks Chroma for ids and distances only and takes the winners' description and
  type from the fields it keeps in-process (a diagnostic round robin of its own, with
  its own ``raw_chroma``, times it with those fields forgotten before every lookup, so
  that each one also reads them with a ``get``);
- ``chroma_nin``: ``collection.query`` with ``where={"tool_id": {"$nin": blocked}}``
  (a one-id list when nothing is blocked); timed in its own round robin with its own
  ``raw_chroma`` because it is much slower;
- ``numpy_exact``: brute-force cosine top-k over all vectors, blocked ones masked.

Part 2: the 62-tool demo catalog with all-MiniLM-L6-v2, first and repeated query,
embedding included, against the embedding alone.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import model_embedder, open_sidecar, quick_main
from benchmarks.harness.progress import progress, steps
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.timing import interleaved, ratio, summary, timed

if TYPE_CHECKING:
    import numpy as np

    from sidecar import Sidecar, Tool

WORDS = (
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
)
FULL_SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
CONSTRAINT_COUNTS = (0, 100, 1_000)
PREFIXES = {0: ["tool_4", "tool_5"], 100: ["tool_0", "tool_1"], 1_000: ["tool_2", "tool_3"]}
K = 10
INCLUDE: list[Any] = ["metadatas", "distances"]
"""What a lookup hit needs (description and type live in the metadata), asked of the
raw baseline and of the sidecar alike."""


def synthetic_tools(n: int, rng: random.Random) -> list[Tool]:
    from sidecar import Tool

    return [
        Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12)), "unspecified")
        for i in range(n)
    ]


def archive_constraints(sc: Sidecar, n_tools: int, rng: random.Random) -> dict[int, list[str]]:
    """Report the abandoned chains; returns the blocked continuations per count."""
    blocked: dict[int, list[str]] = {0: []}
    reports = []
    pool = list(range(6, n_tools))
    for count in CONSTRAINT_COUNTS[1:]:
        distinct = rng.sample(pool, min(count, n_tools // 2))
        blocked[count] = [f"tool_{t}" for t in distinct]
        for i in range(count):
            reports.append(
                {
                    "topology": [*PREFIXES[count], f"tool_{distinct[i % len(distinct)]}"],
                    "outcome": "abandoned",
                    "failure": {"signature": "HTTP 413 payload too large", "kind": None},
                    "constraint": {"rule": f"rule {count}/{i}"},
                }
            )
    results = sc.report_many(reports)
    assert all(r.status == "archived" for r in results), "every chain must be archived"
    for count in CONSTRAINT_COUNTS:
        active = sum(len(v) for v in sc.rules.matcher().next_steps(PREFIXES[count])[0].values())
        assert active == count, f"prefix for {count} activates {active} constraints"
    return blocked


def all_vectors(collection: Any) -> tuple[list[str], np.ndarray]:
    import numpy as np

    ids: list[str] = []
    rows: list[Any] = []
    offset = 0
    while True:
        got = collection.get(include=["embeddings"], limit=5000, offset=offset)
        if not got["ids"]:
            break
        ids += got["ids"]
        rows.append(np.asarray(got["embeddings"], dtype=np.float32))
        offset += len(got["ids"])
    matrix = np.concatenate(rows)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    return ids, matrix


def numpy_topk(
    matrix: np.ndarray, ids: Sequence[str], mask: np.ndarray | None
) -> Callable[[np.ndarray], list[str]]:
    import numpy as np

    def top(q: np.ndarray) -> list[str]:
        scores = matrix @ q
        if mask is not None:
            scores[mask] = -np.inf
        idx = np.argpartition(-scores, K)[:K]
        return [ids[i] for i in idx[np.argsort(-scores[idx])]]

    return top


def constrained_part(n_tools: int, repeat: int, seed: int) -> dict[str, Any]:
    from indexes import HashingEmbedder

    rng = random.Random(f"lookup:{seed}:{n_tools}")
    embedder = HashingEmbedder()
    with tempfile.TemporaryDirectory(prefix="bench-lookup-") as tmp:
        sc = open_sidecar(Path(tmp), embedder)
        try:
            t0 = time.perf_counter()
            sc.add_tools(synthetic_tools(n_tools, rng))
            build_s = time.perf_counter() - t0
            blocked = archive_constraints(sc, n_tools, rng)
            queries = list(
                embedder.embed([" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(64)])
            )
            ways = _ConstrainedLookups(sc, queries, blocked)
            main_fns: dict[str, Callable[[], Any]] = {
                "raw_chroma": ways.raw(),
                "raw_chroma_with_documents": ways.raw(K, ["documents", *INCLUDE]),
                # diagnostics: what the over-fetch of k + 10 costs in Chroma, with the
                # metadata the sidecar reads and with ids and distances only
                "raw_chroma_2k": ways.raw(2 * K),
                "raw_chroma_2k_ids_only": ways.raw(2 * K, ["distances"]),
            }
            for c in CONSTRAINT_COUNTS:
                main_fns[f"sidecar_{c}"] = ways.sidecar(c)
                main_fns[f"numpy_exact_{c}"] = ways.numpy(c)
            main = interleaved(main_fns, repeat)
            nin_fns: dict[str, Callable[[], Any]] = {"raw_chroma": ways.raw()}
            nin_fns |= {f"chroma_nin_{c}": ways.nin(c) for c in CONSTRAINT_COUNTS}
            nin = interleaved(nin_fns, max(20, repeat // 10))
            # apart, and after the others: forgetting the fields would make every other
            # sidecar lookup in the same round robin read them again too
            cold = interleaved(
                {"raw_chroma": ways.raw(), "sidecar_1000_fields_cold": ways.sidecar_cold(1_000)},
                max(20, repeat // 2),
            )
            recall = hnsw_recall(ways.collection, queries, numpy_topk(ways.matrix, ways.ids, None))
            evaluation = _uncached_evaluation(sc)
            withheld = [len(sc.search_vector(q, K, PREFIXES[1_000]).withheld) for q in queries]
        finally:
            sc.close()
    raw = summary(main["raw_chroma"])
    return {
        "tools": n_tools,
        "index_build_s": round(build_s, 1),
        "raw_chroma": raw,
        "raw_chroma_nin_group": summary(nin["raw_chroma"]),
        "diagnostics": _diagnostics(main, cold, raw, evaluation),
        "constraints": _per_count(main, nin, blocked),
        "hnsw_recall_at_k_vs_exact": recall,
        "withheld_per_lookup_at_1000": round(sum(withheld) / len(withheld), 2),
    }


class _ConstrainedLookups:
    """The ways to look up compared, each cycling through the same query vectors:
    Chroma alone, the sidecar (with its hit fields read, or forgotten before each
    lookup), Chroma with ``$nin`` over the blocked tools, and exact numpy."""

    def __init__(self, sc: Any, queries: list[Any], blocked: dict[int, list[str]]) -> None:
        self.sc = sc
        self.queries = queries
        self.blocked = blocked
        self.collection = sc.index._collection
        self.ids, self.matrix = all_vectors(self.collection)
        self.position = {tool: i for i, tool in enumerate(self.ids)}

    def raw(self, n: int = K, include: Sequence[Any] = INCLUDE) -> Callable[[], Any]:
        import numpy as np

        it = itertools.cycle(self.queries)
        return lambda: self.collection.query(
            query_embeddings=np.asarray([next(it)], dtype=np.float32),
            n_results=n,
            include=list(include),
        )

    def sidecar(self, count: int) -> Callable[[], Any]:
        it = itertools.cycle(self.queries)
        return lambda: self.sc.search_vector(next(it), K, PREFIXES[count])

    def sidecar_cold(self, count: int) -> Callable[[], Any]:
        it = itertools.cycle(self.queries)

        def lookup() -> Any:
            # the fields only: the exact tier's vectors stay (reloading them
            # is not what this diagnostic measures)
            self.sc.index.forget_fields(keep_vectors=True)
            return self.sc.search_vector(next(it), K, PREFIXES[count])

        return lookup

    def nin(self, count: int) -> Callable[[], Any]:
        import numpy as np

        it = itertools.cycle(self.queries)
        where: Any = {"tool_id": {"$nin": self.blocked[count] or ["__nothing__"]}}
        return lambda: self.collection.query(
            query_embeddings=np.asarray([next(it)], dtype=np.float32),
            n_results=K,
            where=where,
            include=INCLUDE,
        )

    def numpy(self, count: int) -> Callable[[], Any]:
        import numpy as np

        it = itertools.cycle(self.queries)
        mask = None
        if self.blocked[count]:
            mask = np.zeros(len(self.ids), dtype=bool)
            mask[[self.position[t] for t in self.blocked[count]]] = True
        top = numpy_topk(self.matrix, self.ids, mask)
        return lambda: top(next(it))


def _uncached_evaluation(sc: Any) -> dict[str, float]:
    """The matcher caches next_steps per prefix and context, so the timed lookups hit
    that cache; what a first lookup after a new prefix adds."""
    matcher = sc.rules.matcher()
    uncached = getattr(matcher, "_next_steps", None)
    return summary(
        timed(
            lambda: (
                uncached(PREFIXES[1_000], {})
                if uncached is not None
                else matcher.next_steps(PREFIXES[1_000])
            ),
            100,
        )
    )


def _per_count(
    main: dict[str, list[float]], nin: dict[str, list[float]], blocked: dict[int, list[str]]
) -> dict[str, Any]:
    raw, raw_nin = summary(main["raw_chroma"]), summary(nin["raw_chroma"])
    per_count: dict[str, Any] = {}
    for c in CONSTRAINT_COUNTS:
        side = summary(main[f"sidecar_{c}"])
        exact = summary(main[f"numpy_exact_{c}"])
        filt = summary(nin[f"chroma_nin_{c}"])
        per_count[str(c)] = {
            "blocked_tools": len(blocked[c]),
            "sidecar": side,
            "numpy_exact": exact,
            "chroma_nin": filt,
            "ratio_vs_raw_chroma": ratio(side["p50_ms"], raw["p50_ms"]),
            "numpy_ratio_vs_raw_chroma": ratio(exact["p50_ms"], raw["p50_ms"]),
            "nin_ratio_vs_raw_chroma": ratio(filt["p50_ms"], raw_nin["p50_ms"]),
        }
    return per_count


def _diagnostics(
    main: dict[str, list[float]],
    cold: dict[str, list[float]],
    raw: dict[str, float],
    evaluation: dict[str, float],
) -> dict[str, Any]:
    def p50(samples: list[float]) -> float:
        return summary(samples)["p50_ms"]

    return {
        "constraint_evaluation_uncached_1000": evaluation,
        "raw_chroma_with_documents": summary(main["raw_chroma_with_documents"]),
        "raw_chroma_with_documents_ratio": ratio(
            p50(main["raw_chroma_with_documents"]), raw["p50_ms"]
        ),
        "sidecar_1000_fields_cold": summary(cold["sidecar_1000_fields_cold"]),
        "sidecar_1000_fields_cold_ratio": ratio(
            p50(cold["sidecar_1000_fields_cold"]), p50(cold["raw_chroma"])
        ),
        "raw_chroma_2k": summary(main["raw_chroma_2k"]),
        "raw_chroma_2k_ratio": ratio(p50(main["raw_chroma_2k"]), raw["p50_ms"]),
        "raw_chroma_2k_ids_only": summary(main["raw_chroma_2k_ids_only"]),
        "raw_chroma_2k_ids_only_ratio": ratio(p50(main["raw_chroma_2k_ids_only"]), raw["p50_ms"]),
    }


def hnsw_recall(
    collection: Any, queries: Sequence[np.ndarray], exact: Callable[[np.ndarray], list[str]]
) -> float:
    import numpy as np

    overlap = 0
    for q in queries:
        got = collection.query(
            query_embeddings=np.asarray([q], dtype=np.float32), n_results=K, include=[]
        )
        overlap += len(set(got["ids"][0]) & set(exact(q)))
    return round(overlap / (K * len(queries)), 4)


def model_part(repeat: int) -> dict[str, Any]:
    """The sidecar's default model path end to end: onnxruntime behind the query cache
    (a repeated query is a cache hit), against the query embedding alone, uncached."""
    from indexes import CachedEmbedder, query_vector
    from sidecar.demo import demo_tools

    query = "what's the weather in Lisbon"
    with tempfile.TemporaryDirectory(prefix="bench-lookup-model-") as tmp:
        inner = model_embedder("onnx")
        embedder = CachedEmbedder(inner)
        t0 = time.perf_counter()
        sc = open_sidecar(Path(tmp), embedder)
        try:
            sc.add_tools(demo_tools())
            load_and_index_s = time.perf_counter() - t0
            first = timed(lambda: sc.search(query, k=5), 1)[0]
            both = interleaved(
                {
                    "repeated_query": lambda: sc.search(query, k=5),
                    "embedding_only": lambda: query_vector(inner, query),
                },
                repeat,
            )
        finally:
            sc.close()
    again, embed = summary(both["repeated_query"]), summary(both["embedding_only"])
    return {
        "catalog_tools": len(demo_tools()),
        "model_load_and_index_s": round(load_and_index_s, 2),
        "first_query_ms": round(first, 2),
        "repeated_query": again,
        "embedding_only": embed,
        "first_vs_repeated": ratio(first, again["p50_ms"]),
        "repeated_vs_embedding_only": ratio(again["p50_ms"], embed["p50_ms"]),
    }


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    started = time.perf_counter()
    sizes = QUICK_SIZES if quick else FULL_SIZES
    repeat = 150 if quick else 300
    sizes_out: dict[str, Any] = {}
    for n in steps("lookup: sizes", sizes):
        progress(f"lookup: {n:,} tools")
        sizes_out[str(n)] = constrained_part(n, repeat, seed)
    progress("lookup: end to end with all-MiniLM-L6-v2 (the default onnx path)")
    model = model_part(50 if quick else 100)
    ratios = {
        n: {c: r["constraints"][c]["ratio_vs_raw_chroma"] for c in r["constraints"]}
        for n, r in sizes_out.items()
    }
    worst = max(v for per in ratios.values() for v in per.values())
    worst_at = next(
        f"{n} tools, {c} constraints"
        for n, per in ratios.items()
        for c, v in per.items()
        if v == worst
    )
    return {
        "benchmark": "lookup",
        "question": "constrained lookup vs raw Chroma, Chroma $nin and exact numpy; "
        "end-to-end lookup with the model",
        "machine": machine(),
        "params": {"sizes": list(sizes), "k": K, "repeat": repeat, "seed": seed},
        "sizes": sizes_out,
        "ratio_vs_raw_chroma": ratios,
        "model": model,
        "targets": [
            target(
                "lookup: constrained p50 / raw Chroma p50",
                "<= 1.25 at every size and constraint count",
                worst,
                worst <= 1.25,
                f"worst at {worst_at}",
            )
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def markdown(result: dict[str, Any]) -> str:
    m = result["model"]
    return "\n".join(
        [
            "## Lookup cost",
            "",
            md_table(COST_HEADERS, _cost_rows(result["sizes"])),
            "",
            md_table(INFO_HEADERS, _info_rows(result["sizes"])),
            "",
            f"End to end with all-MiniLM-L6-v2 ({m['catalog_tools']} demo tools): model load "
            f"and indexing {m['model_load_and_index_s']} s; first query "
            f"{m['first_query_ms']} ms ({m['first_vs_repeated']}x a repeated one); repeated "
            f"query p50 {m['repeated_query']['p50_ms']} ms, "
            f"{m['repeated_vs_embedding_only']}x the query embedding alone "
            f"({m['embedding_only']['p50_ms']} ms).",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


COST_HEADERS = (
    "tools",
    "constraints",
    "blocked tools",
    "raw Chroma p50 ms",
    "sidecar p50 ms",
    "sidecar / raw",
    "<= 1.25",
    "Chroma $nin p50 ms",
    "$nin / raw",
    "numpy exact p50 ms",
    "numpy / raw",
)
INFO_HEADERS = (
    "tools",
    "index build s",
    "HNSW recall@10 vs exact",
    "withheld per lookup (1,000)",
    "raw n=20 / raw n=10",
    "raw n=20 ids+distances / raw n=10",
    "raw with documents / raw",
    "sidecar (1,000), fields read every time / raw",
    "1,000 constraints evaluated, uncached, p50 ms",
)


def _cost_rows(sizes: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            int(n),
            int(c),
            v["blocked_tools"],
            r["raw_chroma"]["p50_ms"],
            v["sidecar"]["p50_ms"],
            v["ratio_vs_raw_chroma"],
            "yes" if v["ratio_vs_raw_chroma"] <= 1.25 else "**no**",
            v["chroma_nin"]["p50_ms"],
            v["nin_ratio_vs_raw_chroma"],
            v["numpy_exact"]["p50_ms"],
            v["numpy_ratio_vs_raw_chroma"],
        ]
        for n, r in sizes.items()
        for c, v in r["constraints"].items()
    ]


def _info_rows(sizes: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            int(n),
            r["index_build_s"],
            r["hnsw_recall_at_k_vs_exact"],
            r["withheld_per_lookup_at_1000"],
            r["diagnostics"]["raw_chroma_2k_ratio"],
            r["diagnostics"]["raw_chroma_2k_ids_only_ratio"],
            r["diagnostics"]["raw_chroma_with_documents_ratio"],
            r["diagnostics"]["sidecar_1000_fields_cold_ratio"],
            r["diagnostics"]["constraint_evaluation_uncached_1000"]["p50_ms"],
        ]
        for n, r in sizes.items()
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    sizes = [int(n) for n in result["sizes"]]
    methods = (
        ("ratio_vs_raw_chroma", "tab:blue", "sidecar"),
        ("nin_ratio_vs_raw_chroma", "tab:orange", "Chroma $nin"),
        ("numpy_ratio_vs_raw_chroma", "tab:green", "numpy exact"),
    )
    markers = {0: "o", 100: "s", 1_000: "^"}
    styles = {0: "-", 100: "--", 1_000: ":"}
    for key, color, label in methods:
        for c in CONSTRAINT_COUNTS:
            values = [result["sizes"][str(n)]["constraints"][str(c)][key] for n in sizes]
            ax.plot(
                sizes,
                values,
                styles[c],
                color=color,
                marker=markers[c],
                label=f"{label}, {c:,} constraints",
            )
    ax.axhline(1.25, color="grey", linewidth=0.8)
    ax.text(sizes[0], 1.3, "target 1.25", fontsize=7, color="grey")
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_xlabel("tools in the index")
    ax.set_ylabel("p50 / raw unfiltered Chroma p50")
    ax.set_title("Lookup cost relative to a raw unfiltered Chroma query (k=10)")
    ax.legend(fontsize=6, ncol=3, loc="upper left")
    return [save_figure(plt, fig, out_dir / "lookup.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
