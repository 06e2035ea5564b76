"""Question: what do several sidecars sharing one memory (the state in PostgreSQL, the
hot index on a Chroma server, the cold archive in Delta tables) cost against one
embedded sidecar (SQLite, embedded Chroma, the local Parquet table), and how stale is
one replica's view of another's writes?

Everything runs on one machine in one run: a PostgreSQL server
(:mod:`benchmarks.pgserver`), a ``chroma run`` server, and the test suite's moto S3
server (the Delta tables live in a bucket there), all on 127.0.0.1.  Each part of the
run gets a memory of its own (a PostgreSQL schema, a Chroma collection, an S3 prefix),
so no part sees another's tools or chains.

1. **Lookup and check.**  The same catalog (``tools`` seeded tools, the real
   all-MiniLM-L6-v2 on the sidecar's default path unless the sizes say otherwise) and
   the same archive (fatal continuations after ``tool_0 > tool_1``, and sessions whose
   failing ``exchange_items`` call is learned) in an embedded sidecar and in a shared
   one, both in this process.  ``search`` (with the prefix, the query embedded each
   time), ``check`` (a plan) and ``check_call`` are timed in one round robin; p50 / p99
   and the shared / embedded ratio.
2. **Intake throughput.**  1, 2 and 3 ``sidecar serve`` processes on one shared memory,
   the same ``clients`` client threads (spread over the replicas) each sending its
   sessions one request at a time; total sessions a second, against one embedded server
   with the same clients in the same run, and with 1 and 3 replicas whose Delta tables
   are in a local folder instead of S3 (what the object store costs, apart from the
   database).  The servers use the hashing embedder: the intake embeds nothing.  Full
   runs make two rounds, the second in reverse order.  Beside it, in this process, one
   session at a time reported to sidecars that differ in one backend at a time (SQLite
   or PostgreSQL, local Parquet or Delta on a folder or on S3, embedded Chroma or the
   server), in one round robin: where a session's intake time goes.
3. **Cross-replica staleness.**  Two servers on one memory.  A tool evicted on replica
   A (and, separately, a failing call reported on A): from the moment A answered,
   replica B is asked again and again (``search`` for the evicted tool's description;
   ``check_call`` of the failed call) until its answer reflects the write; the time
   from A's answer to the end of B's first reflecting answer, and how many answers
   came before it.  The same wait measured on A itself is the floor.
4. **Move latency.**  One eviction that moves one tool (``evict`` with one new chain
   behind one tool), embedded against shared, alternating, in this process.
5. **Delta append and compaction** as the archive grows: :mod:`benchmarks.bench_delta`
   run at this benchmark's size (its own protocol; not repeated here).
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench_lookup import WORDS
from benchmarks.common import model_embedder, quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, target
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.shared_report import markdown, plot
from benchmarks.shared_services import Services, library, replicas
from benchmarks.shared_staleness import staleness
from benchmarks.shared_workload import (
    REVISION_CACHE_MS,
    Sizes,
    catalog,
    fatal_chain,
    good_session,
    lookup_step,
    session,
)

if TYPE_CHECKING:
    from sidecar import Sidecar
    from sidecar.shells.client import RemoteSidecar

__all__ = ["markdown", "measure", "plot", "run", "targets"]
REPLICAS = (1, 2, 3)


QUICK = Sizes(
    tools=1_000,
    constraints=200,
    rounds=200,
    embedder="onnx",
    sessions_per_client=40,
    clients=3,
    intake_rounds=1,
    breakdown_sessions=20,
    staleness_trials=20,
    move_trials=10,
    delta=(10_000, 500, (5_000, 10_000), 100, 10),
)
FULL = Sizes(
    tools=10_000,
    constraints=1_000,
    rounds=1_000,
    embedder="onnx",
    sessions_per_client=60,
    clients=3,
    intake_rounds=2,
    breakdown_sessions=60,
    staleness_trials=60,
    move_trials=30,
    delta=(100_000, 500, (10_000, 25_000, 50_000, 100_000), 300, 50),
)


# ---- 1. lookup and check -----------------------------------------------------------------
def lookup_and_check(services: Services, root: Path, sizes: Sizes, seed: int) -> dict[str, Any]:
    from indexes import HashingEmbedder

    rng = random.Random(seed)
    embedder = model_embedder("onnx") if sizes.embedder == "onnx" else HashingEmbedder()
    tools = catalog(sizes.tools, rng)
    queries = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(sizes.rounds + 10)]
    modes = {
        "embedded": None,
        "shared": services.memory(),
        "shared_cached": services.memory(),
        "shared_leased": services.memory(),
    }
    build_s: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        sidecars: dict[str, Sidecar] = {}
        for mode, memory in modes.items():
            progress(f"shared: row 1, building the {mode} catalog ({len(tools):,} tools)")
            sc = stack.enter_context(
                library(root / f"lookup-{mode}", embedder, memory, **LOOKUP_EXTRAS[mode])
            )
            build_s[mode] = _fill(sc, tools, sizes.constraints)
            sidecars[mode] = sc
        checks: dict[str, Any] = {}
        fns: dict[str, Callable[[], Any]] = {}
        for mode, sc in sidecars.items():
            # the answers must be the same, or the timings compare different work
            checks[mode] = _answers(sc, queries[0])
            fns |= _timed_ops(mode, sc, queries, sizes.constraints)
        progress(f"shared: row 1, {sizes.rounds} rounds of search, check and check_call")
        samples = interleaved(fns, sizes.rounds, warmup=5)
    stats = {key: summary(values) for key, values in samples.items()}
    return {
        "embedder": embedder.name if hasattr(embedder, "name") else sizes.embedder,
        "tools": len(tools),
        "constraints": sizes.constraints,
        "build_s": build_s,
        "answers": checks,
        "same_answers": all(answers == checks["embedded"] for answers in checks.values()),
        "revision_cache_ms": REVISION_CACHE_MS,
        "ops": {op: _op_row(stats, op) for op in ("search", "check", "check_call")},
    }


LOOKUP_EXTRAS: dict[str, dict[str, float]] = {
    "embedded": {},
    "shared": {"revision_lease_ms": 0.0},
    "shared_cached": {"revision_lease_ms": 0.0, "revision_cache_ms": REVISION_CACHE_MS},
    "shared_leased": {},
}
"""Row 1's settings by mode: the revisions read on every request; the revision cache (no
lease); the revision lease (the default)."""


def _fill(sc: Sidecar, tools: list[Any], constraints: int) -> float:
    """Seconds to add the catalog and what the checks read: fatal chains, and three
    failing sessions beside three successes that teach a condition that makes
    check_call warn on a new order (the check reads the learned memory, as a block
    would)."""
    started = time.perf_counter()
    sc.add_tools(tools)
    sc.report_many(
        fatal_chain(["tool_0", "tool_1", f"tool_{2 + i}"], i) for i in range(constraints)
    )
    for n in range(3):
        sc.report(good_session(n))
        sc.report(session(n))
    return round(time.perf_counter() - started, 1)


def _answers(sc: Sidecar, query: str) -> dict[str, Any]:
    return {
        "check_safe": sc.check(["tool_0", "tool_1", "tool_2"]).safe,
        "check_call": sc.check_call(
            [lookup_step("#Q9")], "exchange_items", {"order_id": "#Q9"}
        ).decision,
        "search_hits": len(sc.search(query, k=5, after=["tool_0", "tool_1"]).hits),
    }


def _timed_ops(
    mode: str, sc: Sidecar, queries: list[str], constraints: int
) -> dict[str, Callable[[], Any]]:
    it = iter(queries)
    counter = iter(range(10**9))
    return {
        f"{mode}:search": lambda: sc.search(next(it), k=5, after=["tool_0", "tool_1"]),
        f"{mode}:check": lambda: sc.check(
            ["tool_0", "tool_1", f"tool_{2 + next(counter) % constraints}"]
        ),
        f"{mode}:check_call": lambda: _check_call(sc, f"#C{next(counter)}"),
    }


def _op_row(stats: dict[str, dict[str, float]], op: str) -> dict[str, Any]:
    def p50(mode: str) -> float:
        return stats[f"{mode}:{op}"]["p50_ms"]

    return {
        "embedded": stats[f"embedded:{op}"],
        "shared": stats[f"shared:{op}"],
        "p50_ratio": ratio(p50("shared"), p50("embedded"), 2),
        "p99_ratio": ratio(stats[f"shared:{op}"]["p99_ms"], stats[f"embedded:{op}"]["p99_ms"], 2),
        "shared_cached": stats[f"shared_cached:{op}"],
        "cached_p50_ratio": ratio(p50("shared_cached"), p50("embedded"), 2),
        "shared_leased": stats[f"shared_leased:{op}"],
        "leased_p50_ratio": ratio(p50("shared_leased"), p50("embedded"), 2),
    }


def _check_call(sc: Sidecar, order: str) -> Any:
    return sc.check_call([lookup_step(order)], "exchange_items", {"order_id": order})


# ---- 2. intake throughput ----------------------------------------------------------------
def _drive(clients: list[RemoteSidecar], per_client: int, base: int) -> dict[str, Any]:
    """Every client sends its sessions one request each, all clients at once; the total
    sessions a second over the wall time of the slowest."""
    barrier = threading.Barrier(len(clients) + 1)
    statuses: list[list[str]] = [[] for _ in clients]
    errors: list[str] = []

    def work(i: int, client: RemoteSidecar) -> None:
        bodies = [session(base + i * per_client + n) for n in range(per_client)]
        barrier.wait()
        try:
            for body in bodies:
                statuses[i].append(client.report(body).status)
        except Exception as exc:  # counted and shown in the result, not raised in a thread
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    done = sum(len(s) for s in statuses)
    counts: dict[str, int] = {}
    for s in statuses:
        for status in s:
            counts[status] = counts.get(status, 0) + 1
    return {
        "sessions": done,
        "wall_s": round(wall, 2),
        "sessions_per_s": round(done / wall, 1) if wall else 0.0,
        "statuses": counts,
        "errors": errors[:5],
    }


INTAKE_FOLDER = (1, 3)
"""Replica counts also run with the Delta tables in a local folder instead of S3."""


def intake(services: Services, root: Path, sizes: Sizes) -> dict[str, Any]:
    """Each configuration on a memory of its own, ``intake_rounds`` times, the order
    reversed every other round so that drift on the machine does not favour one end of
    the curve; a configuration's figure is its sessions over its wall time, all rounds."""
    from sidecar import Tool

    tools = [Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]
    plan: list[tuple[str, int, str]] = [
        ("embedded", 1, "local Parquet"),
        *((str(n), n, "Delta on S3") for n in REPLICAS),
        *((f"{n} folder", n, "Delta on a folder") for n in INTAKE_FOLDER),
    ]
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label, _n, _c in plan}
    for number in range(sizes.intake_rounds):
        for label, count, cold in plan if number % 2 == 0 else list(reversed(plan)):
            progress(
                f"shared: row 2, round {number + 1}, intake on {label} ({count} server(s), "
                f"{sizes.clients} clients)"
            )
            memory = None if label == "embedded" else services.memory(cold == "Delta on a folder")
            with replicas(root, count, memory) as servers:
                first = servers[0].client()
                first.add_tools(tools)
                first.report(session(-1))  # connections and tables warm before the clock
                first.close()
                clients = [servers[i % count].client() for i in range(sizes.clients)]
                try:
                    rounds[label].append(_drive(clients, sizes.sessions_per_client, 0))
                finally:
                    for c in clients:
                        c.close()
    runs: dict[str, Any] = {}
    for label, count, cold in plan:
        done = sum(r["sessions"] for r in rounds[label])
        wall = sum(r["wall_s"] for r in rounds[label])
        statuses: dict[str, int] = {}
        for r in rounds[label]:
            for key, value in r["statuses"].items():
                statuses[key] = statuses.get(key, 0) + value
        runs[label] = {
            "replicas": count,
            "cold": cold,
            "sessions": done,
            "wall_s": round(wall, 2),
            "sessions_per_s": round(done / wall, 1) if wall else 0.0,
            "rounds_sessions_per_s": [r["sessions_per_s"] for r in rounds[label]],
            "statuses": statuses,
            "errors": [e for r in rounds[label] for e in r["errors"]][:5],
        }
    one = runs["1"]["sessions_per_s"]
    for run in runs.values():
        run["vs_one_shared_replica"] = ratio(run["sessions_per_s"], one, 2)
    return {
        "clients": sizes.clients,
        "sessions_per_client": sizes.sessions_per_client,
        "rounds": sizes.intake_rounds,
        "runs": runs,
    }


BREAKDOWN = {
    "embedded": "SQLite, embedded Chroma, local Parquet",
    "postgres": "PostgreSQL, embedded Chroma, local Parquet",
    "postgres_delta_folder": "PostgreSQL, embedded Chroma, Delta on a folder",
    "postgres_delta_s3": "PostgreSQL, embedded Chroma, Delta on S3",
    "shared": "PostgreSQL, Chroma server, Delta on S3",
}


def intake_breakdown(services: Services, root: Path, sizes: Sizes) -> dict[str, Any]:
    """Where one session's intake time goes: the same session reported, one at a time
    in this process, to sidecars that differ in one backend at a time, in one round
    robin."""
    from indexes import HashingEmbedder
    from sidecar import Tool

    mixes: dict[str, dict[str, Any]] = {"embedded": {}}
    mixes["postgres"] = {"database_url": services.memory().database_url}
    folder = services.memory(cold_folder=True)
    mixes["postgres_delta_folder"] = {
        "database_url": folder.database_url,
        "cold_url": folder.cold_url,
    }
    s3 = services.memory()
    mixes["postgres_delta_s3"] = {"database_url": s3.database_url, "cold_url": s3.cold_url}
    mixes["shared"] = services.memory().overrides()
    tools = [Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]
    progress(f"shared: row 2, {sizes.breakdown_sessions} sessions on each backend mix")
    with contextlib.ExitStack() as stack:
        fns: dict[str, Callable[[], Any]] = {}
        for name, over in mixes.items():
            sc = stack.enter_context(
                library(root / f"breakdown-{name}", HashingEmbedder(), None, **over)
            )
            sc.add_tools(tools)
            counter = iter(range(10**9))
            fns[name] = lambda s=sc, c=counter: s.report(session(next(c)))
        samples = interleaved(fns, sizes.breakdown_sessions, warmup=2)
    stats = {name: summary(values) for name, values in samples.items()}
    base = stats["embedded"]["p50_ms"]
    return {
        name: {
            "backends": BREAKDOWN[name],
            **stats[name],
            "p50_vs_embedded": ratio(stats[name]["p50_ms"], base, 2),
        }
        for name in mixes
    }


# ---- 4. move latency -------------------------------------------------------------------------
def moves(services: Services, root: Path, sizes: Sizes, seed: int) -> dict[str, Any]:
    from indexes import HashingEmbedder

    rng = random.Random(seed)
    n = sizes.move_trials
    tools = catalog(200, rng)
    from sidecar import Tool

    tools += [Tool(f"move_{i}", f"move tool {i}") for i in range(n)]
    tools += [Tool(f"then_{i}", f"then tool {i}") for i in range(n)]
    samples: dict[str, list[float]] = {"embedded": [], "shared": []}
    progress(f"shared: row 4, {n} one-tool moves in each mode")
    with contextlib.ExitStack() as stack:
        sidecars = {
            mode: stack.enter_context(
                library(root / f"move-{mode}", HashingEmbedder(), memory, evict_min_chains=1)
            )
            for mode, memory in (("embedded", None), ("shared", services.memory()))
        }
        for sc in sidecars.values():
            sc.add_tools(tools)
            sc.report(fatal_chain(["tool_0", "tool_1"], -1))
            sc.evict()  # the first move opens what a move touches (cold tables, locks)
        for i in range(n):
            order = list(sidecars) if i % 2 == 0 else list(reversed(sidecars))
            for mode in order:
                sc = sidecars[mode]
                sc.report(fatal_chain([f"move_{i}", f"then_{i}"], i))
                started = time.perf_counter()
                report = sc.evict()
                samples[mode].append((time.perf_counter() - started) * 1000.0)
                assert [d.tool_id for d in report.evicted] == [f"move_{i}"], report.evicted
    stats = {mode: summary(values) for mode, values in samples.items()}
    return {
        "trials": n,
        "embedded": stats["embedded"],
        "shared": stats["shared"],
        "p50_ratio": ratio(stats["shared"]["p50_ms"], stats["embedded"]["p50_ms"], 2),
    }


# ---- 5. Delta append and compaction --------------------------------------------------------
def delta(sizes: Sizes, seed: int) -> dict[str, Any] | None:
    if sizes.delta is None:
        return None
    from benchmarks.bench_delta import measure

    chains, batch, steps, lookups, maintain_every = sizes.delta
    progress(f"shared: row 5, bench_delta to {chains:,} chains")
    result = measure(chains, batch, list(steps), lookups, maintain_every, seed)
    result.pop("machine", None)
    result["targets"] = []  # its own target belongs to `delta`; here it is context
    return result


# ---- the run --------------------------------------------------------------------------------
def measure(sizes: Sizes, seed: int = 7) -> dict[str, Any]:
    started = time.perf_counter()
    timings: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-shared-") as tmp,
        Services(Path(tmp)) as services,
    ):
        root = Path(tmp)

        def timed_part(name: str, fn: Callable[[], Any]) -> Any:
            t0 = time.perf_counter()
            value = fn()
            timings[name] = round(time.perf_counter() - t0, 1)
            return value

        rows: dict[str, Any] = {
            "lookup": timed_part("lookup", lambda: lookup_and_check(services, root, sizes, seed)),
            "intake": timed_part("intake", lambda: intake(services, root, sizes)),
            "intake_breakdown": timed_part(
                "intake_breakdown", lambda: intake_breakdown(services, root, sizes)
            ),
            "staleness": timed_part("staleness", lambda: staleness(services, root, sizes)),
            "move": timed_part("move", lambda: moves(services, root, sizes, seed)),
        }
    rows["delta"] = timed_part("delta", lambda: delta(sizes, seed))
    timings["total"] = round(time.perf_counter() - started, 1)
    return {
        "benchmark": "shared",
        "question": (
            "several sidecars sharing one memory (PostgreSQL, a Chroma server, Delta cold "
            "tables on S3) against one embedded sidecar: lookup and check latency, intake "
            "throughput by replicas, cross-replica staleness, move latency, Delta growth"
        ),
        "machine": machine(),
        "params": {**asdict(sizes), "seed": seed},
        "shared_cold": "Delta tables on S3 (moto, HTTP on 127.0.0.1), one prefix per memory",
        **rows,
        "targets": targets(rows),
        "timings_s": timings,
    }


def targets(rows: dict[str, Any]) -> list[dict[str, Any]]:
    ops = rows["lookup"]["ops"]
    runs = rows["intake"]["runs"]
    curve = {n: runs[str(n)]["vs_one_shared_replica"] for n in REPLICAS}
    stale = rows["staleness"]
    out = [
        target(
            f"shared: {op} p50, shared replica / embedded",
            "<= 1.5x",
            ops[op]["p50_ratio"],
            ops[op]["p50_ratio"] <= 1.5,
        )
        for op in ("search", "check", "check_call")
    ]
    out.append(
        target(
            "shared: total intake throughput as replicas are added (vs 1 replica)",
            "does not fall (each >= 1.0)",
            {f"{n} replicas": v for n, v in curve.items()},
            all(v >= 1.0 for v in curve.values()),
        )
    )
    out.append(
        target(
            "shared: staleness on the other replica, eviction / report, max ms",
            "reported (no target)",
            {k: stale[k]["other"]["max_ms"] for k in ("evict", "report")},
            None,
        )
    )
    out.append(
        target(
            "shared: one-tool move p50, shared / embedded",
            "reported (no target)",
            rows["move"]["p50_ratio"],
            None,
        )
    )
    return out


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    return measure(QUICK if quick else FULL, seed)


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
