"""Question: does a lookup put the right tools in its top 5 on public tool-retrieval
benchmarks; does the sidecar's fusion of its dense similarity and BM25, chosen on one
catalog, hold on the others unretuned, never below the better of the two for single-
and multi-tool requests alike; what do the tools' parameter descriptions bring; do
completed chains help after a prefix; can a lookup abstain; do lookups learn from the
agents' own sessions (usage), and at what cost end to end?

Protocols (:mod:`benchmarks.retrieval_data`): StableToolBench pooled, Seal-Tools
in-domain, ToolBench completed trajectories, and APIBench's three hubs (TorchHub,
TensorFlow Hub, Hugging Face: single-tool instructions).  Rankers
(:mod:`benchmarks.retrieval_rankers`): plain MiniLM (the whole query's cosine), BM25,
the dense ranking over the query's views, reciprocal rank fusion (the fusion before),
the fusion candidates, and ``hybrid``: the lookup's own fusion
(:func:`sidecar.lookup.ranking.hybrid_order`).  The fusion and its weight are chosen on
StableToolBench alone (:data:`TUNED_ON`): the run reports which candidate that catalog
prefers, and every other catalog's figures for it.

Metrics per query, averaged: nDCG@5 with binary gains as ToolBench's evaluator computes
it (sklearn's ``ndcg_score``: DCG of the top k over the ideal DCG of
``min(|relevant|, k)`` hits), nDCG@1 (the first tool right: hit@1), recall@5 and Comp@5
(all relevant tools in the top 5), each split single-tool / multi-tool.

Chain-aware completion: every multi-tool query is asked again after its first relevant
tool, the rest of its tools relevant, with the tools that followed that tool in the
training queries' chains at several weights.  Abstention: the best hit's similarity
against a threshold, out of scope being each catalog's queries asked of another and
hand-made requests no catalog serves.  Usage: :mod:`benchmarks.retrieval_usage`.  End
to end: ``Sidecar.search`` over the StableToolBench catalog in a real home, hybrid on
and off, and :func:`sidecar.lookup.ranking.hybrid_ranked` over that home's index against this
benchmark's ``hybrid`` (they must agree: the benchmark measures what the lookup serves).
"""

from __future__ import annotations

import random
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.common import DEFAULT_DATASETS, dataset_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.retrieval_data import Query, sample
from benchmarks.retrieval_plans import PLANS, SHORT_QUERIES, UsagePlan, loaders
from benchmarks.retrieval_rankers import FUSIONS, Engine, K, averaged, baselines, scores_of
from benchmarks.retrieval_report import markdown, plot, targets

__all__ = ["main", "markdown", "plot", "run", "targets"]

TUNED_ON = "stabletoolbench"
QUICK_QUERIES = 250
CHAIN_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
THRESHOLDS = (0.25, 0.3, 0.35, 0.4, 0.45, 0.5)
LATENCY_QUICK, LATENCY_FULL = 60, 200
ABSTENTION_PROTOCOLS = ("stabletoolbench", "seal_tools", "toolbench_completed")


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


# ---- metrics --------------------------------------------------------------------------
# ---- one protocol, zero-shot -------------------------------------------------------------
def evaluate(
    engine: Engine, queries: Sequence[Query], variants: Mapping[str, Engine] | None = None
) -> dict[str, Any]:
    """Every ranker over ``queries``; ``variants``: the same catalog indexed with other
    texts (:func:`benchmarks.retrieval_rankers.text_variants`), for their MiniLM, BM25
    and hybrid."""
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    best: list[float] = []
    hybrid_recall: list[float] = []
    for q in queries:
        sig = engine.signals(q.text)
        best.append(float(sig.dense.max()))
        ranked = baselines(engine, sig)
        ranked |= {name: fusion(engine, sig) for name, fusion in FUSIONS.items()}
        ranked["hybrid"] = engine.hybrid(sig)[0]
        for variant, other in (variants or {}).items():
            osig = other.signals(q.text)
            ranked[f"minilm, {variant}"] = other.top(osig.whole)
            ranked[f"bm25, {variant}"] = other.top(osig.bm25, positive=True)
            ranked[f"hybrid, {variant}"] = other.hybrid(osig)[0]
        split = "single" if len(q.relevant) == 1 else "multi"
        for name, order in ranked.items():
            s = scores_of(order, q.relevant)
            rows[name]["all"].append(s)
            rows[name][split].append(s)
        hybrid_recall.append(rows["hybrid"]["all"][-1]["recall@5"])
    return {
        "queries": len(queries),
        "catalog": len(engine.ids),
        "documents_embedded_s": round(engine.embed_s, 1),
        "rankers": {
            name: {split: averaged(v) for split, v in by.items()} for name, by in rows.items()
        },
        "_best_similarity": best,
        "_hybrid_recalls": hybrid_recall,
    }


def after_first_tool(engine: Engine, queries: Sequence[Query]) -> dict[str, Any]:
    """Multi-tool queries asked again after their first relevant tool, the rest relevant:
    the hybrid alone, and with the completed chains of the training queries."""
    from sidecar.lookup.ranking import successors

    protocol = engine.protocol
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    folds = sorted({q.fold for q in queries}) if protocol.folds else [0]
    for fold in folds:
        chains: dict[tuple[str, ...], int] = defaultdict(int)
        for q in protocol.training(fold):
            if len(q.relevant) >= 2:
                chains[q.relevant] += 1
        for q in queries:
            if len(q.relevant) < 2 or (protocol.folds and q.fold != fold):
                continue
            after, rest = q.relevant[:1], q.relevant[1:]
            sig = engine.signals(q.text)
            plain = [t for t in engine.hybrid(sig)[0] if t not in after]
            rows["hybrid"].append(scores_of(plain, rest))
            following = successors(list(chains.items()), after)
            for w in CHAIN_WEIGHTS:
                ranked, _ = engine.hybrid(sig, chains=following, chain_weight=w)
                order = [t for t in ranked if t not in after]
                rows[f"hybrid+chains (weight {w:g})"].append(scores_of(order, rest))
    return {name: averaged(v) for name, v in rows.items()}


def chosen_fusion(results: Mapping[str, Any]) -> dict[str, Any]:
    """The fusion candidate :data:`TUNED_ON` prefers (nDCG@5 over all its queries), and
    every protocol's figures for it."""
    rankers = results[TUNED_ON]["rankers"]
    best = max(FUSIONS, key=lambda name: (rankers[name]["all"]["ndcg@5"], name))
    return {
        "tuned_on": TUNED_ON,
        "best_candidate": best,
        "figures": {p: r["rankers"][best] for p, r in results.items()},
    }


# ---- abstention -------------------------------------------------------------------------------
def abstention(engines: Mapping[str, Engine], results: Mapping[str, Any]) -> dict[str, Any]:
    pairs = [
        ("stabletoolbench", "seal_tools"),
        ("seal_tools", "stabletoolbench"),
        ("toolbench_completed", "seal_tools"),
        ("seal_tools", "toolbench_completed"),
    ]
    inside = {p: results[p] for p in ABSTENTION_PROTOCOLS if p in results}
    outside: dict[str, list[float]] = defaultdict(list)
    hand: dict[str, list[float]] = {}
    for catalog, other in pairs:
        if catalog not in inside or other not in inside:
            continue
        queries = engines[other].protocol.queries
        chosen = [q.text for q in queries[: max(1, len(inside[catalog]["_best_similarity"]))]]
        outside[catalog] += [_best(engines[catalog], t) for t in chosen]
    for name in inside:
        hand[name] = [_best(engines[name], t) for t in HAND_MADE]
    table = []
    for th in THRESHOLDS:
        row: dict[str, Any] = {"threshold": th}
        best = [b for r in inside.values() for b in r["_best_similarity"]]
        row["in_scope_abstained_pct"] = _pct([b < th for b in best])
        row["recall_lost_points"] = _recall_lost(inside, th)
        row["cross_catalog_abstained_pct"] = _pct([b < th for v in outside.values() for b in v])
        row["hand_made_abstained_pct"] = _pct([b < th for v in hand.values() for b in v])
        row["out_of_scope_abstained_pct"] = _pct(
            [b < th for v in [*outside.values(), *hand.values()] for b in v]
        )
        table.append(row)
    return {"thresholds": table, "out_of_scope_queries": sum(map(len, outside.values()))}


def _best(engine: Engine, text: str) -> float:
    return float(engine.signals(text).dense.max())


def _pct(flags: Sequence[bool]) -> float:
    return round(100 * sum(flags) / len(flags), 1) if flags else 0.0


def _recall_lost(results: Mapping[str, Any], th: float) -> float:
    """Points of in-scope recall@5 (hybrid) lost, averaged over the protocols, when an
    abstained lookup counts as finding nothing."""
    lost = []
    for r in results.values():
        flags = [b < th for b in r["_best_similarity"]]
        recalls = r["_hybrid_recalls"]
        lost.append(100 * sum(x for x, f in zip(recalls, flags, strict=True) if f) / len(flags))
    return round(statistics.fmean(lost), 2) if lost else 0.0


# ---- end to end ----------------------------------------------------------------------------
def hot_path(
    engine: Engine, queries: Sequence[Query], repeat: int, seed: int, embedder: Any
) -> dict[str, Any]:
    """``Sidecar.search`` hybrid on and off, interleaved (each call a query of its own),
    and the lookup's fusion over that home's index against this benchmark's."""
    from benchmarks.common import open_sidecar
    from sidecar import Sidecar
    from sidecar.lookup.ranking import query_views
    from sidecar.settings import Settings

    rng = random.Random(f"retrieval-latency:{seed}")
    longs = [q.text for q in queries]
    rng.shuffle(longs)
    # one sentence each: the last of each query (one view, as most agent queries are)
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
            out: dict[str, Any] = {
                "tools": len(tools),
                "hybrid_top5_same_as_benchmark_ranker": _agreement(engine, on, queries[:100]),
            }
            for name, texts in (("long", longs), ("short", shorts)):
                out[name] = _timed_lookups(on, off, texts, repeat)
        finally:
            off.close()
            on.close()
    return out


def _agreement(engine: Engine, sc: Any, queries: Sequence[Query]) -> float:
    """Share of ``queries`` whose top 5 by :func:`sidecar.lookup.ranking.hybrid_ranked` over the
    home's real index equals this benchmark's ``hybrid``."""
    from indexes import query_vectors
    from sidecar.lookup.ranking import hybrid_ranked, query_views

    index = sc.index
    same = []
    for q in queries:
        views = query_vectors(index.embedder, query_views(q.text))
        served = [rid for rid, _ in hybrid_ranked(index, views, q.text, K, ()).hits]
        same.append(served == engine.hybrid(engine.signals(q.text))[0][:K])
    return round(statistics.fmean(same), 3) if same else 0.0


def _timed_lookups(on: Any, off: Any, texts: Sequence[str], repeat: int) -> dict[str, Any]:
    count = repeat + 3
    pool = [texts[i % len(texts)] + ("" if i < len(texts) else f" {i}") for i in range(2 * count)]
    its = {"hybrid": iter(pool[:count]), "plain": iter(pool[count:])}
    samples = interleaved(
        {
            "hybrid": lambda: on.search(next(its["hybrid"]), k=K),
            "plain": lambda: off.search(next(its["plain"]), k=K),
        },
        repeat,
    )
    stats = {n: summary(v) for n, v in samples.items()}
    return {
        **stats,
        "hybrid_vs_plain_p50": ratio(stats["hybrid"]["p50_ms"], stats["plain"]["p50_ms"]),
    }


# ---- the run ---------------------------------------------------------------------------------
def run(quick: bool, seed: int = 7, dataset: Path = DEFAULT_DATASETS) -> dict[str, Any]:
    from benchmarks.common import model_embedder
    from benchmarks.retrieval_rankers import text_variants

    embedder = model_embedder("onnx")
    vectors: dict[str, Any] = {}
    engines: dict[str, Engine] = {}
    results: dict[str, Any] = {}
    for name, load in loaders().items():
        progress(f"retrieval: {name}")
        protocol = load(dataset)
        engine = engines[name] = Engine(protocol, embedder, vectors)
        queries = sample(protocol, QUICK_QUERIES if quick else None, seed)
        results[name] = evaluate(engine, queries, text_variants(engine))
        results[name]["after_first_tool"] = after_first_tool(engine, queries)
        results[name]["notes"] = protocol.notes
    progress("retrieval: abstention")
    abstain = abstention(engines, results)
    progress("retrieval: end-to-end lookups")
    stb = engines["stabletoolbench"]
    stb_queries = sample(stb.protocol, QUICK_QUERIES if quick else None, seed)
    latency = hot_path(stb, stb_queries, LATENCY_QUICK if quick else LATENCY_FULL, seed, embedder)
    usage = usage_protocol(engines, PLANS["quick" if quick else "full"], seed, embedder)
    for r in results.values():
        r.pop("_best_similarity")
        r.pop("_hybrid_recalls")
    result = {
        "benchmark": "retrieval",
        "question": (
            "do lookups put the right tools in the top 5 on public tool benchmarks, does "
            "the fusion chosen on one catalog hold on the others, can a lookup abstain, "
            "do lookups learn from the agents' sessions, and at what cost end to end"
        ),
        "machine": machine(),
        "k": K,
        "protocols": results,
        "fusion": chosen_fusion(results),
        "abstention": abstain,
        "latency": latency,
        "usage": usage,
    }
    result["targets"] = targets(result)
    return result


def usage_protocol(
    engines: Mapping[str, Engine], plan: UsagePlan, seed: int, embedder: Any
) -> dict[str, Any]:
    """The learning curves of the usage protocols and the cost of usage, as ``plan``
    sizes them."""
    from benchmarks.retrieval_usage import cost, protocol_curves
    from sidecar.lookup.ranking import query_views

    curves: dict[str, Any] = {}
    for name in plan.protocols:
        progress(f"retrieval: usage, {name}")
        engine = engines[name]
        queries = sample(engine.protocol, plan.queries, seed)
        curves[name] = protocol_curves(engine, queries, seed, plan.points)
    progress("retrieval: usage, cost")
    engine = engines[plan.cost_on]
    longs = [q.text for q in sample(engine.protocol, 300, seed)]
    texts = {"short": [*SHORT_QUERIES, *(query_views(t)[-1] for t in longs)], "long": longs}
    from benchmarks.retrieval_usage import intake_cost

    progress("retrieval: usage, intake")
    return {
        "plan": asdict(plan),
        "curves": curves,
        "cost": cost(engine, texts, embedder, plan.sizes, plan.repeat, seed),
        "intake": intake_cost(engines[plan.protocols[0]], embedder, plan.repeat, seed),
    }


def main(argv: list[str] | None = None) -> None:
    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
