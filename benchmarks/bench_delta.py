"""Question: what does the Delta cold store cost against the local Parquet table as the
archive grows to 100k chains: the append of one intake batch, the maintenance
(compaction and checkpoint), and the resolution of one pointer (p50)?

Four stores take the same seeded chains in the same batches, round-robin batch by batch
so that drift on the machine hits them alike: the local Parquet table (the baseline), a
Delta table on a local folder, a Delta table on S3 served by moto in its own process
over HTTP on 127.0.0.1, and a second local Delta table that is never maintained.  The
first two Delta stores run their maintenance every ``maintain_every`` appends, as the
sidecar's maintenance would: a compaction (Delta's optimize) then a checkpoint; each
run is timed.  At each step of the growth every store resolves the same random
pointers, and a freshly opened store's first lookup (the key cache built from the
table) is timed.  Emits JSON.
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

STORES = ("parquet", "delta", "s3", "delta_unmaintained")
MAINTAINED = ("delta", "s3")
LABELS = {
    "parquet": "local Parquet (baseline)",
    "delta": "Delta, local folder",
    "s3": "Delta, S3 (moto, HTTP)",
    "delta_unmaintained": "Delta, local, never maintained",
}


@contextmanager
def s3_location() -> Iterator[tuple[str, S3Options]]:
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


def _rotated(names: tuple[str, ...], turn: int) -> tuple[str, ...]:
    shift = turn % len(names)
    return names[shift:] + names[:shift]


def measure(
    chains: int, batch: int, steps: list[int], lookups: int, maintain_every: int, seed: int
) -> dict[str, Any]:
    rng = random.Random(seed)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [make_row(i, rng, day + timedelta(days=i * 30 // chains)) for i in range(chains)]
    batches = [rows[i : i + batch] for i in range(0, chains, batch)]
    with tempfile.TemporaryDirectory(prefix="bench-delta-") as tmp, s3_location() as s3:
        locations: dict[str, tuple[str, S3Options | None]] = {
            "parquet": (str(Path(tmp) / "parquet"), None),
            "delta": (f"delta+file://{Path(tmp) / 'delta'}", None),
            "s3": s3,
            "delta_unmaintained": (f"delta+file://{Path(tmp) / 'raw'}", None),
        }
        stores = {name: ColdStore(loc, s3=opts) for name, (loc, opts) in locations.items()}
        appends: dict[str, list[float]] = {name: [] for name in STORES}
        maintenance: dict[str, list[dict[str, Any]]] = {name: [] for name in MAINTAINED}
        points: list[dict[str, Any]] = []
        done = 0
        try:
            for number, rows_of_batch in enumerate(batches):
                for name in _rotated(STORES, number):
                    table = stores[name].chains
                    start = time.perf_counter()
                    table.append(rows_of_batch, batch=f"b{number}")
                    appends[name].append((time.perf_counter() - start) * 1000.0)
                done += len(rows_of_batch)
                if (number + 1) % maintain_every == 0:
                    for name in MAINTAINED:
                        maintenance[name].append(_maintain(stores[name], done))
                if done in steps:
                    point = _step(done, rows[:done], stores, locations, appends, lookups, rng)
                    points.append(point)
        finally:
            for store in stores.values():
                store.close()
    end = points[-1]["resolve"]
    first = points[0]["append_recent"]
    last = points[-1]["append_recent"]
    return {
        "benchmark": "delta",
        "question": (
            "Delta cold store vs the local Parquet table as the archive grows: append, "
            "maintenance, pointer resolution p50"
        ),
        "machine": machine(),
        "params": {
            "chains": chains,
            "batch": batch,
            "steps": steps,
            "lookups": lookups,
            "maintain_every": maintain_every,
            "seed": seed,
        },
        "points": points,
        "maintenance": maintenance,
        "append_all": {name: summary(appends[name]) for name in STORES},
        "append_p50_vs_parquet": {
            name: ratio(summary(appends[name])["p50_ms"], summary(appends["parquet"])["p50_ms"], 2)
            for name in STORES
        },
        "append_growth_first_to_last_step": {
            name: ratio(last[name]["p50_ms"], first[name]["p50_ms"], 2) for name in STORES
        },
        "resolve_p50_vs_parquet_at_end": {
            name: ratio(end[name]["p50_ms"], end["parquet"]["p50_ms"], 2) for name in STORES
        },
    }


def _maintain(store: ColdStore, chains: int) -> dict[str, Any]:
    compacted, compact_ms = _ms(store.compact)
    _done, checkpoint_ms = _ms(store.checkpoint)
    return {
        "chains": chains,
        "compact_ms": round(compact_ms, 1),
        "files_removed": compacted[0].files_removed,
        "checkpoint_ms": round(checkpoint_ms, 1),
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
    resolve: dict[str, list[float]] = {name: [] for name in STORES}
    for i, key in enumerate(keys):
        for name in _rotated(STORES, i):
            _row, ms = _ms(lambda s=stores[name], k=key: s.resolve(f"cold://chains/{k}"))
            resolve[name].append(ms)
    cold_open: dict[str, float] = {}
    for name in STORES:
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
        "append_recent": {name: summary(samples[-20:]) for name, samples in appends.items()},
        "files": {name: _files(stores[name]) for name in STORES},
        "resolve": {name: summary(samples) for name, samples in resolve.items()},
        "open_and_first_lookup_ms": {k: round(v, 1) for k, v in cold_open.items()},
    }


def _files(store: ColdStore) -> int:
    files = getattr(getattr(store.chains, "_cache", None), "files", None)  # Delta: the key cache
    if files is not None:
        return len(files)
    assert store.root is not None
    return len(list((store.root / "chains").rglob("*.parquet")))


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    """100k chains in 500-chain batches (200 appends per store) either way, maintained
    every 50 appends; quick resolves fewer pointers at fewer steps."""
    started = time.perf_counter()
    if quick:
        result = measure(100_000, 500, [25_000, 100_000], 100, 50, seed)
    else:
        result = measure(100_000, 500, [10_000, 25_000, 50_000, 100_000], 300, 50, seed)
    ratios = result["resolve_p50_vs_parquet_at_end"]
    result["targets"] = [
        target(
            "delta: pointer resolution p50 on a local Delta table vs the local Parquet table "
            "at 100k chains",
            "within 3x of the local table (no target is set by the issue)",
            ratios["delta"],
            ratios["delta"] <= 3,
        )
    ]
    result["timings_s"] = {"total": round(time.perf_counter() - started, 1)}
    return result


def markdown(result: dict[str, Any]) -> str:
    rows = [
        [
            f"{point['chains']:,}",
            LABELS[name],
            point["append_recent"][name]["p50_ms"],
            point["files"][name],
            point["resolve"][name]["p50_ms"],
            point["resolve"][name]["p99_ms"],
            point["open_and_first_lookup_ms"][name],
        ]
        for point in result["points"]
        for name in STORES
    ]
    maintenance = [
        [
            LABELS[name],
            f"{m['chains']:,}",
            f"{m['compact_ms']:,.0f}",
            m["files_removed"],
            f"{m['checkpoint_ms']:,.0f}",
        ]
        for name in MAINTAINED
        for m in result["maintenance"][name]
    ]
    p = result["params"]
    append = result["append_p50_vs_parquet"]
    growth = result["append_growth_first_to_last_step"]
    res = result["resolve_p50_vs_parquet_at_end"]
    return "\n".join(
        [
            "## Delta cold store",
            "",
            md_table(
                [
                    "chains",
                    "store",
                    "append p50 ms (last 20)",
                    "files",
                    "resolve p50 ms",
                    "resolve p99 ms",
                    "open + first lookup ms",
                ],
                rows,
            ),
            "",
            f"Maintenance every {p['maintain_every']} appends of {p['batch']} chains:",
            "",
            md_table(
                ["store", "chains", "compaction ms", "files merged", "checkpoint ms"], maintenance
            ),
            "",
            f"Over all {p['chains']:,} chains, append p50 is {append['delta']}x the local "
            f"table's on a maintained local Delta table, {append['s3']}x on S3 and "
            f"{append['delta_unmaintained']}x on a local Delta table never maintained; from "
            f"the first step to the last it grew {growth['delta']}x, {growth['s3']}x and "
            f"{growth['delta_unmaintained']}x (the local table: {growth['parquet']}x).  At "
            f"the end, pointer resolution p50 is {res['delta']}x the local table's on the "
            f"local Delta table and {res['s3']}x on S3.",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [p["chains"] for p in result["points"]]
    for name in STORES:
        appends = [p["append_recent"][name]["p50_ms"] for p in result["points"]]
        lookups = [p["resolve"][name]["p50_ms"] for p in result["points"]]
        left.plot(xs, appends, "o-", label=LABELS[name])
        right.plot(xs, lookups, "o-", label=LABELS[name])
    left.set_title("append of one batch, p50")
    right.set_title("resolve one pointer, p50")
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
