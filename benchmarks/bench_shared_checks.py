"""Section 14's first row alone (``bench_shared.lookup_and_check``): ``search``, ``check``
and ``check_call`` timed in one round robin on an embedded sidecar, a shared one (the
revisions read on every request) and a shared one with the revision cache, all in this
process, with their p50 ratios against the embedded one.

``python -m benchmarks.bench_shared_checks [--full] [--rounds N] [--out FILE]``: quick
sizes by default (1,002 tools, 200 fatal continuations, 200 rounds; a few minutes); it
starts the same services as ``bench_shared`` (PostgreSQL, ``chroma run``, moto S3)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmarks import bench_shared, common
from benchmarks.bench_shared import FULL, QUICK, Services, lookup_and_check


def run(
    full: bool = False, rounds: int | None = None, seed: int = 7, grouped: bool = False
) -> dict[str, Any]:
    """``grouped``: the round robin calls the three searches, then the three checks, then
    the three check_calls (``bench_shared`` calls each mode's search, check and check_call
    in turn, so a shared check always follows a search on the Chroma server)."""
    sizes = FULL if full else QUICK
    if rounds is not None:
        sizes = dataclasses.replace(sizes, rounds=rounds)
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if grouped:
            stack.enter_context(_grouped_round_robin())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-checks-"))
        services = stack.enter_context(Services(Path(tmp)))
        row = lookup_and_check(services, Path(tmp), sizes, seed)
    row["took_s"] = round(time.perf_counter() - started, 1)
    return {
        "benchmark": "shared_checks",
        "sizes": dataclasses.asdict(sizes),
        "order": "grouped by operation" if grouped else "bench_shared's",
        "lookup": row,
    }


@contextlib.contextmanager
def _grouped_round_robin() -> Iterator[None]:
    plain = common.interleaved  # what bench_shared imported

    def grouped(fns: Mapping[str, Callable[[], Any]], repeat: int, warmup: int = 3) -> Any:
        ops = ("search", "check", "check_call")
        order = sorted(fns, key=lambda name: ops.index(name.split(":")[1]))
        return plain({name: fns[name] for name in order}, repeat, warmup)

    vars(bench_shared)["interleaved"] = grouped
    try:
        yield
    finally:
        vars(bench_shared)["interleaved"] = plain


def table(result: dict[str, Any]) -> str:
    lines = [
        "| op | embedded p50 / p99 | shared p50 / p99 | p50 ratio | cached p50 / p99 | p50 ratio |",
        "|---|---|---|---|---|---|",
    ]
    for op, r in result["lookup"]["ops"].items():
        e, s, c = r["embedded"], r["shared"], r["shared_cached"]
        lines.append(
            f"| {op} | {e['p50_ms']} / {e['p99_ms']} | {s['p50_ms']} / {s['p99_ms']} | "
            f"{r['p50_ratio']} | {c['p50_ms']} / {c['p99_ms']} | {r['cached_p50_ratio']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="the full sizes (10,002 tools)")
    parser.add_argument("--rounds", type=int, help="rounds of the round robin")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--grouped", action="store_true", help="searches, then checks, then check_calls"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = run(args.full, args.rounds, args.seed, args.grouped)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
