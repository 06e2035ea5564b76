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
import os
import random
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench_lookup import WORDS
from benchmarks.common import model_embedder, quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.services import (
    clean_env,
    free_port,
    start_chroma,
    start_serve,
    stop_process,
    wait_ready,
)
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.pgserver import PostgresServer

if TYPE_CHECKING:
    from indexes import Embedder
    from sidecar import Sidecar
    from sidecar.model import Tool
    from sidecar.shells.client import RemoteSidecar

TOKEN = "bench-shared-token"
"""Every server of the run takes this bearer token (``SIDECAR_TOKEN``)."""
REPLICAS = (1, 2, 3)
POLL_LIMIT_S = 30.0
"""A replica that has not reflected a write after this long counts as never."""


@dataclass(frozen=True)
class Sizes:
    tools: int
    """Row 1's catalog."""
    constraints: int
    """Row 1's fatal continuations after ``tool_0 > tool_1``."""
    rounds: int
    """Row 1's timed round-robin rounds (each times every operation in both modes)."""
    embedder: str
    """Row 1's embedder: ``onnx`` (the sidecar's default model path) or ``hashing``."""
    sessions_per_client: int
    clients: int
    intake_rounds: int
    breakdown_sessions: int
    """Row 2's in-process breakdown: sessions reported one at a time per backend mix."""
    staleness_trials: int
    move_trials: int
    delta: tuple[int, int, tuple[int, ...], int, int] | None
    """:func:`benchmarks.bench_delta.measure`'s (chains, batch, steps, lookups,
    maintain_every), or ``None`` to leave row 5 out."""


REVISION_CACHE_MS = 250.0
"""``SIDECAR_REVISION_CACHE_MS`` of the cached rows: a replica keeps the revisions it
read for at most this long, less once another replica's write is announced."""

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


# ---- the shared services ---------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """One shared memory: what every replica of it is configured with."""

    database_url: str
    chroma_url: str
    collection: str
    cold_url: str

    def overrides(self) -> dict[str, Any]:
        """Settings for an in-process :class:`~sidecar.Sidecar` on this memory."""
        return {
            "database_url": self.database_url,
            "chroma_url": self.chroma_url,
            "collection": self.collection,
            "cold_url": self.cold_url,
        }

    def env(self) -> dict[str, str]:
        """The same for a ``sidecar serve`` process."""
        return {
            "SIDECAR_DATABASE_URL": self.database_url,
            "SIDECAR_CHROMA_URL": self.chroma_url,
            "SIDECAR_COLLECTION": self.collection,
            "SIDECAR_COLD_URL": self.cold_url,
        }


class Services:
    """PostgreSQL, a Chroma server and an S3 server (moto) for the run, and the S3
    credentials in this process's environment (the Delta backend reads the standard
    variables), restored on exit."""

    def __init__(self, root: Path, s3_proxy: bool = False) -> None:
        """``s3_proxy``: S3 is reached through the server's counting proxy (no faults;
        ``self.s3.direct_endpoint`` reaches the store itself)."""
        self.root = root
        self.s3_proxy = s3_proxy
        self._stack = contextlib.ExitStack()
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> Services:
        try:
            self.postgres = PostgresServer().start()
            self._stack.callback(self.postgres.remove)
            self.chroma_url = self._start_chroma()
            from benchmarks.s3server import FaultSpec, S3Server

            self.s3 = S3Server(FaultSpec() if self.s3_proxy else None)
            self._stack.callback(self.s3.close)
            self.bucket = self.s3.new_bucket()
            opts = self.s3.options()
            self.aws_env = {
                "AWS_ENDPOINT_URL": opts.endpoint_url or "",
                "AWS_ACCESS_KEY_ID": opts.access_key_id or "",
                "AWS_SECRET_ACCESS_KEY": opts.secret_access_key or "",
                "AWS_REGION": opts.region or "",
            }
            for key, value in self.aws_env.items():
                self._saved_env[key] = os.environ.get(key)
                os.environ[key] = value
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._stack.close()

    def _start_chroma(self) -> str:
        proc, url = start_chroma(self.root / "chroma-server", free_port())
        self._stack.callback(stop_process, proc)
        self.chroma_pid = proc.pid
        return url

    def memory(self, cold_folder: bool = False) -> Memory:
        """A fresh memory: a new schema, collection and S3 prefix (or, with
        ``cold_folder``, Delta tables in a local folder every replica here can reach:
        what separates the object store's cost from the database's)."""
        import psycopg

        name = f"m_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.postgres.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return Memory(
            database_url=self.postgres.url(name),
            chroma_url=self.chroma_url,
            collection=name,
            cold_url=(
                f"delta+file://{self.root / 'cold' / name}"
                if cold_folder
                else f"s3://{self.bucket}/{name}"
            ),
        )


def library(home: Path, embedder: Embedder, memory: Memory | None, **extra: Any) -> Sidecar:
    """An in-process sidecar: embedded on ``home`` when ``memory`` is ``None``, else a
    replica of ``memory`` (whatever ``SIDECAR_*`` variables this process has)."""
    from sidecar import Sidecar
    from sidecar.settings import Settings

    shared = memory.overrides() if memory is not None else {}
    return Sidecar(Settings.load(env={}, home=home, **shared, **extra), embedder)


class Replica:
    """One ``sidecar serve`` process (its own home) and a client of it.  ``launcher``:
    what runs the CLI instead of the ``sidecar`` script (a profiler's command line that
    ends where the CLI's arguments begin)."""

    def __init__(
        self,
        home: Path,
        memory: Memory | None,
        extra_env: dict[str, str],
        launcher: Sequence[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = clean_env() | {
            "SIDECAR_HOME": str(home),
            "SIDECAR_EMBEDDER": "hashing",
            "SIDECAR_TOKEN": TOKEN,
            "SIDECAR_REPORT_RATE": "0",
            **(memory.env() if memory is not None else {}),
            **extra_env,
        }
        home.mkdir(parents=True, exist_ok=True)
        self.log = home.parent / f"{home.name}.log"
        with self.log.open("wb") as log:
            self.proc = start_serve(env, log, self.port, launcher)

    def wait_ready(self, timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        wait_ready(self.url, headers, self.proc, timeout, self.log)

    def client(self) -> RemoteSidecar:
        from sidecar.shells.client import RemoteSidecar

        return RemoteSidecar(self.url, TOKEN, timeout=120)

    def stop(self) -> None:
        stop_process(self.proc)


@contextlib.contextmanager
def replicas(
    root: Path,
    count: int,
    memory: Memory | None,
    extra_env: dict[str, str] | None = None,
    launcher: Sequence[str] | None = None,
) -> Iterator[list[Replica]]:
    """``count`` servers started together, each on a home of its own under ``root``."""
    started = [
        Replica(root / f"replica-{uuid.uuid4().hex[:6]}", memory, extra_env or {}, launcher)
        for _ in range(count)
    ]
    try:
        for r in started:
            r.wait_ready()
        yield started
    finally:
        for r in started:
            r.stop()


# ---- data ------------------------------------------------------------------------------
def catalog(n: int, rng: random.Random) -> list[Tool]:
    from sidecar import Tool

    tools = [Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12))) for i in range(n)]
    return [*tools, Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]


def lookup_step(order: str) -> dict[str, Any]:
    return {
        "tool": "get_order",
        "arguments": {"order_id": order},
        "output": {"order_id": order, "status": "pending"},
        "error": None,
    }


def session(n: int, tool: str = "exchange_items") -> dict[str, Any]:
    """A session whose last call fails with a business rule (learned, and archived)."""
    order = f"#S{n}"
    failing = {
        "tool": tool,
        "arguments": {"order_id": order},
        "output": None,
        "error": "Error: Non-delivered order cannot be exchanged",
    }
    return {
        "steps": [lookup_step(order), failing],
        "outcome": "abandoned",
        "session_id": f"bench-{uuid.uuid4().hex}",
    }


def fatal_chain(topology: list[str], i: int) -> dict[str, Any]:
    return {
        "topology": topology,
        "outcome": "abandoned",
        "failure": {"signature": f"HTTP 413 #{i}", "kind": "deterministic"},
        "constraint": {"rule": f"rule {i}"},
    }


# ---- 1. lookup and check -----------------------------------------------------------------
def lookup_and_check(services: Services, root: Path, sizes: Sizes, seed: int) -> dict[str, Any]:
    from indexes import HashingEmbedder

    rng = random.Random(seed)
    embedder = model_embedder("onnx") if sizes.embedder == "onnx" else HashingEmbedder()
    tools = catalog(sizes.tools, rng)
    chains = [
        fatal_chain(["tool_0", "tool_1", f"tool_{2 + i}"], i) for i in range(sizes.constraints)
    ]
    # three sessions teach a condition that makes check_call warn on a new order: the
    # check reads the learned memory, as a block would
    learned = [session(n) for n in range(3)]
    queries = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(sizes.rounds + 10)]
    modes = {
        "embedded": None,
        "shared": services.memory(),
        "shared_cached": services.memory(),
        "shared_leased": services.memory(),
    }
    # read every request; the revision cache (no lease); the revision lease (the default)
    extras: dict[str, dict[str, float]] = {
        "embedded": {},
        "shared": {"revision_lease_ms": 0.0},
        "shared_cached": {"revision_lease_ms": 0.0, "revision_cache_ms": REVISION_CACHE_MS},
        "shared_leased": {},
    }
    build_s: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        sidecars: dict[str, Sidecar] = {}
        for mode, memory in modes.items():
            progress(f"shared: row 1, building the {mode} catalog ({len(tools):,} tools)")
            sc = stack.enter_context(
                library(root / f"lookup-{mode}", embedder, memory, **extras[mode])
            )
            started = time.perf_counter()
            sc.add_tools(tools)
            sc.report_many(chains)
            for s in learned:
                sc.report(s)
            build_s[mode] = round(time.perf_counter() - started, 1)
            sidecars[mode] = sc
        checks: dict[str, Any] = {}
        fns: dict[str, Callable[[], Any]] = {}
        for mode, sc in sidecars.items():
            # the answers must be the same, or the timings compare different work
            checks[mode] = {
                "check_safe": sc.check(["tool_0", "tool_1", "tool_2"]).safe,
                "check_call": sc.check_call(
                    [lookup_step("#Q")], "exchange_items", {"order_id": "#Q"}
                ).decision,
                "search_hits": len(sc.search(queries[0], k=5, after=["tool_0", "tool_1"]).hits),
            }
            it = iter(queries)
            counter = iter(range(10**9))
            fns[f"{mode}:search"] = lambda s=sc, i=it: s.search(
                next(i), k=5, after=["tool_0", "tool_1"]
            )
            fns[f"{mode}:check"] = lambda s=sc, c=counter: s.check(
                ["tool_0", "tool_1", f"tool_{2 + next(c) % sizes.constraints}"]
            )
            fns[f"{mode}:check_call"] = lambda s=sc, c=counter: _check_call(s, f"#C{next(c)}")
        progress(f"shared: row 1, {sizes.rounds} rounds of search, check and check_call")
        samples = interleaved(fns, sizes.rounds, warmup=5)
    ops = ("search", "check", "check_call")
    stats = {key: summary(values) for key, values in samples.items()}
    return {
        "embedder": embedder.name if hasattr(embedder, "name") else sizes.embedder,
        "tools": len(tools),
        "constraints": sizes.constraints,
        "build_s": build_s,
        "answers": checks,
        "same_answers": all(answers == checks["embedded"] for answers in checks.values()),
        "revision_cache_ms": REVISION_CACHE_MS,
        "ops": {
            op: {
                "embedded": stats[f"embedded:{op}"],
                "shared": stats[f"shared:{op}"],
                "p50_ratio": ratio(
                    stats[f"shared:{op}"]["p50_ms"], stats[f"embedded:{op}"]["p50_ms"], 2
                ),
                "p99_ratio": ratio(
                    stats[f"shared:{op}"]["p99_ms"], stats[f"embedded:{op}"]["p99_ms"], 2
                ),
                "shared_cached": stats[f"shared_cached:{op}"],
                "cached_p50_ratio": ratio(
                    stats[f"shared_cached:{op}"]["p50_ms"], stats[f"embedded:{op}"]["p50_ms"], 2
                ),
                "shared_leased": stats[f"shared_leased:{op}"],
                "leased_p50_ratio": ratio(
                    stats[f"shared_leased:{op}"]["p50_ms"], stats[f"embedded:{op}"]["p50_ms"], 2
                ),
            }
            for op in ops
        },
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


# ---- 3. cross-replica staleness -------------------------------------------------------------
def _wait_until(ask: Callable[[], bool], since: float) -> dict[str, Any]:
    """Ask until the answer reflects the write: ms from ``since`` to the end of the first
    reflecting answer, and how many answers did not."""
    stale = 0
    while True:
        reflected = ask()
        now = time.perf_counter()
        if reflected:
            return {"ms": (now - since) * 1000.0, "stale_answers": stale}
        stale += 1
        if now - since > POLL_LIMIT_S:
            return {"ms": float("inf"), "stale_answers": stale}


def staleness(services: Services, root: Path, sizes: Sizes) -> dict[str, Any]:
    from sidecar import Tool

    n = sizes.staleness_trials
    tools = [
        Tool(name, f"{name} {' '.join(random.Random(name).choice(WORDS) for _ in range(8))}")
        for i in range(n)
        for name in (f"evict_{i}", f"next_{i}", f"pay_{i}")
    ]
    descriptions = {t.tool_id: t.description for t in tools}
    out: dict[str, Any] = {"trials": n}
    # read every request, the revision cache, the revision lease (the default)
    for key, cache_ms, lease in (
        ("uncached", 0.0, False),
        ("cached", REVISION_CACHE_MS, False),
        ("leased", 0.0, True),
    ):
        out[key] = _staleness(services, root / key, tools, descriptions, n, cache_ms, lease)
    # the uncached figures stay at the top level, as the markdown and targets read them
    out.update(out["uncached"])
    return out


def _staleness(
    services: Services,
    root: Path,
    tools: list[Any],
    descriptions: dict[str, str],
    n: int,
    cache_ms: float,
    lease: bool = False,
) -> dict[str, Any]:
    from sidecar import Tool

    memory = services.memory()
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {
        "evict": {"other": [], "same": []},
        "report": {"other": [], "same": []},
    }
    how = "revision lease" if lease else f"revision cache {cache_ms:g} ms"
    progress(f"shared: row 3 ({how}), {n} evictions and {n} reports, watched from both replicas")
    env = {"SIDECAR_EVICT_MIN_CHAINS": "1", "SIDECAR_REVISION_CACHE_MS": str(cache_ms)}
    if not lease:
        env["SIDECAR_REVISION_LEASE_MS"] = "0"
    with replicas(root, 2, memory, env) as (one, two):
        a, b = one.client(), two.client()
        try:
            a.add_tools([*tools, Tool("get_order", "look up an order")])
            for i in range(n):
                # alternate which replica watches: the writer itself (the floor) or the other
                watcher, where = (b, "other") if i % 2 == 0 else (a, "same")
                tool = f"evict_{i}"
                query = descriptions[tool]
                assert tool in {h.tool_id for h in watcher.search(query, k=10).hits}
                a.report(fatal_chain([tool, f"next_{i}"], i))
                evicted = a.evict(min_chains=1)
                since = time.perf_counter()
                assert tool in {d.tool_id for d in evicted.evicted}, evicted
                samples["evict"][where].append(
                    _wait_until(
                        lambda w=watcher, q=query, t=tool: (
                            t not in {h.tool_id for h in w.search(q, k=10).hits}
                        ),
                        since,
                    )
                )
            for i in range(n):
                watcher, where = (b, "other") if i % 2 == 0 else (a, "same")
                tool = f"pay_{i}"

                def decision(w: RemoteSidecar = watcher, t: str = tool) -> str:
                    return w.check_call([lookup_step("#W")], t, {"order_id": "#W"}).decision

                # one failing session is not yet a warning; the watched report is the
                # second, the one that makes the call warn
                a.report(session(20_000 + i, tool))
                assert decision() == "allow"
                a.report(session(10_000 + i, tool))
                since = time.perf_counter()
                samples["report"][where].append(
                    _wait_until(lambda d=decision: d() != "allow", since)
                )
        finally:
            a.close()
            b.close()
    out: dict[str, Any] = {"revision_cache_ms": cache_ms, "revision_lease": lease}
    for kind, by_watcher in samples.items():
        out[kind] = {}
        for where, trials in by_watcher.items():
            ms = [t["ms"] for t in trials]
            finite = [m for m in ms if m != float("inf")]
            out[kind][where] = {
                **summary(finite or [0.0]),
                "max_ms": round(max(ms), 2) if ms else 0.0,
                "never": len(ms) - len(finite),
                "stale_answers": sum(t["stale_answers"] for t in trials),
                "n": len(ms),
            }
    return out


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


def markdown(result: dict[str, Any]) -> str:
    look = result["lookup"]
    lookup_rows = [
        [
            op,
            v["embedded"]["p50_ms"],
            v["embedded"]["p99_ms"],
            v["shared"]["p50_ms"],
            v["shared"]["p99_ms"],
            v["p50_ratio"],
            v["p99_ratio"],
            v["shared_cached"]["p50_ms"],
            v["shared_cached"]["p99_ms"],
            v["cached_p50_ratio"],
            v["shared_leased"]["p50_ms"],
            v["shared_leased"]["p99_ms"],
            v["leased_p50_ratio"],
        ]
        for op, v in look["ops"].items()
    ]
    intake_rows = [
        [
            "embedded" if label == "embedded" else f"shared, {run['replicas']}",
            run["cold"],
            run["sessions"],
            run["wall_s"],
            run["sessions_per_s"],
            run["vs_one_shared_replica"],
            ", ".join(f"{k} {v}" for k, v in run["statuses"].items()),
            len(run["errors"]),
        ]
        for label, run in result["intake"]["runs"].items()
    ]
    stale_rows = [
        [
            label,
            {"evict": "tool evicted on A", "report": "failure reported on A"}[kind],
            {"other": "B (the other replica)", "same": "A itself (floor)"}[where],
            s["n"],
            s["p50_ms"],
            s["p99_ms"],
            s["max_ms"],
            s["stale_answers"],
            s["never"],
        ]
        for label, stale in (
            ("every request", result["staleness"].get("uncached", result["staleness"])),
            ("cached", result["staleness"].get("cached")),
            ("leased", result["staleness"].get("leased")),
        )
        if stale is not None
        for kind in ("evict", "report")
        for where, s in stale[kind].items()
    ]
    move = result["move"]
    lines = [
        f"Shared cold store: {result['shared_cold']}.",
        "",
        f"## 1. Lookup and check ({look['tools']:,} tools, {look['constraints']:,} fatal "
        f"continuations, embedder {look['embedder']}; same answers in both modes: "
        f"{look['same_answers']})",
        "",
        md_table(
            [
                "op",
                "embedded p50 ms",
                "p99",
                "shared p50 ms",
                "p99",
                "p50 ratio",
                "p99 ratio",
                f"cached ({look['revision_cache_ms']:g} ms) p50 ms",
                "p99",
                "p50 ratio",
                "leased p50 ms",
                "p99",
                "p50 ratio",
            ],
            lookup_rows,
        ),
        "",
        f"## 2. Intake ({result['intake']['clients']} clients in parallel, "
        f"{result['intake']['sessions_per_client']} sessions each, one per request, "
        f"{result['intake']['rounds']} round(s))",
        "",
        md_table(
            [
                "servers",
                "cold",
                "sessions",
                "wall s",
                "sessions/s",
                "vs 1 shared (S3)",
                "statuses",
                "errors",
            ],
            intake_rows,
        ),
        "",
        "One session reported at a time in this process, one backend changed at a time "
        "(one round robin):",
        "",
        md_table(
            ["backends", "n", "report p50 ms", "p99 ms", "p50 vs embedded"],
            [
                [b["backends"], b["n"], b["p50_ms"], b["p99_ms"], b["p50_vs_embedded"]]
                for b in result["intake_breakdown"].values()
            ],
        ),
        "",
        f"## 3. Staleness ({result['staleness']['trials']} trials of each write, watchers "
        "alternating; the revisions read on every request, cached, or leased)",
        "",
        md_table(
            [
                "revisions",
                "write",
                "watched on",
                "n",
                "p50 ms",
                "p99 ms",
                "max ms",
                "stale answers",
                "never",
            ],
            stale_rows,
        ),
        "",
        f"## 4. One-tool move ({move['trials']} each)",
        "",
        md_table(
            ["mode", "p50 ms", "p99 ms"],
            [[m, move[m]["p50_ms"], move[m]["p99_ms"]] for m in ("embedded", "shared")],
        ),
        "",
        f"Shared / embedded p50: {move['p50_ratio']}x.",
        "",
    ]
    if result.get("delta"):
        from benchmarks.bench_delta import markdown as delta_markdown

        lines += ["## 5. Delta append and compaction (benchmarks/bench_delta.py)", ""]
        # bench_delta's page without its heading and its (here empty) target table
        page = delta_markdown(result["delta"]).replace("## Delta cold store\n", "")
        lines += [page.split("| target |")[0].rstrip(), ""]
    lines += [md_targets(result["targets"]), ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    runs = result["intake"]["runs"]
    xs = list(REPLICAS)
    left.plot(xs, [runs[str(n)]["sessions_per_s"] for n in xs], "o-", label="shared replicas")
    left.axhline(runs["embedded"]["sessions_per_s"], linestyle="--", label="one embedded server")
    left.set_xticks(xs)
    left.set_xlabel("replica processes")
    left.set_ylabel("sessions / s (all clients)")
    left.set_title("intake throughput")
    left.legend()
    ops = list(result["lookup"]["ops"])
    width = 0.38
    for shift, mode in ((-width / 2, "embedded"), (width / 2, "shared")):
        right.bar(
            [i + shift for i in range(len(ops))],
            [result["lookup"]["ops"][op][mode]["p50_ms"] for op in ops],
            width,
            label=mode,
        )
    right.set_xticks(range(len(ops)))
    right.set_xticklabels(ops)
    right.set_ylabel("p50 ms")
    right.set_title("lookup and check")
    right.legend()
    return [save_figure(plt, fig, out_dir / "shared.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
