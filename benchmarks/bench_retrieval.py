"""Question: does a lookup put the right tools in its top 5, in absolute terms, on public
tool-retrieval benchmarks; does the sidecar's hybrid ranking (BM25 + multi-view dense,
fused by RRF) beat plain all-MiniLM-L6-v2 and plain BM25; do completed chains and the
queries of completed runs help; can a lookup abstain on out-of-scope queries; and what
does the hybrid cost end to end?

Protocols (:mod:`benchmarks.retrieval_data`): StableToolBench pooled, Seal-Tools
in-domain, ToolBench completed trajectories.  Every ranker ranks the whole catalog with
the sidecar's own pieces: documents as the sidecar embeds them (fp32 ONNX graph),
queries through its int8 query graph, :mod:`indexes.lexical` for BM25 and
:mod:`sidecar.ranking` for the views and the fusion.  Metrics per query, averaged:

- nDCG@k with binary gains, as ToolBench's evaluator computes it (sklearn's
  ``ndcg_score``: DCG of the top k over the ideal DCG of ``min(|relevant|, k)`` hits);
- recall@5 (share of the relevant tools in the top 5) and Comp@5 (all of them there);
- each split single-tool / multi-tool.

Rankers: ``minilm`` (the whole query's cosine, today's lookup), ``bm25``,
``multiview`` (max-sim over the query's sentences, :func:`sidecar.ranking.query_views`),
``multiview+whole`` (the whole query as one more view), ``rrf`` (minilm + bm25),
``hybrid`` (multiview + bm25: the sidecar's default), and ``hybrid+usage@m``: each tool
with at least ``m`` training queries gets the unit mean of those queries' views closest
to it added (weight 0.5) to its vector (Tool2Vec-style).  Training queries are never
test queries (Seal-Tools: ``dev``; the others: five folds by query).

Chain-aware completion: every multi-tool query is asked again after its first relevant
tool (``after``), the rest of its tools as relevant, with and without the ranking of
tools that followed that tool in the training queries' chains.

Abstention: the best hit's similarity against a threshold; out of scope are each
catalog's queries asked of another (a catalog's ToolBench and StableToolBench share a
hub and are not out of scope of each other, so only Seal-Tools pairs with either) and
hand-made requests no catalog serves; the cost is the in-scope recall@5 lost when an
abstained lookup counts as finding nothing.

End to end: ``Sidecar.search`` over the StableToolBench catalog in a real home, hybrid
on and off (the same home, the same embedder with no query cache), interleaved, every
call a query of its own: long multi-sentence StableToolBench queries and short
one-sentence ones; and the hybrid lookup's top 5 against this benchmark's own hybrid
ranker (they must agree: the benchmark measures what the sidecar serves).
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import (
    DEFAULT_DATASETS,
    dataset_main,
    interleaved,
    machine,
    md_table,
    md_targets,
    model_embedder,
    progress,
    ratio,
    summary,
    target,
)
from benchmarks.retrieval_data import Protocol, Query, sample

if TYPE_CHECKING:
    import numpy as np

K = 5
DEPTH = K + 50
"""How deep each ranking is read: as deep as a lookup of ``k`` = 5 reads it
(``k + sidecar.ranking.DEPTH``)."""
QUICK_QUERIES = 250
USAGE_MINIMUMS = (1, 3, 5)
USAGE_BLEND = 0.5
CHAIN_WEIGHTS = (0.3, 0.5, 1.0, 2.0)
THRESHOLDS = (0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
LATENCY_QUICK, LATENCY_FULL = 60, 200
HAND_MADE = (
    "What is the meaning of life?",
    "Tell me a joke about penguins.",
    "Write a haiku about autumn leaves.",
    "How do I feel less lonely on Sundays?",
    "Who would win a fight between a bear and a shark?",
    "Explain why the sky is blue to a five year old.",
    "Give me a pep talk before my exam.",
    "What should I name my new goldfish?",
    "Summarise the plot of Hamlet in one sentence.",
    "Is it rude to recline my seat on a plane?",
    "Help me apologise to my sister for forgetting her birthday.",
    "What does it feel like to be a cloud?",
    "Compose a limerick about a sleepy cat.",
    "Should I learn the violin or the cello?",
    "Describe the smell of rain.",
    "Why do people procrastinate?",
    "Invent a new word and define it.",
    "Pretend you are a pirate and greet me.",
    "What is your favourite colour and why?",
    "Tell me a bedtime story about a brave snail.",
)
SHORT_QUERIES = (
    "what's the weather in Lisbon",
    "convert 100 euros to yen",
    "send an email to my landlord",
    "book a table for two tonight",
    "find cheap flights to Rome",
    "summarize this pdf report",
    "translate hello into German",
    "latest stock price of Tesla",
)


# ---- metrics --------------------------------------------------------------------------
def scores_of(ranked: Sequence[str], relevant: Sequence[str], k: int = K) -> dict[str, float]:
    rel = set(relevant)
    top = list(ranked[:k])
    dcg = sum(1.0 / math.log2(i + 2) for i, t in enumerate(top) if t in rel)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return {
        "ndcg@1": 1.0 if ranked[:1] and ranked[0] in rel else 0.0,
        "ndcg@5": dcg / ideal if ideal else 0.0,
        "recall@5": len(rel & set(top)) / len(rel) if rel else 0.0,
        "comp@5": 1.0 if rel <= set(top) else 0.0,
    }


def averaged(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {m: round(100 * statistics.fmean(r[m] for r in rows), 1) for m in rows[0]} | {
        "n": len(rows)
    }


# ---- the rankers --------------------------------------------------------------------------
class Engine:
    """One catalog: its document vectors, its BM25 index, and the query vectors seen."""

    def __init__(self, protocol: Protocol, embedder: Any, vectors: dict[str, np.ndarray]) -> None:
        from indexes.lexical import LexicalSnapshot, terms

        self.protocol = protocol
        self.ids = protocol.ids
        self.position = {t: i for i, t in enumerate(self.ids)}
        self._embedder = embedder
        self._vectors = vectors
        started = time.perf_counter()
        self.matrix = embedder.embed(protocol.texts)
        self.embed_s = time.perf_counter() - started
        # rows in id order, as the lexical tier builds them: BM25 ties break alike
        order = sorted(range(len(self.ids)), key=self.ids.__getitem__)
        self.lexical = LexicalSnapshot.build(
            [self.ids[i] for i in order], [terms(protocol.texts[i]) for i in order]
        )
        self._terms = terms

    def views(self, text: str, whole: bool = False) -> np.ndarray:
        """The query's views (its sentences), or its whole text alone."""
        import numpy as np

        from sidecar.ranking import query_views

        rows = []
        for view in [text.strip()] if whole else query_views(text):
            if view not in self._vectors:
                self._vectors[view] = self._embedder.embed_query(view)
            rows.append(self._vectors[view])
        return np.stack(rows)

    def top(self, scores: np.ndarray, n: int = DEPTH) -> list[str]:
        import numpy as np

        n = min(n, len(scores))
        best = np.argpartition(-scores, n - 1)[:n]
        return [self.ids[i] for i in best[np.lexsort((best, -scores[best]))]]

    def bm25(self, text: str) -> list[str]:
        return [rid for rid, _ in self.lexical.top(self._terms(text), DEPTH)]

    def rankings(self, text: str, matrix: np.ndarray | None = None) -> dict[str, Any]:
        """The dense rankings (whole query, multi-view), BM25, and the best
        similarity."""
        import numpy as np

        docs = self.matrix if matrix is None else matrix
        sims = docs @ self.views(text).T
        best = sims.max(axis=1)
        whole = docs @ self.views(text, whole=True)[0]
        return {
            "minilm": self.top(whole),
            "multiview": self.top(best),
            "multiview+whole": self.top(np.maximum(best, whole)),
            "bm25": self.bm25(text),
            "best": float(best.max()),
            "similarity": {rid: float(best[self.position[rid]]) for rid in self.top(best)},
        }

    def usage_matrix(self, train: Sequence[Query], minimum: int) -> np.ndarray:
        """Document vectors with each tool's training queries (the view closest to the
        tool) blended in, for tools with at least ``minimum`` of them."""
        import numpy as np

        from indexes.exact import unit_rows

        seen: dict[str, list[np.ndarray]] = defaultdict(list)
        for q in train:
            views = self.views(q.text)
            for tool in q.relevant:
                at = self.position.get(tool)
                if at is not None:
                    seen[tool].append(views[int(np.argmax(views @ self.matrix[at]))])
        out = np.array(self.matrix)
        for tool, rows in seen.items():
            if len(rows) >= minimum:
                at = self.position[tool]
                centre = unit_rows(np.mean(rows, axis=0))[0]
                out[at] = unit_rows(self.matrix[at] + USAGE_BLEND * centre)[0]
        result: np.ndarray = out
        return result


def hybrid(r: Mapping[str, Any], extra: Sequence[tuple[Sequence[str], float]] = ()) -> list[str]:
    """The sidecar's default fusion (:class:`sidecar.lookup.Lookup`, hybrid on): ties
    broken by similarity, as the lookup breaks them."""
    from sidecar.ranking import fuse

    return fuse([(r["multiview"], 1.0), (r["bm25"], 1.0), *extra], r["similarity"])


# ---- one protocol ---------------------------------------------------------------------------
def evaluate(engine: Engine, queries: Sequence[Query]) -> dict[str, Any]:
    from sidecar.ranking import fuse, successors

    protocol = engine.protocol
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    chain_rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    best: list[float] = []
    folds = sorted({q.fold for q in queries}) if protocol.folds else [0]
    for fold in folds:
        train = protocol.training(fold)
        chains: dict[tuple[str, ...], int] = defaultdict(int)
        for q in train:
            if len(q.relevant) >= 2:
                chains[q.relevant] += 1
        usage = {m: engine.usage_matrix(train, m) for m in USAGE_MINIMUMS}
        tests = [q for q in queries if not protocol.folds or q.fold == fold]
        for q in tests:
            r = engine.rankings(q.text)
            best.append(r["best"])
            ranked = {
                "minilm": r["minilm"],
                "bm25": r["bm25"],
                "multiview": r["multiview"],
                "rrf": fuse([(r["minilm"], 1.0), (r["bm25"], 1.0)]),
                "hybrid": hybrid(r),
                "hybrid (views+whole)": fuse([(r["multiview+whole"], 1.0), (r["bm25"], 1.0)]),
            }
            for m, matrix in usage.items():
                ranked[f"hybrid+usage@{m}"] = hybrid(engine.rankings(q.text, matrix))
            split = "single" if len(q.relevant) == 1 else "multi"
            for name, order in ranked.items():
                s = scores_of(order, q.relevant)
                rows[name]["all"].append(s)
                rows[name][split].append(s)
            if len(q.relevant) >= 2:
                after, rest = q.relevant[:1], q.relevant[1:]
                plain = [t for t in ranked["hybrid"] if t not in after]
                chain_rows["hybrid"].append(scores_of(plain, rest))
                following = successors(list(chains.items()), after)
                for w in CHAIN_WEIGHTS:
                    order = [t for t in hybrid(r, [(following, w)]) if t not in after]
                    chain_rows[f"hybrid+chains (weight {w:g})"].append(scores_of(order, rest))
    return {
        "queries": len(queries),
        "catalog": len(engine.ids),
        "documents_embedded_s": round(engine.embed_s, 1),
        "rankers": {
            name: {split: averaged(v) for split, v in by.items()} for name, by in rows.items()
        },
        "after_first_tool": {name: averaged(v) for name, v in chain_rows.items()},
        "best_similarity": best,
    }


# ---- abstention -------------------------------------------------------------------------------
def abstention(engines: Mapping[str, Engine], results: Mapping[str, Any]) -> dict[str, Any]:
    pairs = [
        ("stabletoolbench", "seal_tools"),
        ("seal_tools", "stabletoolbench"),
        ("toolbench_completed", "seal_tools"),
        ("seal_tools", "toolbench_completed"),
    ]
    outside: dict[str, list[float]] = defaultdict(list)
    hand: dict[str, list[float]] = {}
    for catalog, other in pairs:
        if catalog not in engines or other not in engines:
            continue
        queries = engines[other].protocol.queries
        chosen = [q.text for q in queries[: max(1, len(results[catalog]["best_similarity"]))]]
        outside[catalog] += [engines[catalog].rankings(t)["best"] for t in chosen]
    for name, engine in engines.items():
        hand[name] = [engine.rankings(t)["best"] for t in HAND_MADE]
    table = []
    for th in THRESHOLDS:
        row: dict[str, Any] = {"threshold": th}
        inside = [b for r in results.values() for b in r["best_similarity"]]
        row["in_scope_abstained_pct"] = _pct([b < th for b in inside])
        row["recall_lost_points"] = _recall_lost(engines, results, th)
        row["cross_catalog_abstained_pct"] = _pct([b < th for v in outside.values() for b in v])
        row["hand_made_abstained_pct"] = _pct([b < th for v in hand.values() for b in v])
        row["out_of_scope_abstained_pct"] = _pct(
            [b < th for v in [*outside.values(), *hand.values()] for b in v]
        )
        table.append(row)
    return {"thresholds": table, "out_of_scope_queries": sum(map(len, outside.values()))}


def _pct(flags: Sequence[bool]) -> float:
    return round(100 * sum(flags) / len(flags), 1) if flags else 0.0


def _recall_lost(engines: Mapping[str, Engine], results: Mapping[str, Any], th: float) -> float:
    """Points of in-scope recall@5 (hybrid) lost, averaged over the protocols, when an
    abstained lookup counts as finding nothing."""
    lost = []
    for r in results.values():
        flags = [b < th for b in r["best_similarity"]]
        recalls = r["_hybrid_recalls"]
        lost.append(100 * sum(x for x, f in zip(recalls, flags, strict=True) if f) / len(flags))
    return round(statistics.fmean(lost), 2) if lost else 0.0


# ---- the hot path ----------------------------------------------------------------------------
def hot_path(
    engine: Engine, queries: Sequence[Query], repeat: int, seed: int, embedder: Any
) -> dict[str, Any]:
    from benchmarks.common import open_sidecar
    from sidecar import Sidecar
    from sidecar.ranking import query_views
    from sidecar.settings import Settings

    rng = random.Random(f"retrieval-latency:{seed}")
    longs = [q.text for q in queries]
    rng.shuffle(longs)
    # one sentence each: the first of each query (one view, as most agent queries are)
    shorts = [*SHORT_QUERIES, *(query_views(t)[-1] for t in longs)]
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        home = Path(tmp)
        tools = engine.protocol.tools
        with open_sidecar(home, embedder) as sc:
            sc.add_tools(tools)
        on = Sidecar(Settings.load(env={}, home=home), embedder)
        off = Sidecar(Settings.load(env={}, home=home, hybrid=False), embedder, read_only=True)
        try:
            on.search("warm up", k=K)
            off.search("warm up", k=K)
            agree = []
            for q in queries[:100]:
                served = [h.tool_id for h in on.search(q.text, k=K).hits]
                agree.append(served == hybrid(engine.rankings(q.text))[:K])
            out: dict[str, Any] = {
                "tools": len(tools),
                "hybrid_top5_same_as_benchmark_ranker": round(statistics.fmean(agree), 3),
            }
            for name, texts in (("long", longs), ("short", shorts)):
                count = repeat + 3
                pool = [
                    texts[i % len(texts)] + ("" if i < len(texts) else f" {i}")
                    for i in range(2 * count)
                ]
                its = {"hybrid": iter(pool[:count]), "plain": iter(pool[count:])}
                samples = interleaved(
                    {
                        "hybrid": _each(on, its["hybrid"]),
                        "plain": _each(off, its["plain"]),
                    },
                    repeat,
                )
                stats = {n: summary(v) for n, v in samples.items()}
                out[name] = {
                    **stats,
                    "hybrid_vs_plain_p50": ratio(
                        stats["hybrid"]["p50_ms"], stats["plain"]["p50_ms"]
                    ),
                }
        finally:
            off.close()
            on.close()
    return out


def _each(sc: Any, texts: Any) -> Callable[[], Any]:
    """A lookup of the next text, each once."""
    return lambda: sc.search(next(texts), k=K)


# ---- the run ---------------------------------------------------------------------------------
def run(quick: bool, seed: int = 7, dataset: Path = DEFAULT_DATASETS) -> dict[str, Any]:
    from benchmarks import retrieval_data

    embedder = model_embedder("onnx")
    vectors: dict[str, np.ndarray] = {}
    loaders: dict[str, Callable[[Path], Protocol]] = {
        "stabletoolbench": retrieval_data.stabletoolbench,
        "seal_tools": retrieval_data.seal_tools,
        "toolbench_completed": retrieval_data.toolbench_completed,
    }
    engines: dict[str, Engine] = {}
    results: dict[str, Any] = {}
    for name, load in loaders.items():
        progress(f"retrieval: {name}")
        protocol = load(dataset)
        engine = Engine(protocol, embedder, vectors)
        engines[name] = engine
        queries = sample(protocol, QUICK_QUERIES if quick else None, seed)
        results[name] = evaluate(engine, queries)
        results[name]["_hybrid_recalls"] = [
            scores_of(hybrid(engine.rankings(q.text)), q.relevant)["recall@5"] for q in queries
        ]
        results[name]["notes"] = protocol.notes
    progress("retrieval: abstention")
    abstain = abstention(engines, results)
    progress("retrieval: end-to-end lookups")
    stb = engines["stabletoolbench"]
    latency = hot_path(
        stb,
        sample(stb.protocol, QUICK_QUERIES if quick else None, seed),
        LATENCY_QUICK if quick else LATENCY_FULL,
        seed,
        embedder,
    )
    for r in results.values():
        r.pop("best_similarity")
        r.pop("_hybrid_recalls")
    result = {
        "benchmark": "retrieval",
        "question": (
            "do lookups put the right tools in the top 5 on public tool benchmarks, does "
            "the hybrid ranking beat plain MiniLM and BM25, can a lookup abstain, and at "
            "what cost end to end"
        ),
        "machine": machine(),
        "k": K,
        "protocols": results,
        "abstention": abstain,
        "latency": latency,
    }
    result["targets"] = targets(result)
    return result


def targets(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    from sidecar.settings import DEFAULT_ABSTAIN_BELOW

    p = result["protocols"]

    def get(name: str, ranker: str, metric: str, split: str = "all") -> float:
        return float(p[name]["rankers"][ranker][split][metric])

    out = []
    goals = {
        "stabletoolbench": {"ndcg@5": 75, "recall@5": 80, "comp@5": 60},
        "seal_tools": {"ndcg@5": 90, "recall@5": 90},
        "toolbench_completed": {"recall@5": 75},
    }
    for name, wanted in goals.items():
        for metric, goal in wanted.items():
            got = get(name, "hybrid", metric)
            out.append(
                target(f"retrieval: {name} {metric} (hybrid)", f">= {goal}", got, got >= goal)
            )
    for name in goals:
        worst = min(get(name, "hybrid", m) - get(name, "bm25", m) for m in ("ndcg@5", "recall@5"))
        out.append(
            target(
                f"retrieval: {name} hybrid vs BM25 (nDCG@5, recall@5), worst gap in points",
                ">= 0",
                round(worst, 1),
                worst >= 0,
            )
        )
    row = next(
        (r for r in result["abstention"]["thresholds"] if r["threshold"] == DEFAULT_ABSTAIN_BELOW),
        None,
    )
    if row is not None:
        out.append(
            target(
                "retrieval: out-of-scope queries abstained at abstain_below="
                f"{DEFAULT_ABSTAIN_BELOW}",
                ">= 80% at <= 1 point of in-scope recall@5 lost",
                f"{row['out_of_scope_abstained_pct']}% at {row['recall_lost_points']} points",
                row["out_of_scope_abstained_pct"] >= 80 and row["recall_lost_points"] <= 1,
            )
        )
    lat = result["latency"]
    for name in ("short", "long"):
        got = lat[name]["hybrid_vs_plain_p50"]
        out.append(
            target(
                f"retrieval: end-to-end text lookup p50, hybrid / plain ({name} queries)",
                "<= 1.3",
                got,
                got <= 1.3,
            )
        )
    return out


def markdown(result: Mapping[str, Any]) -> str:
    lines = []
    for name, r in result["protocols"].items():
        lines += [
            f"### {name}: {r['queries']} queries over {r['catalog']:,} tools",
            "",
        ]
        rows = []
        for ranker, by in r["rankers"].items():
            a, s, m = by.get("all", {}), by.get("single", {}), by.get("multi", {})
            rows.append(
                [
                    ranker,
                    a.get("ndcg@1"),
                    a.get("ndcg@5"),
                    a.get("recall@5"),
                    a.get("comp@5"),
                    s.get("ndcg@5"),
                    m.get("ndcg@5"),
                    m.get("recall@5"),
                    m.get("comp@5"),
                ]
            )
        lines.append(
            md_table(
                [
                    "ranker",
                    "nDCG@1",
                    "nDCG@5",
                    "recall@5",
                    "Comp@5",
                    "single nDCG@5",
                    "multi nDCG@5",
                    "multi recall@5",
                    "multi Comp@5",
                ],
                rows,
            )
        )
        lines += ["", "After the first relevant tool (multi-tool queries, the rest relevant):", ""]
        lines.append(
            md_table(
                ["ranker", "nDCG@5", "recall@5", "Comp@5", "n"],
                [
                    [n, v.get("ndcg@5"), v.get("recall@5"), v.get("comp@5"), v.get("n")]
                    for n, v in r["after_first_tool"].items()
                ],
            )
        )
        lines.append("")
    lines += ["### Abstention", ""]
    lines.append(
        md_table(
            [
                "threshold",
                "in-scope abstained %",
                "recall@5 lost (points)",
                "cross-catalog %",
                "hand-made %",
                "out-of-scope %",
            ],
            [
                [
                    r["threshold"],
                    r["in_scope_abstained_pct"],
                    r["recall_lost_points"],
                    r["cross_catalog_abstained_pct"],
                    r["hand_made_abstained_pct"],
                    r["out_of_scope_abstained_pct"],
                ]
                for r in result["abstention"]["thresholds"]
            ],
        )
    )
    lat = result["latency"]
    lines += [
        "",
        f"### End to end: `Sidecar.search` over {lat['tools']:,} tools",
        "",
        f"Hybrid top 5 identical to this benchmark's hybrid ranker: "
        f"{lat['hybrid_top5_same_as_benchmark_ranker']:.1%} of 100 queries.",
        "",
    ]
    lines.append(
        md_table(
            [
                "queries",
                "hybrid p50 ms",
                "hybrid p99 ms",
                "plain p50 ms",
                "plain p99 ms",
                "hybrid / plain p50",
            ],
            [
                [
                    name,
                    lat[name]["hybrid"]["p50_ms"],
                    lat[name]["hybrid"]["p99_ms"],
                    lat[name]["plain"]["p50_ms"],
                    lat[name]["plain"]["p99_ms"],
                    lat[name]["hybrid_vs_plain_p50"],
                ]
                for name in ("short", "long")
            ],
        )
    )
    lines += ["", md_targets(result["targets"])]
    return "\n".join(lines)


def plot(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    return []


def main(argv: list[str] | None = None) -> None:
    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
