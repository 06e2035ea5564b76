"""Question: where does a one-tool move's time go on the shared backends (PostgreSQL
state, Chroma server, Delta on S3) against the embedded ones (SQLite, embedded Chroma,
the local Parquet table), counted in round trips per step of the move?

One run starts PostgreSQL, ``chroma run`` and the moto S3 server behind the counting
proxy (:mod:`benchmarks.s3server`, no faults) as :mod:`benchmarks.bench_shared` does.
Two sidecars in this process (hashing embedder), one embedded, one shared, each with
the same catalog, make ``trials`` one-tool moves each, alternating (a new fatal chain
behind one tool, then ``evict``), as section 14's move row does:

- **timed**: wall time of ``evict`` per mode, p50 / p99 and the shared / embedded ratio
  (the shared sidecar reaches S3 directly, not through the proxy);
- **counted**: the same moves again on a third sidecar whose S3 requests go through the
  proxy, with every round trip on the calling thread counted and timed by step of the
  move: PostgreSQL statements (``executemany`` counted once: psycopg pipelines it),
  transactions' ``BEGIN`` and ``COMMIT``, new connections, Chroma HTTP requests, S3
  requests (the proxy's count, by Delta step), and what the embedded sidecar does on
  SQLite.  Work on other threads (the group publisher) is counted apart: a move does
  not wait for it.

``python -m benchmarks.bench_moves [--quick] [--out FILE]``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table
from benchmarks.harness.timing import ratio, summary

STEPS: tuple[tuple[str, str, str], ...] = (
    # (module, class.attribute, step): the innermost one entered names a round trip;
    # the library before and after the batching (one of each pair may be absent)
    ("sidecar.eviction.recovery", "Recovery.moves_ready", "before: unfinished moves?"),
    ("sidecar.storage.backends.pglock", "PgLock.acquire", "lock"),
    ("sidecar.storage.backends.pglock", "PgLock.release", "lock"),
    ("sidecar.app.lock", "WriterLock.acquire", "lock"),
    ("sidecar.app.lock", "WriterLock.release", "lock"),
    ("sidecar.eviction.engine", "Evictor._recover_locked", "recover?"),
    ("sidecar.eviction.engine", "Evictor.decide", "decide"),
    ("sidecar.eviction.engine", "Evictor._intents", "intent: read records"),
    ("sidecar.eviction.steps", "MoveSteps.move", "move: transactions"),
    ("sidecar.eviction.steps", "MoveSteps.complete", "move: transactions"),
    ("sidecar.eviction.steps", "MoveSteps._hot_delete", "move: transactions"),
    ("sidecar.eviction.journal", "Journal.write_intents", "intent"),
    ("sidecar.eviction.journal", "Journal.begin", "intent"),
    ("sidecar.eviction.engine", "Evictor._archive", "archived"),
    ("sidecar.eviction.journal", "Journal.status", "archived, mandated"),
    ("sidecar.eviction.journal", "Journal.release_credentials", "archived, mandated"),
    ("sidecar.eviction.steps", "MoveSteps._settle", "archived, mandated"),
    ("sidecar.app.home", "Home._bump_tools", "hot delete: revisions"),
    ("indexes.active", "ActiveIndex.delete", "hot delete: Chroma"),
    ("indexes.active", "ActiveIndex.discard", "hot delete: Chroma"),
    ("sidecar.tools.records", "ToolRecords.remove", "hot delete: records"),
    ("sidecar.storage.tools", "ToolRepository.remove", "hot delete: records"),
    ("sidecar.eviction.journal", "Journal.advance", "deleted"),
    ("sidecar.eviction.journal", "Journal.finish", "done"),
    ("sidecar.eviction.journal", "Journal.finish_in", "done"),
)


TOTAL = "evict (total)"


@dataclass
class _Frame:
    step: str
    started: float
    inner_ms: float = 0.0
    """Time spent in the steps it entered."""


class Probe:
    """Round trips made on the thread that calls ``evict``, by step, with their time.

    ``entered(TOTAL)`` wraps one ``evict``; inside it the innermost step entered names
    every round trip made until it returns (``other`` outside any step), and a step's
    time is its own, without the steps it entered."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.ms: defaultdict[tuple[str, str], float] = defaultdict(float)
        self.step_ms: defaultdict[str, float] = defaultdict(float)
        self.background: Counter[str] = Counter()
        self.s3: Counter[str] = Counter()
        """S3 requests during the moves (the proxy's count, by Delta step)."""
        self.on = False
        self.s3_server: Any = None
        """The S3 server whose proxy counts requests, asked before and after a move."""
        self._thread = threading.get_ident()
        self._stack: list[_Frame] = []
        """The steps entered, outermost first."""

    def step(self) -> str:
        return self._stack[-1].step if len(self._stack) > 1 else "other"

    def count(self, kind: str, ms: float) -> None:
        if not self.on:
            return
        if threading.get_ident() != self._thread:
            self.background[kind] += 1
            return
        key = (self.step(), kind)
        self.counts[key] += 1
        self.ms[key] += ms

    def reset(self) -> None:
        for counter in (self.counts, self.ms, self.step_ms, self.background, self.s3):
            counter.clear()

    @contextlib.contextmanager
    def entered(self, step: str) -> Iterator[None]:
        if not (self.on and threading.get_ident() == self._thread):
            yield
            return
        if step != TOTAL and not self._stack:
            yield
            return
        total = step == TOTAL and self.s3_server is not None
        before = self.s3_server.request_counts() if total else {}
        frame = _Frame(step, time.perf_counter())
        self._stack.append(frame)
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - frame.started) * 1000.0
            self._stack.pop()
            self.step_ms[step] += elapsed - frame.inner_ms
            if self._stack:
                self._stack[-1].inner_ms += elapsed
            if total:
                after = self.s3_server.request_counts()
                self.s3.update({k: n - before.get(k, 0) for k, n in after.items()})


def _patch(stack: contextlib.ExitStack, owner: Any, name: str, wrap: Callable[..., Any]) -> None:
    original = owner.__dict__.get(name)
    if original is None:
        return  # a step of the other version of the library
    setattr(owner, name, wrap(original))
    stack.callback(setattr, owner, name, original)


def _timed(probe: Probe, kind: str) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                probe.count(kind, (time.perf_counter() - started) * 1000.0)

        return inner

    return wrap


def _chroma_timed(probe: Probe) -> Callable[[Any], Any]:
    """Chroma's HTTP requests, named by the collection operation they carry."""

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(client: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(client, request, *args, **kwargs)
            finally:
                what = request.url.path.rstrip("/").rsplit("/", 1)[-1]
                probe.count(f"Chroma {what}", (time.perf_counter() - started) * 1000.0)

        return inner

    return wrap


def _stepped(probe: Probe, step: str) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with probe.entered(step):
                return fn(*args, **kwargs)

        return inner

    return wrap


@contextlib.contextmanager
def instrumented(probe: Probe) -> Iterator[None]:
    """Every round trip of a move counted on ``probe``, attributed to its step."""
    import importlib

    import httpx
    import psycopg

    from sidecar.storage.backends.sqlite import SqliteDatabase

    with contextlib.ExitStack() as stack:
        _patch(stack, psycopg.Cursor, "execute", _timed(probe, "PG statement"))
        _patch(stack, psycopg.Cursor, "executemany", _timed(probe, "PG executemany"))
        _patch(stack, psycopg.Transaction, "__enter__", _timed(probe, "PG BEGIN"))
        _patch(stack, psycopg.Transaction, "__exit__", _timed(probe, "PG COMMIT"))
        # the backend connects through the module's function (a lock's own connection)
        _patch(stack, psycopg, "connect", _timed(probe, "PG connect"))
        _patch(stack, SqliteDatabase, "execute", _timed(probe, "SQLite statement"))
        _patch(stack, SqliteDatabase, "executemany", _timed(probe, "SQLite executemany"))
        _patch(stack, httpx.Client, "send", _chroma_timed(probe))
        for module, attribute, step in STEPS:
            cls_name, name = attribute.split(".")
            owner = getattr(importlib.import_module(module), cls_name)
            _patch(stack, owner, name, _stepped(probe, step))
        yield


def measure(trials: int, seed: int = 7) -> dict[str, Any]:
    from benchmarks.shared_services import Services, library
    from benchmarks.shared_workload import catalog
    from indexes import HashingEmbedder
    from sidecar import Tool

    rng = random.Random(seed)
    rounds = trials * 3  # timed at once, timed settled, counted
    tools = catalog(200, rng)
    tools += [Tool(f"move_{i}", f"move tool {i}") for i in range(rounds)]
    tools += [Tool(f"then_{i}", f"then tool {i}") for i in range(rounds)]
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="bench-moves-") as tmp,
        Services(Path(tmp), s3_proxy=True) as services,
        contextlib.ExitStack() as stack,
    ):
        root = Path(tmp)
        memories = {"shared": services.memory(), "counted": services.memory()}
        sidecars = {}
        for mode in ("embedded", "shared", "counted"):
            # the timed shared sidecar reaches S3 directly; the counted one through the proxy
            direct = {"AWS_ENDPOINT_URL": services.s3.direct_endpoint} if mode == "shared" else {}
            with _env(direct):
                sidecars[mode] = stack.enter_context(
                    library(
                        root / f"move-{mode}",
                        HashingEmbedder(),
                        memories.get(mode),
                        evict_min_chains=1,
                    )
                )
        for sc in sidecars.values():
            sc.add_tools(tools)
            sc.report(_chain(["tool_0", "tool_1"], -1))
            sc.evict()  # the first move opens what a move touches (cold tables, locks)
        timed = {"embedded": sidecars["embedded"], "shared": sidecars["shared"]}
        progress(f"moves: {trials} timed one-tool moves in each mode, as section 14 does")
        at_once = _timed_moves(timed, range(trials), settle=False)
        progress(f"moves: {trials} timed one-tool moves in each mode, publication settled")
        settled = _timed_moves(timed, range(trials, 2 * trials), settle=True)
        progress(f"moves: {trials} counted one-tool moves in each mode")
        counted = {
            mode: _counted_moves(
                sidecars[source],
                range(2 * trials, rounds),
                services.s3 if source == "counted" else None,
            )
            for mode, source in (("embedded", "embedded"), ("shared", "counted"))
        }
    return {
        "benchmark": "moves",
        "question": "a one-tool move's time and round trips by step, shared against embedded",
        "machine": machine(),
        "params": {"trials": trials, "seed": seed},
        **at_once,
        "settled": settled,
        "breakdown": counted,
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _chain(topology: list[str], i: int) -> dict[str, Any]:
    from benchmarks.shared_workload import fatal_chain

    return fatal_chain(topology, i)


def _timed_moves(sidecars: dict[str, Any], trials: range, settle: bool) -> dict[str, Any]:
    """One-tool moves alternating between the modes: a chain reported, then ``evict``
    timed, at once (section 14's protocol: the report's group commit may still be
    running) or once the report's records are published (``settle``)."""
    samples: dict[str, list[float]] = {mode: [] for mode in sidecars}
    for n, i in enumerate(trials):
        order = list(sidecars) if n % 2 == 0 else list(reversed(sidecars))
        for mode in order:
            sc = sidecars[mode]
            sc.report(_chain([f"move_{i}", f"then_{i}"], i))
            if settle:
                _settle(sc.publisher)
            t0 = time.perf_counter()
            report = sc.evict()
            samples[mode].append((time.perf_counter() - t0) * 1000.0)
            assert [d.tool_id for d in report.evicted] == [f"move_{i}"], report.evicted
    stats = {mode: summary(values) for mode, values in samples.items()}
    return {
        **stats,
        "p50_ratio": ratio(stats["shared"]["p50_ms"], stats["embedded"]["p50_ms"], 2),
    }


def _counted_moves(sc: Any, trials: range, s3: Any) -> dict[str, Any]:
    """One-tool moves with every round trip on the calling thread counted by step;
    with ``s3``, the S3 requests by step too, and those the group publisher makes after
    the move (it is held until the move returns)."""
    probe = Probe()
    publisher = sc.publisher
    published: Counter[str] = Counter()
    with instrumented(probe):
        probe.s3_server = s3
        for i in trials:
            sc.report(_chain([f"move_{i}", f"then_{i}"], i))
            _settle(publisher)
            with publisher._lock if publisher.group else contextlib.nullcontext():
                probe.on = True
                with probe.entered(TOTAL):
                    sc.evict()
                probe.on = False
            if s3 is not None:
                before = s3.request_counts()
                _settle(publisher)
                after = s3.request_counts()
                published.update({k: n - before.get(k, 0) for k, n in after.items()})
    out = _breakdown(probe, len(trials))
    out["published_after_s3"] = {k: round(n / len(trials), 2) for k, n in published.items() if n}
    return out


def _breakdown(probe: Probe, trials: int) -> dict[str, Any]:
    """Per move: each step's own time and its round trips by kind (count, ms), and the
    round trips of the whole move by kind."""
    steps: dict[str, Any] = {}
    names = dict.fromkeys([s for _m, _a, s in STEPS] + [s for s, _k in probe.counts])
    for step in names:
        kinds = {
            kind: {"n": round(n / trials, 2), "ms": round(probe.ms[(s, kind)] / trials, 3)}
            for (s, kind), n in sorted(probe.counts.items())
            if s == step and n
        }
        ms = probe.step_ms.get(step, 0.0) / trials
        if kinds or ms:
            steps[step] = {"ms": round(ms, 3), "round_trips": kinds}
    steps["other"] = {"ms": round(probe.step_ms[TOTAL] / trials, 3), "round_trips": {}}
    by_kind: Counter[str] = Counter()
    for (_s, kind), n in probe.counts.items():
        by_kind[kind] += n
    return {
        "per_move": steps,
        "total_ms": round(sum(probe.step_ms.values()) / trials, 3),
        "round_trips": {k: round(n / trials, 2) for k, n in sorted(by_kind.items())},
        "s3_during_move": {k: round(n / trials, 2) for k, n in probe.s3.items() if n},
        "background_per_move": {k: round(v / trials, 2) for k, v in probe.background.items()},
    }


def _settle(publisher: Any) -> None:
    """Until the group publisher has published every pending record."""
    deadline = time.monotonic() + 60
    while publisher.group and publisher.waiting() and time.monotonic() < deadline:
        publisher.queued()
        time.sleep(0.01)


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    return measure(10 if quick else 30, seed)


def markdown(result: dict[str, Any]) -> str:
    settled = result["settled"]
    lines = [
        "## One-tool move: time and round trips",
        "",
        md_table(
            ["protocol", "embedded p50 / p99 ms", "shared p50 / p99 ms", "p50 ratio"],
            [
                [
                    name,
                    f"{r['embedded']['p50_ms']} / {r['embedded']['p99_ms']}",
                    f"{r['shared']['p50_ms']} / {r['shared']['p99_ms']}",
                    r["p50_ratio"],
                ]
                for name, r in (("report, then evict", result), ("publication settled", settled))
            ],
        ),
        "",
    ]
    for mode, part in result["breakdown"].items():
        rows = []
        for step, v in part["per_move"].items():
            trips = ", ".join(
                f"{kind} {k['n']:g} ({k['ms']:.2f} ms)" for kind, k in v["round_trips"].items()
            )
            rows.append([step, v["ms"], trips])
        total = ", ".join(f"{kind} {n:g}" for kind, n in part["round_trips"].items())
        s3 = ", ".join(f"{kind} {n:g}" for kind, n in part["published_after_s3"].items())
        lines += [
            f"### {mode} (counted run, per move, {part['total_ms']} ms)",
            "",
            md_table(["step", "ms", "round trips (time)"], rows),
            "",
            f"Round trips per move: {total}.  S3 requests during the move: "
            f"{sum(part['s3_during_move'].values()):g}; by the group publisher after it: "
            f"{s3 or 'none'}.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
