"""Question: how fast does the cold archive take chains, compared with a bare Parquet
write of the same batches, and how fast does a pointer resolve compared with what a
reader without the key index would do (a full ``pyarrow.dataset`` scan with a filter)?

Generates chains deterministically (seeded), appends them in batches the way a batch
intake would (validation, one immutable file per partition, fsync, atomic rename, key
index), writes the same batches with a bare ``pyarrow.parquet.write_table`` as the
baseline, then resolves random pointers both ways.  Emits JSON.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness.results import (
    emit,
    machine,
    md_table,
    md_targets,
    pyplot,
    save_figure,
    target,
)
from benchmarks.harness.timing import summary, timed
from cold_store import ColdStore


def make_row(i: int, rng: random.Random, day: datetime) -> dict[str, Any]:
    topology = [f"tool_{rng.randrange(10_000)}" for _ in range(rng.randint(2, 5))]
    return {
        "chain_id": f"{i:032x}",
        "archive_date": day.date().isoformat(),
        "archived_at": day,
        "reported_at": day,
        "session_id": f"s{i}",
        "topology": topology,
        "tool_types": ["unspecified"] * len(topology),
        "terminal_signature": f"HTTP 413 at step {len(topology)}",
        "failure_kind": "deterministic",
        "classification": "rule 4",
        "error_json": "{}",
        "rule": f"IF {topology[-2]} THEN {topology[-1]} fails",
        "condition_json": '{"when":[],"gapped":false}',
        "gapped": False,
        "tool_snapshots_json": "{}",
        "credentials_json": "{}",
        "logs_json": '["log line"]',
        "occurrences": 1,
        "record_version": 1,
    }


def bare_writes(batches: list[list[dict[str, Any]]], folder: Path) -> list[float]:
    """The baseline: each batch as one Parquet file, no validation, fsync or index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cold_store.schemas import CHAINS

    folder.mkdir(parents=True, exist_ok=True)
    it = iter(enumerate(batches))

    def write() -> None:
        i, rows = next(it)
        pq.write_table(pa.Table.from_pylist(rows, schema=CHAINS), folder / f"b{i}.parquet")

    return timed(write, len(batches))


def measure(chains: int, batch: int, lookups: int, seed: int) -> dict[str, Any]:
    import pyarrow.dataset as ds

    rng = random.Random(seed)
    start_day = datetime(2026, 11, 1, tzinfo=UTC)
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        store = ColdStore(Path(tmp))
        rows = [
            make_row(i, rng, start_day + timedelta(days=i * 30 // chains)) for i in range(chains)
        ]
        batches = [rows[i : i + batch] for i in range(0, chains, batch)]
        batch_iter = iter(batches)
        append_ms = timed(lambda: store.chains.append(next(batch_iter)), len(batches))
        bare_ms = bare_writes(batches, Path(tmp) / "bare")
        keys = [rng.choice(rows)["chain_id"] for _ in range(lookups)]
        key_iter = iter(keys)
        resolve_ms = timed(lambda: store.resolve(f"cold://chains/{next(key_iter)}"), lookups)
        dataset = ds.dataset(Path(tmp) / "chains", format="parquet", partitioning="hive")
        scan_keys = iter(keys[: max(3, lookups // 50)])
        scan_ms = timed(
            lambda: dataset.to_table(filter=ds.field("chain_id") == next(scan_keys)).to_pylist(),
            max(3, lookups // 50),
        )
        files = len(list((Path(tmp) / "chains").rglob("*.parquet")))
        store.close()
    total_s = sum(append_ms) / 1000.0
    bare_s = sum(bare_ms) / 1000.0
    resolve = summary(resolve_ms)
    scan = summary(scan_ms)
    return {
        "benchmark": "store",
        "question": "archive append throughput; pointer resolution vs a full dataset scan",
        "machine": machine(),
        "params": {"chains": chains, "batch": batch, "lookups": lookups, "seed": seed},
        "files": files,
        "append": {"chains_per_s": round(chains / total_s, 1), "per_batch": summary(append_ms)},
        "bare_parquet_write": {
            "chains_per_s": round(chains / bare_s, 1),
            "per_batch": summary(bare_ms),
        },
        "append_vs_bare_write": round(total_s / bare_s, 2),
        "resolve_pointer": resolve,
        "dataset_scan_filter": scan,
        "speedup_vs_scan": round(scan["p50_ms"] / resolve["p50_ms"], 1),
        "speedup_vs_scan_p99": round(scan["p99_ms"] / resolve["p99_ms"], 1),
    }


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    """100k chains in both modes (it takes seconds); quick resolves fewer pointers."""
    started = time.perf_counter()
    result = measure(100_000, 1_000, 300 if quick else 1_000, seed)
    result["targets"] = [
        target(
            "store: pointer resolution p50 vs a full dataset scan at 100k chains",
            "faster than the scan (no target is set for it)",
            result["speedup_vs_scan"],
            result["speedup_vs_scan"] > 1,
        )
    ]
    result["timings_s"] = {"total": round(time.perf_counter() - started, 1)}
    return result


def markdown(result: dict[str, Any]) -> str:
    a, b = result["append"], result["bare_parquet_write"]
    r, s = result["resolve_pointer"], result["dataset_scan_filter"]
    n = result["params"]["chains"]
    return "\n".join(
        [
            "## Cold store",
            "",
            md_table(
                ["operation", "p50 ms", "p99 ms", "throughput", "ratio"],
                [
                    [
                        "append (1,000-chain batches)",
                        a["per_batch"]["p50_ms"],
                        a["per_batch"]["p99_ms"],
                        f"{a['chains_per_s']:,.0f} chains/s",
                        f"{result['append_vs_bare_write']}x the bare write",
                    ],
                    [
                        "bare pyarrow write_table (baseline)",
                        b["per_batch"]["p50_ms"],
                        b["per_batch"]["p99_ms"],
                        f"{b['chains_per_s']:,.0f} chains/s",
                        "1",
                    ],
                    [
                        f"resolve pointer ({n:,} chains, {result['files']} files)",
                        r["p50_ms"],
                        r["p99_ms"],
                        "",
                        f"{result['speedup_vs_scan']}x faster (p50), "
                        f"{result['speedup_vs_scan_p99']}x (p99)",
                    ],
                    ["pyarrow.dataset scan + filter (baseline)", s["p50_ms"], s["p99_ms"], "", "1"],
                ],
            ),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    r, s = result["resolve_pointer"], result["dataset_scan_filter"]
    labels = ["resolve pointer", "dataset scan + filter"]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], [r["p50_ms"], s["p50_ms"]], 0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [r["p99_ms"], s["p99_ms"]], 0.4, label="p99")
    ax.set_xticks(list(xs), labels)
    ax.set_yscale("log")
    ax.set_ylabel("ms per lookup")
    ax.set_title(f"Reading one archived chain of {result['params']['chains']:,}")
    ax.legend()
    return [save_figure(plt, fig, out_dir / "store.png")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--lookups", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(measure(args.chains, args.batch, args.lookups, args.seed), args.out)


if __name__ == "__main__":
    main()
