"""Section 14's first row alone (``bench_shared.lookup_and_check``): ``search``, ``check``
and ``check_call`` timed in one round robin on an embedded sidecar, a shared one (the
revisions read on every request), a shared one with the revision cache and one with the
revision lease (the default), all in this process, with their p50 ratios against the
embedded one.

``python -m benchmarks.bench_shared_checks [--full] [--rounds N] [--grouped] [--out
FILE]``: quick sizes by default (1,002 tools, 200 fatal continuations, 200 rounds; about
a minute); it starts the same services as ``bench_shared`` (PostgreSQL, ``chroma run``,
moto S3).  ``--grouped`` orders the round robin by operation (see :func:`run`);
``--profile`` times the parts of a shared check instead (see :func:`profile`);
``--writes`` what the revision lease costs a write (see :func:`writes`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import bench_shared
from benchmarks.bench_shared import FULL, QUICK, lookup_and_check
from benchmarks.harness import results, timing
from benchmarks.shared_services import Services

if TYPE_CHECKING:
    from sidecar import Sidecar as Sidecar


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
    plain = timing.interleaved  # what bench_shared imported

    def grouped(fns: Mapping[str, Callable[[], Any]], repeat: int, warmup: int = 3) -> Any:
        ops = ("search", "check", "check_call")
        order = sorted(fns, key=lambda name: ops.index(name.split(":")[1]))
        return plain({name: fns[name] for name in order}, repeat, warmup)

    vars(bench_shared)["interleaved"] = grouped
    try:
        yield
    finally:
        vars(bench_shared)["interleaved"] = plain


def profile(rounds: int = 2_000, seed: int = 7) -> dict[str, Any]:
    """Where a shared check's time goes, in one round robin in this process (PostgreSQL
    only: the hashing embedder, the hot index embedded, 1,002 tools, 200 fatal
    continuations): the revisions' read alone, on the path a check took before (a
    cursor, eight parameters) and the one it takes now (prepared, through libpq), beside
    a prepared ``SELECT 1`` (the round trip's floor); a check embedded, shared with the
    read first and the check after it, and shared as it runs now (overlapped)."""
    from benchmarks.pgserver import PostgresServer
    from sidecar.storage.backends.postgres import PostgresDatabase

    server = PostgresServer().start()
    with contextlib.ExitStack() as stack:
        stack.callback(server.remove)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-checks-")))
        url = stack.enter_context(server.schema())
        embedded, shared, serial = _profiled_sidecars(stack, tmp, url, seed)
        db = shared.state.database
        assert isinstance(db, PostgresDatabase)
        conn = db._get()
        conn.execute("PREPARE bench_floor AS SELECT 1")
        stack.callback(db._put, conn)
        fns = _profiled_calls(db, conn, embedded, shared, serial)
        samples = timing.interleaved(fns, rounds, warmup=20)
    return {
        "benchmark": "shared_checks_profile",
        "rounds": rounds,
        "machine": results.machine(),
        "us": {
            name: {
                "p50": round(timing.summary(values)["p50_ms"] * 1000, 1),
                "p99": round(timing.summary(values)["p99_ms"] * 1000, 1),
            }
            for name, values in samples.items()
        },
    }


LEASE_HOLDER = """
import sys, time
from sidecar.storage.backends.postgres import PostgresDatabase
db = PostgresDatabase(sys.argv[1], revision_lease_s=float(sys.argv[2]))
while db.change_token() is None:
    time.sleep(0.01)
print("leased", flush=True)
sys.stdin.read()
db.close()
"""
BUMP = (
    "INSERT INTO meta VALUES ('constraints_rev', '1') ON CONFLICT (key) "
    "DO UPDATE SET value = CAST(meta.value AS INTEGER) + 1"
)


def _profiled_sidecars(
    stack: contextlib.ExitStack, tmp: Path, url: str, seed: int
) -> tuple[Sidecar, Sidecar, Sidecar]:
    """One embedded sidecar and two replicas of one memory on PostgreSQL, without the
    revision lease (every shared check reads: what is profiled); the second replica's
    checks read first and work after."""
    import random

    from benchmarks.shared_services import library
    from benchmarks.shared_workload import catalog, fatal_chain, session
    from indexes import HashingEmbedder
    from sidecar import Sidecar

    tools = catalog(1_000, random.Random(seed))
    chains = [fatal_chain(["tool_0", "tool_1", f"tool_{2 + i}"], i) for i in range(200)]
    embedded = stack.enter_context(library(tmp / "e", HashingEmbedder(), None))
    shared = stack.enter_context(
        Sidecar.open(
            embedder=HashingEmbedder(), home=tmp / "s", database_url=url, revision_lease_ms=0
        )
    )
    for sc in (embedded, shared):
        sc.add_tools(tools)
        sc.report_many(chains)
        sc.report_many([session(n) for n in range(3)])
    serial = stack.enter_context(
        Sidecar.open(
            embedder=HashingEmbedder(), home=tmp / "r", database_url=url, revision_lease_ms=0
        )
    )
    vars(serial.state.database)["overlaps_reads"] = False
    return embedded, shared, serial


def _profiled_calls(
    db: Any, conn: Any, embedded: Sidecar, shared: Sidecar, serial: Sidecar
) -> dict[str, Callable[[], Any]]:
    from benchmarks.shared_workload import lookup_step
    from sidecar.storage.revisions import COUNTERS

    old_read = f"SELECT key, value FROM meta WHERE key IN ({','.join('?' * len(COUNTERS))})"
    n = iter(range(10**9))

    def plan() -> tuple[str, ...]:
        return ("tool_0", "tool_1", f"tool_{2 + next(n) % 200}")

    def floor() -> None:
        conn.pgconn.send_query_prepared(b"bench_floor", [])
        while conn.pgconn.get_result() is not None:
            pass

    def call(sc: Sidecar) -> Callable[[], Any]:
        def one() -> Any:
            order = f"#C{next(n)}"
            return sc.check_call([lookup_step(order)], "exchange_items", {"order_id": order})

        return one

    return {
        "read, the path before (a cursor, 8 parameters)": lambda: db.execute(
            old_read, COUNTERS
        ).fetchall(),
        "read, the path now (prepared, through libpq)": shared.state.revisions._read,
        "floor: a prepared SELECT 1 through libpq": floor,
        "check, embedded": lambda: embedded.check(plan()),
        "check, shared: read, then check": lambda: serial.check(plan()),
        "check, shared: overlapped (now)": lambda: shared.check(plan()),
        "check_call, embedded": call(embedded),
        "check_call, shared: read, then check": call(serial),
        "check_call, shared: overlapped (now)": call(shared),
    }


def writes(rounds: int = 500, lease_ms: float = 2000.0) -> dict[str, Any]:
    """What the revision lease costs a write: one small write transaction (a revision
    bumped) timed in one round robin on three states of one PostgreSQL server, with 0,
    1 and 2 other processes holding a lease on it.  Each write returns only once every
    leased process has heard of it."""
    import subprocess
    import sys

    from benchmarks.pgserver import PostgresServer
    from sidecar.storage.backends.postgres import PostgresDatabase
    from sidecar.storage.state import SCHEMAS

    server = PostgresServer().start()
    with contextlib.ExitStack() as stack:
        stack.callback(server.remove)
        fns: dict[str, Callable[[], Any]] = {}
        for holders in (0, 1, 2):
            url = stack.enter_context(server.schema())
            db = PostgresDatabase(url, revision_lease_s=0.0)
            stack.callback(db.close)
            for ddl in SCHEMAS:
                db.ensure(ddl)
            for _ in range(holders):
                proc = subprocess.Popen(
                    [sys.executable, "-c", LEASE_HOLDER, url, str(lease_ms / 1000)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                stack.callback(proc.communicate, "", 30)
                assert proc.stdout is not None and proc.stdout.readline().strip() == "leased"

            def write(d: PostgresDatabase = db) -> None:
                with d.tx() as tx:
                    tx.execute(BUMP)

            fns[f"{holders} leased"] = write
        samples = timing.interleaved(fns, rounds, warmup=20)
    stats = {name: timing.summary(values) for name, values in samples.items()}
    base = stats["0 leased"]["p50_ms"]
    return {
        "benchmark": "shared_checks_writes",
        "rounds": rounds,
        "lease_ms": lease_ms,
        "machine": results.machine(),
        "ms": {
            name: {
                "p50": s["p50_ms"],
                "p99": s["p99_ms"],
                "p50_vs_none": round(s["p50_ms"] / base, 2),
            }
            for name, s in stats.items()
        },
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| op | embedded p50 / p99 | shared p50 / p99 | p50 ratio | cached p50 / p99 | p50 ratio "
        "| leased p50 / p99 | p50 ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op, r in result["lookup"]["ops"].items():
        e, s, c, le = r["embedded"], r["shared"], r["shared_cached"], r["shared_leased"]
        lines.append(
            f"| {op} | {e['p50_ms']} / {e['p99_ms']} | {s['p50_ms']} / {s['p99_ms']} | "
            f"{r['p50_ratio']} | {c['p50_ms']} / {c['p99_ms']} | {r['cached_p50_ratio']} | "
            f"{le['p50_ms']} / {le['p99_ms']} | {r['leased_p50_ratio']} |"
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
    parser.add_argument(
        "--profile", action="store_true", help="where a shared check's time goes (PostgreSQL)"
    )
    parser.add_argument(
        "--writes", action="store_true", help="what the revision lease costs a write"
    )
    args = parser.parse_args(argv)
    if args.writes:
        found = writes(args.rounds or 500)
        for name, ms in found["ms"].items():
            print(f"| {name} | {ms['p50']} | {ms['p99']} | {ms['p50_vs_none']} |")
        if args.out is not None:
            args.out.write_text(json.dumps(found, indent=2) + "\n")
        return
    if args.profile:
        found = profile(args.rounds or 2_000, args.seed)
        for name, us in found["us"].items():
            print(f"| {name} | {us['p50']} | {us['p99']} |")
        if args.out is not None:
            args.out.write_text(json.dumps(found, indent=2) + "\n")
        return
    result = run(args.full, args.rounds, args.seed, args.grouped)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
