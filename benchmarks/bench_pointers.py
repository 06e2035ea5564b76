"""Question: where does resolving a pointer on S3 spend its time, against the local
Parquet table, and what does the Delta table's row-group size change?

One run: the same ``chains`` chain records (section 12's rows) appended in batches of
500 to the local Parquet table and to Delta tables on the moto S3 server (one per
row-group size asked for), each Delta table compacted and checkpointed every 10
appends, as section 12's maintained table is.  Then ``lookups`` random keys are
resolved on every store in a round robin (warm: footers and keys known, as after the
first lookup), each S3 lookup split into its one ranged GET (time and bytes) and the
decoding of its row group.

``python -m benchmarks.bench_pointers [--chains N] [--row-groups 1024,128]
[--lookups N] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine
from benchmarks.harness.timing import ratio, summary


@contextlib.contextmanager
def _timing(
    owner: Any, name: str, into: list[float], sizes: list[int] | None = None
) -> Iterator[None]:
    """Time every call of ``owner.name`` (and, with ``sizes``, the bytes of the spans
    a fetch asks for) while the block runs."""
    original = owner.__dict__[name]

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into.append((time.perf_counter() - started) * 1000.0)
            if sizes is not None:
                sizes.append(sum(end - start for start, end in args[2]))

    setattr(owner, name, timed)
    try:
        yield
    finally:
        setattr(owner, name, original)


def measure(chains: int, row_groups: list[int], lookups: int, seed: int = 7) -> dict[str, Any]:

    from benchmarks.bench_store import make_row
    from benchmarks.s3server import S3Server
    from cold_store import ColdStore

    rng = random.Random(seed)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [make_row(i, rng, day + timedelta(days=i * 30 // chains)) for i in range(chains)]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-pointers-") as tmp, contextlib.ExitStack() as st:
        server = S3Server()
        st.callback(server.close)
        stores = {"parquet": ColdStore(str(Path(tmp) / "parquet"))}
        for size in row_groups:
            store = ColdStore(f"s3://{server.new_bucket()}/rg{size}", s3=server.options())
            for table in (store.chains, store.tools):
                table.row_group_size = size  # type: ignore[attr-defined]
                table._appender.row_group_size = size  # type: ignore[attr-defined]
            stores[f"s3, {size}-row groups"] = store
        for store in stores.values():
            st.callback(store.close)
        progress(f"pointers: {chains:,} chains into {len(stores)} stores")
        for n, start in enumerate(range(0, chains, 500)):
            for name, store in stores.items():
                store.chains.append(rows[start : start + 500], batch=f"b{n}")
                if name != "parquet" and (n + 1) % 10 == 0:
                    store.compact()
                    store.checkpoint()
        keys = [rng.choice(rows)["chain_id"] for _ in range(lookups + 20)]
        for key in keys[:20]:  # warm: every file's footer known
            for store in stores.values():
                store.resolve(f"cold://chains/{key}")
        progress(f"pointers: {lookups} lookups on each store")
        samples = _resolve_all(stores, keys[20:])
    base = summary(samples["parquet"]["total"])["p50_ms"]
    out = {
        name: {
            "resolve": summary(s["total"]),
            "vs_parquet_p50": ratio(summary(s["total"])["p50_ms"], base, 2),
            "fetch_p50_ms": summary(s["fetch"])["p50_ms"] if s["fetch"] else 0.0,
            "fetch_bytes_p50": summary(s["bytes"])["p50_ms"] if s["bytes"] else 0.0,
            "decode_p50_ms": summary(s["decode"])["p50_ms"] if s["decode"] else 0.0,
        }
        for name, s in samples.items()
    }
    return {
        "benchmark": "pointers",
        "machine": machine(),
        "params": {"chains": chains, "row_groups": row_groups, "lookups": lookups, "seed": seed},
        "stores": out,
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _resolve_all(stores: dict[str, Any], keys: list[str]) -> dict[str, dict[str, list[float]]]:
    """Each key resolved in every store, the stores taking turns to go first: the whole
    resolution, its fetches (and their bytes) and its row-group decoding, in ms."""
    import pyarrow.parquet as pq

    from cold_store.delta.files import DataFiles

    samples: dict[str, dict[str, list[float]]] = {
        name: {"total": [], "fetch": [], "bytes": [], "decode": []} for name in stores
    }
    names = list(stores)
    for i, key in enumerate(keys):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            got = samples[name]
            sizes: list[int] = []
            with (
                _timing(DataFiles, "_fetch", got["fetch"], sizes),
                _timing(pq.ParquetFile, "read_row_group", got["decode"]),
            ):
                t0 = time.perf_counter()
                stores[name].resolve(f"cold://chains/{key}")
                got["total"].append((time.perf_counter() - t0) * 1000.0)
            got["bytes"] += [float(s) for s in sizes]
    return samples


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chains", type=int, default=20_000)
    parser.add_argument("--row-groups", default="1024,128")
    parser.add_argument("--lookups", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.row_groups.split(",")]
    emit(measure(args.chains, sizes, args.lookups, args.seed), args.out)


if __name__ == "__main__":
    main()
