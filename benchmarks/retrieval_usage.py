"""The usage protocol of ``bench_retrieval``: do lookups learn from the agents' own
sessions, and at what cost?

Each catalog with training requests of its own is replayed as a stream of finished
sessions (:func:`stream`): every training request a completed session that used its
tools, in a seeded order, with a share of abandoned sessions mixed in (a training
request tried with the wrong tool: the zero-shot ranking's best tool that is not one
of its own, abandoned at a deterministic failure).  After the first 0, 100, 300, 1,000
and all sessions, every test request is looked up through the lookup's own fusion with
the :class:`indexes.UsageIndex` those sessions built (a session's request is its text,
embedded by the sidecar's query graph, the view closest to each tool standing for it),
and scored as the zero-shot protocols are.  The sessions come either from one trusted
source (an MCP gateway) or from eight untrusted agents (each session from one of them,
seeded), whose parts are capped (:data:`indexes.usage.SOURCE_CAP`).

The cost (:func:`cost`): lookups end to end through a real :class:`indexes.ActiveIndex`
(embedded Chroma, the exact and lexical tiers; the embedding of each query included,
each lookup a query of its own), interleaved: the plain dense lookup (the whole query's
cosine), the hybrid without usage, with the usage of 1,000 sessions and with that of
100,000; the memory each usage index holds (measured) and the size its rows take in
SQLite (every session's row, and only the rows the state keeps).
Synthetic sessions for the cost: each a training request's vector moved by noise (so
that every session is a request of its own and the memories fill), its tools, one of
eight agents, a fifth abandoned on a random tool.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
import tracemalloc
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.retrieval_data import Query
from benchmarks.retrieval_rankers import Engine, K, averaged, scores_of

if TYPE_CHECKING:
    import numpy as np

    from indexes import ActiveIndex, UsageIndex

POINTS = (0, 100, 300, 1000, None)
"""Sessions learned before the lookups (``None``: all of them)."""
ABANDONED_SHARE = 0.2
AGENTS = 8
SOURCES = {"one trusted source": 1, "8 untrusted agents": AGENTS}
TRUSTED = "gateway"
METRICS = ("ndcg@5", "recall@5", "comp@5", "hit@1")


@dataclass(frozen=True)
class Session:
    key: str
    text: str
    tools: tuple[str, ...]
    completed: bool
    source: str


def stream(
    engine: Engine, train: Sequence[Query], share: float, agents: int, seed: int
) -> list[Session]:
    """The training requests as finished sessions in a seeded order, with ``share`` of
    the stream abandoned sessions: a training request tried with the zero-shot ranking's
    best tool not among its own."""
    rng = random.Random(f"usage:{engine.protocol.name}:{seed}")
    order = list(train)
    rng.shuffle(order)
    abandoned = round(len(order) * share / (1 - share)) if share < 1 else 0
    slots = set(rng.sample(range(len(order) + abandoned), abandoned))
    wrong_of = [rng.choice(order) for _ in range(abandoned)]
    out: list[Session] = []
    done = 0
    for position in range(len(order) + abandoned):
        source = TRUSTED if agents == 1 else f"agent-{rng.randrange(agents)}"
        if position in slots:
            q = wrong_of.pop()
            ranked, _ = engine.hybrid(engine.signals(q.text))
            wrong = next(t for t in ranked if t not in q.relevant)
            out.append(Session(f"s{position}", q.text, (wrong,), False, source))
        else:
            q = order[done]
            done += 1
            out.append(Session(f"s{position}", q.text, q.relevant, True, source))
    return out


def usage_of(engine: Engine, sessions: Sequence[Session]) -> UsageIndex:
    """The usage index that ``sessions`` build, as the sidecar would build it."""
    from indexes import Evidence, UsageIndex, request_vector

    usage = UsageIndex(engine.matrix.shape[1], trusted={TRUSTED})
    for s in sessions:
        views = engine.views(s.text)
        for tool in s.tools:
            vector = request_vector(views, engine.matrix[engine.position[tool]])
            usage.add(Evidence(tool, s.source, s.key, vector, s.completed))
    return usage


def learning_curve(
    engine: Engine, queries: Sequence[Query], agents: int, seed: int, points: Sequence[int | None]
) -> dict[str, Any]:
    """Metrics per query class after each point of the stream (folds: each test query
    learns from the other folds' stream)."""
    protocol = engine.protocol
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    folds = sorted({q.fold for q in queries}) if protocol.folds else [None]
    streams = {
        fold: stream(
            engine,
            protocol.training(fold) if fold is not None else protocol.train,
            ABANDONED_SHARE,
            agents,
            seed,
        )
        for fold in folds
    }
    length = min(len(s) for s in streams.values())
    # a point past the end of the stream is the point of all sessions
    kept = [p for p in points if p is None or p < length]
    for fold, sessions in streams.items():
        tests = [q for q in queries if fold is None or q.fold == fold]
        signals = [(q, engine.signals(q.text)) for q in tests]
        for point in kept:
            usage = usage_of(engine, sessions[:point])
            for q, sig in signals:
                order, _ = engine.hybrid(sig, usage)
                s = scored(order, q.relevant)
                split = "single" if len(q.relevant) == 1 else "multi"
                rows[_label(point)]["all"].append(s)
                rows[_label(point)][split].append(s)
    return {
        "sessions_in_stream": length,
        "points": {p: {split: averaged(v) for split, v in by.items()} for p, by in rows.items()},
    }


def _label(point: int | None) -> str:
    return "all" if point is None else str(point)


def scored(ranked: Sequence[str], relevant: Sequence[str]) -> dict[str, float]:
    out = scores_of(ranked, relevant)
    out["hit@1"] = out.pop("ndcg@1")
    return out


def protocol_curves(
    engine: Engine, queries: Sequence[Query], seed: int, points: Sequence[int | None]
) -> dict[str, Any]:
    return {
        name: learning_curve(engine, queries, agents, seed, points)
        for name, agents in SOURCES.items()
    }


# ---- the cost -------------------------------------------------------------------------
def synthetic_sessions(
    engine: Engine, train: Sequence[Query], n: int, seed: int
) -> Iterator[tuple[str, str, np.ndarray, bool, str]]:
    """``n`` sessions (tool, source, vector, completed, key): training requests moved by
    noise, so that each is a request of its own."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = random.Random(f"synthetic:{seed}")
    base = [(engine.views(q.text).mean(axis=0), q.relevant) for q in train]
    for i in range(n):
        vector, tools = base[picks.randrange(len(base))]
        moved = vector + rng.standard_normal(len(vector)).astype(np.float32) * 0.02
        source = f"agent-{picks.randrange(AGENTS)}"
        if picks.random() < ABANDONED_SHARE:
            yield (picks.choice(engine.ids), source, moved, False, f"x{i}")
        else:
            for tool in tools:
                yield (tool, source, moved, True, f"x{i}")


def build_usage(
    engine: Engine, train: Sequence[Query], n: int, seed: int
) -> tuple[UsageIndex, dict[str, Any]]:
    """The usage index of ``n`` synthetic sessions, how fast it learned them, what it
    holds (its memory measured: the same sessions learned again under tracemalloc), and
    the size of its rows in SQLite: all of them, and those the state keeps (each tool,
    source and outcome's ``KEPT`` smallest request keys)."""
    import time

    from indexes import Evidence

    evidence = [
        Evidence(tool, source, key, vector, completed)
        for tool, source, vector, completed, key in synthetic_sessions(engine, train, n, seed)
    ]
    usage = _usage()
    started = time.perf_counter()
    for e in evidence:
        usage.add(e)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    again = _usage()
    for e in evidence:
        again.add(e)
    held = float(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    del again
    rows = [e.row() for e in evidence]
    stats = usage.stats()
    return usage, {
        "sessions": n,
        "evidence_rows": len(rows),
        "adds_per_s": round(len(rows) / seconds),
        "kept_requests": stats["requests"],
        "tools_with_usage": stats["tools"],
        "memory_mb": round(held / 2**20, 1),
        "memory_measured": True,
        "sqlite_mb_every_row": round(_sqlite_bytes(rows) / 2**20, 1),
        "sqlite_mb_kept_rows": round(_sqlite_bytes(stored_rows(rows)) / 2**20, 1),
    }


def stored_rows(
    rows: Sequence[tuple[str, str, str, str, bytes, str, float]],
) -> list[tuple[str, str, str, str, bytes, str, float]]:
    """The rows the state keeps of ``rows`` (:mod:`sidecar.storage.requests`): one per
    tool, source, outcome and request, of each tool, source and outcome's ``KEPT``
    smallest request keys."""
    from sidecar.storage.requests import KEPT

    first: dict[tuple[str, str, str, str], tuple[str, str, str, str, bytes, str, float]] = {}
    for r in rows:
        first.setdefault((r[0], r[1], r[5], r[3]), r)
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for tool, source, outcome, key in first:
        groups[(tool, source, outcome)].append(key)
    kept = {(*g, k) for g, keys in groups.items() for k in sorted(keys)[:KEPT]}
    return [r for g, r in first.items() if g in kept]


def _usage() -> UsageIndex:
    from indexes import UsageIndex
    from indexes.embedder import MINILM_DIM

    return UsageIndex(MINILM_DIM, trusted={TRUSTED})


def _sqlite_bytes(rows: Sequence[tuple[str, str, str, str, bytes, str, float]]) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-usage-") as tmp:
        path = Path(tmp) / "usage.sqlite"
        db = sqlite3.connect(path)
        db.execute(
            "CREATE TABLE usage (tool_id TEXT, source TEXT, session TEXT, key TEXT, "
            "vector BLOB, outcome TEXT, at REAL, PRIMARY KEY (tool_id, source, session))"
        )
        db.executemany("INSERT OR IGNORE INTO usage VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        db.commit()
        db.execute("VACUUM")
        db.close()
        return path.stat().st_size


def cost(
    engine: Engine,
    texts: Mapping[str, Sequence[str]],
    embedder: Any,
    sizes: tuple[int, int],
    repeat: int,
    seed: int,
) -> dict[str, Any]:
    """Lookup p50 end to end through a real ActiveIndex, for each kind of query of
    ``texts``: plain dense, hybrid, hybrid with the usage of ``sizes[0]`` and of
    ``sizes[1]`` sessions; and what each usage holds."""
    from indexes import ActiveIndex
    from sidecar.tools.records import index_record

    small, large = sizes
    train = engine.protocol.training(0) if engine.protocol.folds else engine.protocol.train
    held: dict[str, dict[str, Any]] = {}
    built: dict[int, UsageIndex] = {}
    for n in sorted({small, large}):
        built[n], held[str(n)] = build_usage(engine, train, n, seed)
    usage_small, usage_large = built[small], built[large]
    names = ("plain", "hybrid", f"usage {small:,}", f"usage {large:,}")
    out: dict[str, Any] = {"tools": len(engine.ids)}
    with tempfile.TemporaryDirectory(prefix="bench-usage-cost-") as tmp:
        index = ActiveIndex.persistent(Path(tmp) / "chroma", embedder, lexical=True)
        try:
            index.upsert([index_record(t) for t in engine.protocol.tools])
            arms = dict(
                zip(
                    names,
                    (
                        _plain_lookup(index),
                        _hybrid_lookup(index, None),
                        _hybrid_lookup(index, usage_small),
                        _hybrid_lookup(index, usage_large),
                    ),
                    strict=True,
                )
            )
            for kind, pool in texts.items():
                stats = {n: summary(v) for n, v in _timed(arms, pool, repeat, seed).items()}
                p50 = {n: s["p50_ms"] for n, s in stats.items()}
                out[kind] = {
                    "lookups": stats,
                    "hybrid_vs_plain_p50": ratio(p50["hybrid"], p50["plain"]),
                    "usage_vs_plain_p50": ratio(p50[names[2]], p50["plain"]),
                    "usage_vs_hybrid_p50": ratio(p50[names[2]], p50["hybrid"]),
                    "large_vs_small_usage_p50": ratio(p50[names[3]], p50[names[2]]),
                }
        finally:
            index.close()
    out["held"] = held
    out["sizes"] = [small, large]
    return out


def _plain_lookup(index: ActiveIndex) -> Any:
    def lookup(text: str) -> Any:
        return index.search_ranked(index.embed_query(text), K, ids_only=True)

    return lookup


def _hybrid_lookup(index: ActiveIndex, usage: UsageIndex | None) -> Any:
    from indexes import query_vectors
    from sidecar.lookup.ranking import hybrid_ranked, query_views

    def lookup(text: str) -> Any:
        views = query_vectors(index.embedder, query_views(text))
        return hybrid_ranked(index, views, text, K, (), usage=usage)

    return lookup


def _timed(
    arms: Mapping[str, Any], texts: Sequence[str], repeat: int, seed: int
) -> dict[str, list[float]]:
    """Each arm's lookups, interleaved, each call a text of its own (no memo of the
    exact tier answers it): the arms take turns through one shuffled pool."""
    count = repeat + 3
    pool = list(texts)
    random.Random(f"usage-cost:{seed}").shuffle(pool)
    n = len(arms)
    wanted = [
        pool[i % len(pool)] + ("" if i < len(pool) else f" {i // len(pool)}")
        for i in range(n * count)
    ]
    its = {name: iter(wanted[j::n]) for j, name in enumerate(arms)}
    for fn in arms.values():
        fn("warm up")
    return interleaved({name: partial(_next, fn, its[name]) for name, fn in arms.items()}, repeat)


def _next(fn: Callable[[str], Any], texts: Iterator[str]) -> Any:
    return fn(next(texts))


def intake_cost(engine: Engine, embedder: Any, repeat: int, seed: int) -> dict[str, Any]:
    """A finished session reported through the library (``Sidecar.report``, one session
    a call), p50, with its ``task_input`` (the request embedded, its usage rows written)
    and without (what intake cost before lookups learned from it), interleaved; then
    the rows and the state's size those sessions left."""
    from benchmarks.common import open_sidecar

    train = engine.protocol.training(0) if engine.protocol.folds else engine.protocol.train
    rng = random.Random(f"usage-intake:{seed}")
    pool = [q for q in train if q.relevant]
    rng.shuffle(pool)
    counter = iter(range(10**9))

    def report(with_text: bool) -> dict[str, Any]:
        i = next(counter)
        q = pool[i % len(pool)]
        steps = [{"tool": t, "arguments": {"n": i}, "output": {"ok": True}} for t in q.relevant]
        out: dict[str, Any] = {"steps": steps, "outcome": "completed", "session_id": f"s{i}"}
        if with_text:
            out["task_input"] = q.text
        return out

    with tempfile.TemporaryDirectory(prefix="bench-usage-intake-") as tmp:
        home = Path(tmp)
        with open_sidecar(home, embedder) as sc:
            sc.add_tools(engine.protocol.tools)
            sc.search("warm up", k=K)
            samples = interleaved(
                {
                    "with task_input": lambda: sc.report(report(True)),
                    "without": lambda: sc.report(report(False)),
                },
                repeat,
            )
            rows = sc.state.requests.count()
        state_bytes = sum(p.stat().st_size for p in home.glob("state.sqlite*"))
    stats = {n: summary(v) for n, v in samples.items()}
    return {
        "tools": len(engine.ids),
        "reports": stats,
        "with_vs_without_p50": ratio(
            stats["with task_input"]["p50_ms"], stats["without"]["p50_ms"]
        ),
        "sessions_with_task_input": repeat + 3,
        "usage_rows": rows,
        "state_bytes": state_bytes,
    }


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.retrieval_usage cost [--sizes 1000 100000] [--repeat 100]``
    (the cost part of ``bench_retrieval``'s usage protocol alone, over StableToolBench) or
    ``... curves [--full]`` (its learning curves alone); JSON on stdout."""
    import argparse
    import json

    from benchmarks.common import DEFAULT_DATASETS, model_embedder
    from benchmarks.retrieval_data import sample
    from benchmarks.retrieval_plans import PLANS, SHORT_QUERIES, loaders
    from sidecar.lookup.ranking import query_views

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("part", choices=("cost", "curves"))
    parser.add_argument("--sizes", type=int, nargs=2, default=(1_000, 100_000))
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--full", action="store_true", help="the full plan's curves")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    args = parser.parse_args(argv)
    embedder = model_embedder("onnx")
    plan = PLANS["full" if args.full else "quick"]
    out: dict[str, Any] = {}
    for name in (plan.cost_on,) if args.part == "cost" else plan.protocols:
        engine = Engine(loaders()[name](args.dataset.resolve()), embedder, {})
        if args.part == "curves":
            queries = sample(engine.protocol, plan.queries, args.seed)
            out[name] = protocol_curves(engine, queries, args.seed, plan.points)
            continue
        longs = [q.text for q in sample(engine.protocol, 300, args.seed)]
        short = [*SHORT_QUERIES, *(query_views(t)[-1] for t in longs)]
        texts = {"short": short, "long": longs}
        sizes = (args.sizes[0], args.sizes[1])
        out = cost(engine, texts, embedder, sizes, args.repeat, args.seed)
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
