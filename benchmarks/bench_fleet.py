"""Question: how many agents can one embedded sidecar, and 1, 2 or 3 shared replicas
(PostgreSQL, a Chroma server, Delta on S3), serve before they saturate, and what
saturates first?

A *fleet simulation*: ``agents`` simulated agents (threads, each with its own HTTP
client, spread over the replicas round robin), each finishing one session every
``period_s`` seconds.  A session is :func:`benchmarks.bench_shared.session`'s synthetic
retail-like one (an order looked up, then an exchange that fails with a business rule:
learned and archived); the agent asks ``check_call`` before each of its calls, then
reports the session (one request).  Session starts are scheduled (agent ``i`` of ``n``
at ``(i / n + k) * period_s`` into the step); an agent whose session ends late starts
its next one at once, never two at a time, so a server that cannot keep up shows as
achieved sessions/s below the offered ``agents / period_s``.

Per configuration (one embedded ``sidecar serve`` on SQLite, embedded Chroma and the
local Parquet archive; then 1, 2 and 3 ``sidecar serve`` replicas on one shared memory)
the offered load steps up (``agents``) for ``step_s`` each, until a step *saturates*:
achieved below :data:`SATURATED_BELOW` of offered, a p95 over its bound
(:data:`P95_BOUND_MS`), or an error.  Each step reports offered and achieved sessions/s
and checks/s, p50 / p95 of ``check_call`` and of the report, errors, the CPU each
process group used (``benchmarks/fleet_probes.py``) and, shared, how often the state's
write lock was held and waited for, and how many acknowledged records waited for the
group publisher.  Then, on the same servers, a closed loop (``closed_clients`` clients,
one session per request, as fast as they are answered, for ``closed_s``): the intake
figure of issue 30's target (3 replicas >= 0.5x embedded, 3 replicas >= 1 replica).

At the end of each configuration, nothing acknowledged may be lost: once nothing waits
for the publisher, the archive's count (``/v1/archive/status``) must equal the
sessions answered ``archived``.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.fleet_probes import CpuProbe, LockProbe
from benchmarks.fleet_report import markdown, plot
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, target
from benchmarks.harness.timing import ratio
from benchmarks.shared_services import Memory, Replica, Services, replicas
from benchmarks.shared_workload import session

if TYPE_CHECKING:
    from sidecar.shells.client import RemoteSidecar

__all__ = ["markdown", "measure", "plot", "run"]

SATURATED_BELOW = 0.9
"""A step whose achieved sessions/s is below this share of the offered one saturated."""
P95_BOUND_MS = {"check_call": 250.0, "report": 2000.0}
"""A step whose p95 is over these saturated: an agent waiting a quarter of a second for
a check before each call, or two seconds for its report, is not being served."""
CLOSED = ("embedded", "1", "3")
"""Configurations that also run the closed loop (the issue's intake target)."""
DRAIN_S = 120.0
"""Longest wait, after the load, for the publisher to empty what waits."""


@dataclass(frozen=True)
class Sizes:
    period_s: float
    """Each agent finishes one session every this many seconds."""
    agents: tuple[int, ...]
    """The offered load's steps (agents at once), stopped after the first saturated."""
    step_s: float
    replicas: tuple[int, ...]
    """Shared configurations (replica processes); the embedded one always runs."""
    closed_clients: int
    closed_s: float


QUICK = Sizes(
    period_s=2.0, agents=(2, 4, 8, 16, 32, 64), step_s=10.0, replicas=(1, 2, 3),
    closed_clients=6, closed_s=15.0,
)  # fmt: skip
FULL = Sizes(
    period_s=2.0, agents=(2, 4, 8, 12, 16, 24, 32, 48, 64), step_s=30.0, replicas=(1, 2, 3),
    closed_clients=6, closed_s=40.0,
)  # fmt: skip


@dataclass
class Tally:
    """What one load (a step or the closed loop) saw, all agents together."""

    check_ms: list[float] = field(default_factory=list)
    report_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    sessions: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, checks: list[float], report_ms: float, status: str) -> None:
        with self.lock:
            self.check_ms.extend(checks)
            self.report_ms.append(report_ms)
            self.statuses[status] += 1
            self.sessions += 1

    def failed(self, exc: Exception) -> None:
        with self.lock:
            self.errors.append(f"{type(exc).__name__}: {exc}"[:300])


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 2)


# ---- one agent, one session ------------------------------------------------------------
def one_session(client: RemoteSidecar, n: int, tally: Tally, checks: bool = True) -> None:
    """``check_call`` before each call of the session (``checks``), then its report."""
    body = session(n)
    steps = body["steps"]
    check_ms: list[float] = []
    try:
        for i, step in enumerate(steps if checks else ()):
            t0 = time.perf_counter()
            client.check_call(steps[:i], step["tool"], step["arguments"])
            check_ms.append((time.perf_counter() - t0) * 1000.0)
        t0 = time.perf_counter()
        status = client.report(body).status
        tally.add(check_ms, (time.perf_counter() - t0) * 1000.0, status)
    except Exception as exc:  # counted and shown in the result, not raised in a thread
        tally.failed(exc)


def agent(
    client: RemoteSidecar, index: int, of: int, period_s: float, start: float, until: float,
    tally: Tally, base: int,
) -> None:  # fmt: skip
    """Sessions on schedule: the k-th at ``start + (index / of + k) * period_s``, while
    that is before ``until``; late, at once (one session at a time)."""
    k = 0
    while True:
        due = start + (index / of + k) * period_s
        if due >= until:
            return
        time.sleep(max(0.0, due - time.perf_counter()))
        one_session(client, base + k, tally)
        k += 1


def run_threads(work: Sequence[Callable[[], None]]) -> float:
    """Run every callable on a thread of its own; the wall time until all end."""
    threads = [threading.Thread(target=w, daemon=True) for w in work]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


# ---- a configuration ---------------------------------------------------------------------
@dataclass
class Target:
    """The servers of one configuration, and what watches them."""

    label: str
    servers: list[Replica]
    memory: Memory | None
    services: Services
    clients: list[RemoteSidecar] = field(default_factory=list)

    def client(self, i: int) -> RemoteSidecar:
        """Client ``i`` (made on first use) on replica ``i mod R``."""
        while len(self.clients) <= i:
            self.clients.append(self.servers[len(self.clients) % len(self.servers)].client())
        return self.clients[i]

    def probes(self) -> tuple[CpuProbe, LockProbe | None]:
        import os

        roots = {"replicas": [s.proc.pid for s in self.servers], "clients": [os.getpid()]}
        if self.memory is not None:
            pid = (self.services.postgres.data / "postmaster.pid").read_text().split()[0]
            roots |= {
                "postgres": [int(pid)],
                "chroma": [self.services.chroma_pid],
                "s3": [self.services.s3.pid],
            }
        lock = None
        if self.memory is not None:
            lock = LockProbe(self.services.postgres.url(), self.memory.collection).start()
        cpu = CpuProbe(roots)
        cpu.start()
        return cpu, lock


def measured(target_: Target, load: Callable[[Tally], float]) -> dict[str, Any]:
    """Run ``load`` (it returns the wall time it measured) with the probes on."""
    tally = Tally()
    cpu, lock = target_.probes()
    try:
        wall = load(tally)
    finally:
        locks = lock.stop() if lock is not None else None
    out: dict[str, Any] = {
        "wall_s": round(wall, 2),
        "sessions": tally.sessions,
        "sessions_per_s": round(tally.sessions / wall, 2) if wall else 0.0,
        "checks_per_s": round(len(tally.check_ms) / wall, 2) if wall else 0.0,
        "check_call_ms": {"p50": pct(tally.check_ms, 0.5), "p95": pct(tally.check_ms, 0.95)},
        "report_ms": {"p50": pct(tally.report_ms, 0.5), "p95": pct(tally.report_ms, 0.95)},
        "statuses": dict(tally.statuses),
        "errors": len(tally.errors),
        "error_samples": tally.errors[:3],
        "cpu": cpu.stop(wall),
    }
    if locks is not None:
        out["locks"] = locks
    return out


def step(target_: Target, agents: int, sizes: Sizes, base: int) -> dict[str, Any]:
    """``agents`` agents for ``step_s``: offered against achieved, and whether it
    saturated."""

    # made here: the threads must not race to make them
    clients = [target_.client(i) for i in range(agents)]

    def load(tally: Tally) -> float:
        start = time.perf_counter() + 0.2  # every thread started before the first is due
        until = start + sizes.step_s
        run_threads(
            [
                partial(
                    agent, c, i, agents, sizes.period_s, start, until, tally, base + i * 100_000
                )
                for i, c in enumerate(clients)
            ]
        )
        # the step lasts its window, or until the last late session ended
        return max(sizes.step_s, time.perf_counter() - start)

    out: dict[str, Any] = {
        "agents": agents,
        "offered_sessions_per_s": round(agents / sizes.period_s, 2),
    }
    out |= measured(target_, load)
    out["achieved_vs_offered"] = ratio(out["sessions_per_s"], out["offered_sessions_per_s"], 2)
    out["saturated"] = saturation(out)
    return out


def saturation(row: dict[str, Any]) -> list[str]:
    """Why a step saturated (empty: it did not)."""
    why = []
    if row["achieved_vs_offered"] < SATURATED_BELOW:
        why.append(f"achieved {row['achieved_vs_offered']}x offered")
    for op, bound in P95_BOUND_MS.items():
        if row[f"{op}_ms"]["p95"] > bound:
            why.append(f"{op} p95 {row[f'{op}_ms']['p95']} ms > {bound:g}")
    if row["errors"]:
        why.append(f"{row['errors']} errors")
    return why


def closed_loop(target_: Target, sizes: Sizes) -> dict[str, Any]:
    """``closed_clients`` clients, each reporting one session per request as soon as
    the last was answered, for ``closed_s``."""

    clients = [target_.client(i) for i in range(sizes.closed_clients)]

    def load(tally: Tally) -> float:
        until = time.perf_counter() + sizes.closed_s

        def client_loop(i: int, client: RemoteSidecar) -> None:
            n = 0
            while time.perf_counter() < until:
                one_session(client, 9_000_000 + i * 100_000 + n, tally, False)
                n += 1

        return run_threads([partial(client_loop, i, c) for i, c in enumerate(clients)])

    return {"clients": sizes.closed_clients} | measured(target_, load)


def archived_in_state(target_: Target) -> dict[str, Any]:
    """Once nothing waits for the publisher: the archive's count, and how long the
    wait was."""
    client = target_.client(0)
    started = time.perf_counter()
    status = client.status()
    while status.pending_records and time.perf_counter() - started < DRAIN_S:
        time.sleep(0.5)
        status = client.status()
    return {
        "chains": status.chains,
        "pending_records": status.pending_records,
        "drain_s": round(time.perf_counter() - started, 2),
    }


def configuration(
    services: Services, root: Path, label: str, count: int, sizes: Sizes
) -> dict[str, Any]:
    """One configuration on servers (and a memory) of its own: the steps until one
    saturates, the closed loop (:data:`CLOSED`), then the count of what was kept."""
    from sidecar import Tool

    memory = None if label == "embedded" else services.memory()
    tools = [Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]
    with replicas(root / f"fleet-{label}", count, memory) as servers:
        target_ = Target(label, servers, memory, services)
        try:
            first = target_.client(0)
            first.add_tools(tools)
            warm = first.report(session(-1))  # connections and tables warm before the clock
            steps: list[dict[str, Any]] = []
            for number, agents in enumerate(sizes.agents):
                progress(f"fleet: {label}, {agents} agents ({agents / sizes.period_s:g}/s)")
                steps.append(step(target_, agents, sizes, (number + 1) * 10_000_000))
                if steps[-1]["saturated"]:
                    break
            closed = None
            if label in CLOSED:
                progress(f"fleet: {label}, closed loop, {sizes.closed_clients} clients")
                closed = closed_loop(target_, sizes)
            kept = archived_in_state(target_)
        finally:
            for c in target_.clients:
                c.close()
    acknowledged = (warm.status == "archived") + sum(
        r["statuses"].get("archived", 0) for r in [*steps, *([closed] if closed else [])]
    )
    return {
        "replicas": count,
        "backends": "SQLite, embedded Chroma, local Parquet"
        if memory is None
        else "PostgreSQL, Chroma server, Delta on S3 (moto)",
        "steps": steps,
        "saturated_at": next((s for s in steps if s["saturated"]), None),
        "last_unsaturated": next((s for s in reversed(steps) if not s["saturated"]), None),
        "closed": closed,
        "acknowledged_archived": acknowledged,
        **kept,
        "lost": acknowledged - kept["chains"],
    }


def measure(sizes: Sizes, seed: int = 7) -> dict[str, Any]:
    del seed  # the load is deterministic: session ids are random, their content is not
    started = time.perf_counter()
    plan = [("embedded", 1), *((str(n), n) for n in sizes.replicas)]
    with (
        tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp,
        Services(Path(tmp)) as services,
    ):
        configs = {
            label: configuration(services, Path(tmp), label, count, sizes) for label, count in plan
        }
    result: dict[str, Any] = {
        "benchmark": "fleet",
        "question": (
            "a fleet of simulated agents (check_call before each call, one report per "
            "session) against one embedded sidecar and 1-3 shared replicas: offered vs "
            "achieved load, latency, where it saturates and why; closed-loop intake"
        ),
        "machine": machine(),
        "params": asdict(sizes),
        "saturated_below": SATURATED_BELOW,
        "p95_bound_ms": P95_BOUND_MS,
        "configs": configs,
    }
    result["intake"] = intake_ratios(configs)
    result["targets"] = targets(result)
    result["timings_s"] = {"total": round(time.perf_counter() - started, 1)}
    return result


def intake_ratios(configs: dict[str, Any]) -> dict[str, Any]:
    rate = {k: c["closed"]["sessions_per_s"] for k, c in configs.items() if c.get("closed")}
    return {
        "sessions_per_s": rate,
        "three_vs_embedded": ratio(rate.get("3", 0.0), rate.get("embedded", 0.0), 2),
        "three_vs_one": ratio(rate.get("3", 0.0), rate.get("1", 0.0), 2),
    }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    intake = result["intake"]
    lost = {k: c["lost"] for k, c in result["configs"].items()}
    return [
        target(
            "fleet: closed-loop intake, 3 shared replicas / embedded",
            ">= 0.5x",
            intake["three_vs_embedded"],
            intake["three_vs_embedded"] >= 0.5,
        ),
        target(
            "fleet: closed-loop intake, 3 shared replicas / 1",
            ">= 1.0x",
            intake["three_vs_one"],
            intake["three_vs_one"] >= 1.0,
        ),
        target(
            "fleet: acknowledged sessions missing from the archive",
            "0 in every configuration",
            lost,
            all(v == 0 for v in lost.values()),
        ),
    ]


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    return measure(QUICK if quick else FULL, seed)


# ---- one replica profiled under intake -------------------------------------------------------
def profile(shared: bool, count: int, clients: int, seconds: float) -> dict[str, Any]:
    """``count`` servers (shared replicas, or the embedded one) under the stack sampler
    (:mod:`benchmarks.stack_sampler`) while ``clients`` closed-loop clients report
    sessions for ``seconds``: where the servers' threads spend their time (every
    server's samples added up), beside the probes."""
    import sys

    from sidecar import Tool

    sizes = Sizes(1.0, (), 0.0, (count,), clients, seconds)
    with (
        tempfile.TemporaryDirectory(prefix="bench-fleet-profile-") as tmp,
        Services(Path(tmp)) as services,
    ):
        out = Path(tmp) / "stacks"
        out.mkdir()
        launcher = [sys.executable, "-m", "benchmarks.stack_sampler", str(out / "{pid}.json")]
        memory = services.memory() if shared else None
        label = str(count) if shared else "embedded"
        with replicas(Path(tmp) / "profiled", count, memory, launcher=launcher) as servers:
            target_ = Target(label, servers, memory, services)
            try:
                target_.client(0).add_tools(
                    [Tool("get_order", "look up an order"), Tool("exchange_items", "exchange")]
                )
                target_.client(0).report(session(-1))
                progress(f"fleet: profiling {label}, {clients} clients, {seconds:g} s")
                closed = closed_loop(target_, sizes)
            finally:
                for c in target_.clients:
                    c.close()
        return {"config": label, "closed": closed, **merged_stacks(sorted(out.glob("*.json")))}


def merged_stacks(files: list[Path], top: int = 40) -> dict[str, Any]:
    """Several servers' sampler files as one: counts added up, the ``top`` of each."""
    import json

    counts: dict[str, Counter[str]] = {k: Counter() for k in ("innermost", "inclusive", "by_entry")}
    samples = 0
    for f in files:
        stacks = json.loads(f.read_text())
        samples += stacks["samples"]
        for key, counter in counts.items():
            counter.update(stacks.get(key, {}))
    return {
        "servers": len(files),
        "samples": samples,
        **{key: dict(counter.most_common(top)) for key, counter in counts.items()},
    }


def main(argv: list[str] | None = None) -> None:
    import argparse

    from benchmarks.harness.results import emit

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--profile",
        choices=("shared", "embedded"),
        help="instead: one server under a stack sampler, closed-loop intake",
    )
    parser.add_argument("--replicas", type=int, default=1, help="--profile shared: servers")
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    if args.profile:
        shared = args.profile == "shared"
        emit(profile(shared, args.replicas if shared else 1, args.clients, args.seconds), args.out)
    else:
        emit(run(args.quick), args.out)


if __name__ == "__main__":
    main()
