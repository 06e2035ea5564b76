"""Question: how fast does the cold archive take chains, and how fast does a pointer
resolve compared with what a reader without the key index would do (a full
``pyarrow.dataset`` scan with a filter)?

Generates chains deterministically (seeded), appends them in batches the way a batch
intake would, then resolves random pointers both ways.  Emits JSON.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import emit, machine, summary, timed
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


def run(chains: int, batch: int, lookups: int, seed: int) -> dict[str, Any]:
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
    resolve = summary(resolve_ms)
    scan = summary(scan_ms)
    return {
        "benchmark": "store",
        "question": "archive append throughput; pointer resolution vs a full dataset scan",
        "machine": machine(),
        "params": {"chains": chains, "batch": batch, "lookups": lookups, "seed": seed},
        "files": files,
        "append": {"chains_per_s": round(chains / total_s, 1), "per_batch": summary(append_ms)},
        "resolve_pointer": resolve,
        "dataset_scan_filter": scan,
        "speedup_vs_scan": round(scan["p50_ms"] / resolve["p50_ms"], 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--lookups", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.chains, args.batch, args.lookups, args.seed), args.out)


if __name__ == "__main__":
    main()
