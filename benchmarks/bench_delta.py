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

Two more questions, each its own mode:

- ``--commits``: what does one append cost as the rows per commit grow (1, 10, 100,
  1,000), on a Delta table in a folder against one on S3 (and the local Parquet table),
  as one batch, and as a group commit of one-row batches (``append_batches``: one commit
  carrying that many callers' batches, each its own id)?  Appends are interleaved
  round-robin across stores and sizes.
- ``--stress``: do many writer processes on one Delta table on S3, meeting injected
  delays, 503s and lost replies at every step of a commit (``benchmarks/delta_stress.py``
  through ``benchmarks/s3server.py``'s fault proxy), lose any acknowledged row or store
  one twice?  (``benchmarks/bench_delta_stress.py``.)
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.bench_store import make_row
from benchmarks.harness.results import (
    emit,
    machine,
    md_table,
    md_targets,
    pyplot,
    save_figure,
    target,
)
from benchmarks.harness.timing import ratio, summary
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
    from benchmarks.s3server import S3Server

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
        **_ratios(points, appends),
    }


def _ratios(points: list[dict[str, Any]], appends: dict[str, list[float]]) -> dict[str, Any]:
    """Each store's appends and resolutions against the local Parquet table's, and its
    appends' growth from the first step to the last."""
    end = points[-1]["resolve"]
    first = points[0]["append_recent"]
    last = points[-1]["append_recent"]
    return {
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


def run(quick: bool, seed: int = 7, mode: str = "growth") -> dict[str, Any]:
    """``mode``: ``growth`` (the default), ``commits`` or ``stress`` (see the module)."""
    if mode == "commits":
        return commit_costs(quick, seed)
    if mode == "stress":
        from benchmarks.bench_delta_stress import stress

        return stress(quick, seed)
    return growth(quick, seed)


def growth(quick: bool, seed: int = 7) -> dict[str, Any]:
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


POINT_HEADERS = (
    "chains",
    "store",
    "append p50 ms (last 20)",
    "files",
    "resolve p50 ms",
    "resolve p99 ms",
    "open + first lookup ms",
)


def _maintenance_rows(maintenance: dict[str, Any]) -> list[list[Any]]:
    return [
        [
            LABELS[name],
            f"{m['chains']:,}",
            f"{m['compact_ms']:,.0f}",
            m["files_removed"],
            f"{m['checkpoint_ms']:,.0f}",
        ]
        for name in MAINTAINED
        for m in maintenance[name]
    ]


def markdown(result: dict[str, Any]) -> str:
    if result.get("mode_of_run") == "commits":
        return commits_markdown(result)
    if result.get("mode_of_run") == "stress":
        from benchmarks.bench_delta_stress import stress_markdown

        return stress_markdown(result)
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
    p = result["params"]
    append = result["append_p50_vs_parquet"]
    growth = result["append_growth_first_to_last_step"]
    res = result["resolve_p50_vs_parquet_at_end"]
    return "\n".join(
        [
            "## Delta cold store",
            "",
            md_table(POINT_HEADERS, rows),
            "",
            f"Maintenance every {p['maintain_every']} appends of {p['batch']} chains:",
            "",
            md_table(
                ["store", "chains", "compaction ms", "files merged", "checkpoint ms"],
                _maintenance_rows(result["maintenance"]),
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
    if "points" not in result:
        return []
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


# ---- commits: the cost of one append as the rows per commit grow ------------------------
COMMIT_STORES = ("parquet", "delta", "s3")
COMMIT_SIZES = (1, 10, 100, 1000)
SHAPES = ("one batch", "group of 1-row batches")


def commit_costs(quick: bool, seed: int = 7) -> dict[str, Any]:
    """Each size appended ``rounds`` times per store and shape (one batch, or a group
    commit of one-row batches), after 2,000 chains already stored.  Then three more
    rounds on another S3 table reached through the test server's proxy (without
    faults), which counts each append's requests by step."""
    from benchmarks.s3server import FaultSpec, S3Server

    started = time.perf_counter()
    rounds = 8 if quick else 20
    rng = random.Random(seed)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    counter = iter(range(10**9))

    def rows_of(n: int) -> list[dict[str, Any]]:
        return [make_row(next(counter), rng, day) for _ in range(n)]

    samples: dict[str, list[float]] = {}
    requests: dict[str, dict[str, float]] = {}
    server = S3Server(faults=FaultSpec())
    with tempfile.TemporaryDirectory(prefix="bench-commits-") as tmp:
        locations: dict[str, tuple[str, S3Options | None]] = {
            "parquet": (str(Path(tmp) / "parquet"), None),
            "delta": (f"delta+file://{Path(tmp) / 'delta'}", None),
            "s3": (
                f"s3://{server.new_bucket()}/bench",
                server.options(endpoint_url=server.direct_endpoint),
            ),
        }
        stores = {name: ColdStore(loc, s3=opts) for name, (loc, opts) in locations.items()}
        try:
            seedling = rows_of(2000)
            for store in stores.values():
                store.chains.append(seedling, batch="seed")
            _commit_rounds(stores, rows_of, rounds, samples)
            requests = _count_requests(server, rows_of, rounds=3)
        finally:
            for store in stores.values():
                store.close()
            server.close()
    points = [
        {"rows": n, "shape": shape, "store": name, **summary(samples[f"{name}/{n}/{shape}"])}
        for n in COMMIT_SIZES
        for shape in SHAPES
        for name in COMMIT_STORES
    ]
    return {
        "benchmark": "delta",
        "mode_of_run": "commits",
        "question": (
            "one append of N rows (1, 10, 100, 1,000) on a Delta table in a folder vs on S3 "
            "(moto), as one batch or as a group commit of one-row batches"
        ),
        "machine": machine(),
        "params": {"rounds": rounds, "sizes": list(COMMIT_SIZES), "seed": seed},
        "points": points,
        "s3_requests_per_append": requests,
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _commit_rounds(
    stores: dict[str, Any],
    rows_of: Callable[[int], list[dict[str, Any]]],
    rounds: int,
    samples: dict[str, list[float]],
) -> None:
    """Every size and shape appended once per round to every store, the stores taking
    turns to go first."""
    turn = 0
    for r in range(rounds):
        for n in COMMIT_SIZES:
            for shape in SHAPES:
                batch = rows_of(n)
                for name in _rotated(COMMIT_STORES, turn):
                    label = f"{name}/{n}/{shape}"
                    _append_timed(stores[name], batch, shape, label, r, samples)
                turn += 1


def _count_requests(server: Any, rows_of: Any, rounds: int) -> dict[str, dict[str, float]]:
    """Requests per append to S3, by step, through the server's proxy (untimed: the
    timed store talks to the server directly)."""
    store = ColdStore(f"s3://{server.new_bucket()}/counted", s3=server.options())
    counted: dict[str, Counter[str]] = {}
    try:
        store.chains.append(rows_of(2000), batch="seed")
        for r in range(rounds):
            for n in COMMIT_SIZES:
                for shape in SHAPES:
                    label = f"s3/{n}/{shape}"
                    before = Counter(server.request_counts())
                    _append_timed(store, rows_of(n), shape, label, r, {})
                    after = Counter(server.request_counts())
                    counted.setdefault(label, Counter()).update(after - before)
    finally:
        store.close()
    return {
        label: {step: round(count / rounds, 1) for step, count in sorted(c.items())}
        for label, c in counted.items()
    }


def _append_timed(
    store: ColdStore,
    rows: list[dict[str, Any]],
    shape: str,
    label: str,
    round_: int,
    samples: dict[str, list[float]],
) -> None:
    start = time.perf_counter()
    if shape == "one batch":
        store.chains.append(rows, batch=f"{label}/{round_}")
    else:
        store.chains.append_batches({f"{label}/{round_}/{i}": [row] for i, row in enumerate(rows)})
    samples.setdefault(label, []).append((time.perf_counter() - start) * 1000.0)


def commits_markdown(result: dict[str, Any]) -> str:
    by = {(p["rows"], p["shape"], p["store"]): p["p50_ms"] for p in result["points"]}
    rows = []
    for n in result["params"]["sizes"]:
        for shape in SHAPES:
            folder, s3, local = (by[(n, shape, s)] for s in ("delta", "s3", "parquet"))
            rows.append(
                [
                    n,
                    shape,
                    local,
                    folder,
                    s3,
                    ratio(s3, folder, 2),
                    round(folder / n, 3),
                    round(s3 / n, 3),
                ]
            )
    return "\n".join(
        [
            "## Cost of one append as the rows per commit grow",
            "",
            md_table(
                [
                    "rows per commit",
                    "shape",
                    "local Parquet p50 ms",
                    "Delta folder p50 ms",
                    "Delta S3 p50 ms",
                    "S3 / folder",
                    "folder ms per row",
                    "S3 ms per row",
                ],
                rows,
            ),
            "",
            "Requests to S3 per append (mean, by step; through the test server's proxy):",
            "",
            md_table(
                ["rows per commit", "shape", "requests", "by step"],
                [
                    [
                        n,
                        shape,
                        round(sum(steps.values()), 1),
                        ", ".join(f"{k} {v}" for k, v in steps.items()),
                    ]
                    for n in result["params"]["sizes"]
                    for shape in SHAPES
                    for steps in [result["s3_requests_per_append"].get(f"s3/{n}/{shape}", {})]
                ],
            ),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--commits", dest="mode", action="store_const", const="commits")
    mode.add_argument("--stress", dest="mode", action="store_const", const="stress")
    args = parser.parse_args(argv)
    emit(run(args.quick, args.seed, args.mode or "growth"), args.out)


if __name__ == "__main__":
    main()
