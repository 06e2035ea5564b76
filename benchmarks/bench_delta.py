"""Question: what does the Delta cold store cost against the local Parquet table, as the
archive grows to 100k chains: the append of one intake batch, a compaction, and the
resolution of one pointer (p50)?

Three stores take the same seeded chains in the same batches, round-robin batch by
batch so that drift on the machine hits them alike: the local Parquet table (the
baseline), a Delta table on a local folder, and a Delta table on S3 served by moto in
its own process over HTTP on 127.0.0.1.  At each step of the growth, every store
resolves the same random pointers; the Delta stores are then compacted (Delta's
optimize; the local table has nothing to compact) and resolve them again, and a
freshly opened store's first lookup (the key cache built from the table) is timed.
Appends go on after a compaction, as they would between maintenance runs.  Emits JSON.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.bench_store import make_row
from benchmarks.common import (
    machine,
    md_table,
    md_targets,
    pyplot,
    quick_main,
    ratio,
    save_figure,
    summary,
    target,
)
from cold_store import ColdStore, S3Options

BACKENDS = ("parquet", "delta", "s3")
LABELS = {
    "parquet": "local Parquet (baseline)",
    "delta": "Delta, local folder",
    "s3": "Delta, S3 (moto, HTTP)",
}


@contextmanager
def s3_store_location() -> Iterator[tuple[str, S3Options]]:
    """A bucket on a moto server in a child process (the test suite's), for the run."""
    from tests.cold_store.backends import S3Server

    server = S3Server()
    try:
        yield f"s3://{server.new_bucket()}/bench", server.options()
    finally:
        server.close()


def _ms(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, (time.perf_counter() - start) * 1000.0


def measure(chains: int, batch: int, steps: list[int], lookups: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [make_row(i, rng, day + timedelta(days=i * 30 // chains)) for i in range(chains)]
    batches = [rows[i : i + batch] for i in range(0, chains, batch)]
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as tmp, s3_store_location() as s3:
        locations = {
            "parquet": (str(Path(tmp) / "parquet"), None),
            "delta": (f"delta+file://{Path(tmp) / 'delta'}", None),
            "s3": s3,
        }
        stores = {name: ColdStore(loc, s3=opts) for name, (loc, opts) in locations.items()}
        appends: dict[str, list[float]] = {name: [] for name in BACKENDS}
        points: list[dict[str, Any]] = []
        done = 0
        try:
            for number, rows_of_batch in enumerate(batches):
                for name in BACKENDS[number % 3 :] + BACKENDS[: number % 3]:
                    chains = stores[name].chains
                    start = time.perf_counter()
                    chains.append(rows_of_batch, batch=f"b{number}")
                    appends[name].append((time.perf_counter() - start) * 1000.0)
                done += len(rows_of_batch)
                if done in steps:
                    point = _step(done, rows[:done], stores, locations, appends, lookups, rng)
                    points.append(point)
        finally:
            for store in stores.values():
                store.close()
    final = points[-1]
    return {
        "benchmark": "delta",
        "question": (
            "Delta cold store vs the local Parquet table as the archive grows: append, "
            "compaction, pointer resolution p50"
        ),
        "machine": machine(),
        "params": {
            "chains": chains,
            "batch": batch,
            "steps": steps,
            "lookups": lookups,
            "seed": seed,
        },
        "points": points,
        "append_all": {name: summary(appends[name]) for name in BACKENDS},
        "append_p50_vs_parquet": {
            name: ratio(summary(appends[name])["p50_ms"], summary(appends["parquet"])["p50_ms"], 2)
            for name in BACKENDS
        },
        "resolve_p50_vs_parquet_at_end": {
            name: ratio(
                final["resolve_compacted"][name]["p50_ms"],
                final["resolve_compacted"]["parquet"]["p50_ms"],
                2,
            )
            for name in BACKENDS
        },
    }


def _step(
    size: int,
    stored: list[dict[str, Any]],
    stores: dict[str, ColdStore],
    locations: dict[str, tuple[str, S3Options | None]],
    appends: dict[str, list[float]],
    lookups: int,
    rng: random.Random,
) -> dict[str, Any]:
    keys = [rng.choice(stored)["chain_id"] for _ in range(lookups)]

    def resolve_all() -> dict[str, dict[str, float]]:
        out: dict[str, list[float]] = {name: [] for name in BACKENDS}
        for i, key in enumerate(keys):
            for name in BACKENDS[i % 3 :] + BACKENDS[: i % 3]:
                _row, ms = _ms(lambda s=stores[name], k=key: s.resolve(f"cold://chains/{k}"))
                out[name].append(ms)
        return {name: summary(samples) for name, samples in out.items()}

    recent = {name: summary(samples[-20:]) for name, samples in appends.items()}
    files_before = {name: _files(stores[name]) for name in BACKENDS}
    before = resolve_all()
    compaction: dict[str, Any] = {}
    for name in BACKENDS:
        maintained, ms = _ms(stores[name].compact)
        chains = maintained[0]
        compaction[name] = {
            "ms": round(ms, 1),
            "files_removed": chains.files_removed,
            "files_added": chains.files_added,
        }
    after = resolve_all()
    cold_open: dict[str, float] = {}
    for name in BACKENDS:
        location, options = locations[name]

        def first_lookup(loc: str = location, opts: S3Options | None = options) -> None:
            fresh = ColdStore(loc, s3=opts)
            try:
                fresh.resolve(f"cold://chains/{keys[0]}")
            finally:
                fresh.close()

        _none, cold_open[name] = _ms(first_lookup)
    return {
        "chains": size,
        "append_last_20": recent,
        "files_before_compaction": files_before,
        "resolve": before,
        "compaction": compaction,
        "resolve_compacted": after,
        "open_and_first_lookup_ms": {k: round(v, 1) for k, v in cold_open.items()},
    }


def _files(store: ColdStore) -> int:
    table = store.chains
    files = getattr(table, "_files", None)  # the Delta table's key cache
    if files is not None:
        return len(files)
    assert store.root is not None
    return len(list((store.root / "chains").rglob("*.parquet")))


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    """100k chains in 500-chain batches (200 appends per store) either way; quick
    resolves fewer pointers at fewer steps."""
    started = time.perf_counter()
    if quick:
        result = measure(100_000, 500, [20_000, 100_000], 100, seed)
    else:
        result = measure(100_000, 500, [10_000, 25_000, 50_000, 100_000], 300, seed)
    ratios = result["resolve_p50_vs_parquet_at_end"]
    result["targets"] = [
        target(
            "delta: pointer resolution p50 on a local Delta table vs the local Parquet table "
            "at 100k chains (compacted)",
            "within 3x of the local table (no target is set by the issue)",
            ratios["delta"],
            ratios["delta"] <= 3,
        )
    ]
    result["timings_s"] = {"total": round(time.perf_counter() - started, 1)}
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = ["## Delta cold store", ""]
    rows = []
    for point in result["points"]:
        for name in BACKENDS:
            c = point["compaction"][name]
            rows.append(
                [
                    f"{point['chains']:,}",
                    LABELS[name],
                    point["append_last_20"][name]["p50_ms"],
                    point["files_before_compaction"][name],
                    point["resolve"][name]["p50_ms"],
                    f"{c['ms']:,.0f} ({c['files_removed']} -> {c['files_added']})",
                    point["resolve_compacted"][name]["p50_ms"],
                    point["open_and_first_lookup_ms"][name],
                ]
            )
    lines.append(
        md_table(
            [
                "chains",
                "store",
                "append p50 ms (last 20)",
                "files",
                "resolve p50 ms",
                "compaction ms (files)",
                "resolve p50 ms, compacted",
                "open + first lookup ms",
            ],
            rows,
        )
    )
    ratios = result["append_p50_vs_parquet"]
    res = result["resolve_p50_vs_parquet_at_end"]
    lines += [
        "",
        f"Over all {result['params']['chains']:,} chains in "
        f"{result['params']['batch']}-chain batches, append p50 is {ratios['delta']}x the "
        f"local table's on a local Delta table and {ratios['s3']}x on S3; at the end, "
        f"compacted, pointer resolution p50 is {res['delta']}x and {res['s3']}x.",
        "",
        md_targets(result["targets"]),
        "",
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p["chains"] for p in result["points"]]
    for name in BACKENDS:
        left.plot(
            xs,
            [p["append_last_20"][name]["p50_ms"] for p in result["points"]],
            "o-",
            label=LABELS[name],
        )
        right.plot(
            xs,
            [p["resolve_compacted"][name]["p50_ms"] for p in result["points"]],
            "o-",
            label=LABELS[name],
        )
    left.set_title("append of one batch, p50")
    right.set_title("resolve one pointer after compaction, p50")
    for ax in (left, right):
        ax.set_xlabel("chains archived")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.legend()
    return [save_figure(plt, fig, out_dir / "delta.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
