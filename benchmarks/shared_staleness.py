"""Row 3 of the shared benchmark: how long a write on one replica takes to show on the
other (and on itself, the floor), with the revisions read on every request, cached or
leased."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.bench_lookup import WORDS
from benchmarks.harness.progress import progress
from benchmarks.harness.timing import summary
from benchmarks.shared_services import Services, replicas
from benchmarks.shared_workload import (
    POLL_LIMIT_S,
    REVISION_CACHE_MS,
    Sizes,
    fatal_chain,
    good_session,
    lookup_step,
    session,
)

if TYPE_CHECKING:
    from sidecar.shells.client import RemoteSidecar


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
    how = "revision lease" if lease else f"revision cache {cache_ms:g} ms"
    progress(f"shared: row 3 ({how}), {n} evictions and {n} reports, watched from both replicas")
    env = {"SIDECAR_EVICT_MIN_CHAINS": "1", "SIDECAR_REVISION_CACHE_MS": str(cache_ms)}
    if not lease:
        env["SIDECAR_REVISION_LEASE_MS"] = "0"
    with replicas(root, 2, memory, env) as (one, two):
        a, b = one.client(), two.client()
        try:
            a.add_tools([*tools, Tool("get_order", "look up an order")])
            samples = {
                "evict": _evictions(a, b, descriptions, n),
                "report": _reports(a, b, n),
            }
        finally:
            a.close()
            b.close()
    out: dict[str, Any] = {"revision_cache_ms": cache_ms, "revision_lease": lease}
    for kind, by_watcher in samples.items():
        out[kind] = {where: _summary(trials) for where, trials in by_watcher.items()}
    return out


Trials = dict[str, list[dict[str, Any]]]
"""By watcher (``other``: the other replica, ``same``: the writer), each trial's wait."""


def _evictions(a: RemoteSidecar, b: RemoteSidecar, descriptions: dict[str, str], n: int) -> Trials:
    samples: Trials = {"other": [], "same": []}
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
        samples[where].append(
            _wait_until(
                lambda w=watcher, q=query, t=tool: (
                    t not in {h.tool_id for h in w.search(q, k=10).hits}
                ),
                since,
            )
        )
    return samples


def _reports(a: RemoteSidecar, b: RemoteSidecar, n: int) -> Trials:
    samples: Trials = {"other": [], "same": []}
    for i in range(n):
        watcher, where = (b, "other") if i % 2 == 0 else (a, "same")
        tool = f"pay_{i}"

        def decision(w: RemoteSidecar = watcher, t: str = tool) -> str:
            return w.check_call([lookup_step("#W9")], t, {"order_id": "#W9"}).decision

        # beside three successes, one failing session is not yet a warning (chance
        # explains it as likely as not); the watched report is the second, the one
        # that makes the call warn
        a.report_many([good_session(30_000 + 3 * i + k, tool) for k in range(3)])
        a.report(session(20_000 + i, tool))
        assert decision() == "allow"
        a.report(session(10_000 + i, tool))
        since = time.perf_counter()
        samples[where].append(_wait_until(lambda d=decision: d() != "allow", since))
    return samples


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [t["ms"] for t in trials]
    finite = [m for m in ms if m != float("inf")]
    return {
        **summary(finite or [0.0]),
        "max_ms": round(max(ms), 2) if ms else 0.0,
        "never": len(ms) - len(finite),
        "stale_answers": sum(t["stale_answers"] for t in trials),
        "n": len(ms),
    }
