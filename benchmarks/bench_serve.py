"""Question: with the sidecar's default model path (``SIDECAR_EMBEDDER=minilm``:
all-MiniLM-L6-v2 under onnxruntime, fp32 documents, int8 queries, a query cache; built
by ``sidecar.core.make_embedder``) against the torch reference (``minilm-torch``), how
soon is a server ready, how fast does ``tools add`` embed a real catalog, and what does
HTTP add to a lookup over the library's own cost?

Three parts, each a ratio against a baseline measured in the same run:

- ``ready``: a real ``sidecar serve --port 0`` process, from its start to the first
  ``GET /readyz`` answering 200 (the URL from the home's ``server.json``, the home's
  bearer token), on a home holding the demo catalog, warm disk (one untimed start of
  each first; the ONNX files built once into a model cache kept for the whole run);
  then to its first ``POST /v1/search``.  onnx and torch starts alternate, median of
  several, with a server on the hashing stand-in (no model; its own demo home) in the
  same rotation as the floor.  The server calls ``Sidecar.warm_up`` (the embedder's
  ``warm``: tokenizer and both graphs, or torch's first embedding) before it serves, so
  ``/readyz`` cannot answer before the model is loaded; the first search's own latency
  is the check;
- ``add``: ``Sidecar.add_tools`` of real tool descriptions (ToolBench's catalog: 1,500
  sampled tools quick; full runs add Seal-Tools' catalog, 6,203 tools in all) into two
  empty homes, one per embedder, the catalog in chunks with the embedders alternating
  chunk by chunk (rotating which goes first); tools per second and the ratio.  Each
  model is loaded before the timing (``warm_up``, timed apart);
- ``lookup``: a 10,000-tool home with 100 active constraints (``tool_0 > tool_1`` leads
  to 100 fatal continuations; every lookup passes that prefix), its vectors stored
  under the model's name (hashing vectors: the exact tier's cost does not depend on
  their values) and copied, one copy opened in this process with the default embedder
  (``Sidecar.search(text, k=10)``), the other served by ``sidecar serve``
  (``POST /v1/search``, one keep-alive client).  One round robin: new query texts
  (each once, distinct under the query cache's key, so the cache never hits), one
  repeated text (cache and ranking memo hit), on each side, and ``GET /livez`` (the
  HTTP floor).  Target: HTTP p50 <= library p50 + 2 x livez p50.  The server's own
  request log gives each HTTP call's time inside the server's app (the rest is the
  transport).  A second round robin, a diagnostic, holds numpy's BLAS to one thread in
  both processes (the exact tier's matrix product otherwise runs on every core).
"""

from __future__ import annotations

import contextlib
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from benchmarks.common import DEFAULT_DATASETS, model_embedder, open_sidecar
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, target
from benchmarks.harness.timing import interleaved, ratio, summary
from benchmarks.serve_process import (
    READY_TARGET_S,
    READY_VARIANTS,
    SERVER_EMBEDDER,
    VARIANTS,
    ServerProcess,
    medians,
    rotated,
    server_env,
    server_times,
)
from benchmarks.serve_report import markdown, plot

if TYPE_CHECKING:
    from sidecar import Tool

T = TypeVar("T")

__all__ = ["markdown", "plot", "run"]
K = 10
PREFIX = ("tool_0", "tool_1")
LOOKUP_TOOLS = 10_000
CONSTRAINTS = 100
ISSUE_TOOLS = 1_500
ISSUE_SECONDS = 90.0
"""The issue: today's ``tools add`` of 1,500 tools takes about 90 s."""
WARMUP = 5
"""Untimed rounds of the lookup round robin (the first loads the exact tier)."""
REPEATED = "find the weather forecast for a city"
CHECK_QUERIES = (REPEATED, "convert currency amounts", "send an invoice email")
"""Asked of both sides before the timing: the library and the server must agree."""
WORDS = tuple(
    "search parse extract weather stock email calendar file image audio translate "  # noqa: SIM905
    "summarize convert route map price currency database query chart code review news "
    "flight hotel recipe product invoice payment ticket user account report".split()
)


def chunks(items: Sequence[T], count: int) -> list[list[T]]:
    """``items`` in ``count`` contiguous parts of near-equal size (none empty)."""
    count = max(1, min(count, len(items)))
    size, extra = divmod(len(items), count)
    out: list[list[T]] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def distinct_queries(count: int, rng: random.Random, taken: Sequence[str] = ()) -> list[str]:
    """``count`` query texts of 6 words, no two of them (nor any of ``taken``) under the
    same query-cache key, so that each one misses the cache."""
    from indexes.query_cache import query_key

    seen = {query_key(q) for q in taken}
    out: list[str] = []
    while len(out) < count:
        text = " ".join(rng.choice(WORDS) for _ in range(6))
        key = query_key(text)
        if key not in seen:
            seen.add(key)
            out.append(text)
    return out


def http_budget(library_p50: float, livez_p50: float) -> float:
    """The most an HTTP lookup may cost: the library's own lookup plus two floors."""
    return library_p50 + 2.0 * livez_p50


# ---- part 1: ready time ---------------------------------------------------------------
def one_start(home: Path, env: Mapping[str, str], log: Path) -> dict[str, float]:
    with ServerProcess(home, env, log) as server:
        url_s = server.wait_url()
        ready_s, not_ready = server.wait_ready()
        search_s, hits = server.first_search()
    if hits == 0:
        raise RuntimeError("the first search found nothing: the demo home is empty")
    return {
        "url_s": round(url_s, 3),
        "ready_s": round(ready_s, 3),
        "first_search_s": round(search_s, 3),
        "first_search_after_ready_ms": round((search_s - ready_s) * 1000.0, 1),
        "not_ready_answers": not_ready,
    }


def ready_part(cache: Path, homes: Mapping[str, Path], runs: int, log: Path) -> dict[str, Any]:
    envs = {v: server_env(homes[v], SERVER_EMBEDDER[v], cache) for v in READY_VARIANTS}
    for v in READY_VARIANTS:  # warm disk: every file a start reads is in the page cache
        one_start(homes[v], envs[v], log)
    samples: dict[str, list[dict[str, float]]] = {v: [] for v in READY_VARIANTS}
    for i in range(runs):
        for v in rotated(READY_VARIANTS, i):
            samples[v].append(one_start(homes[v], envs[v], log))
            progress(f"serve: ready, {v} run {len(samples[v])}: {samples[v][-1]['ready_s']} s")
    out: dict[str, Any] = {"runs": runs}
    for v in READY_VARIANTS:
        out[v] = {
            "embedder_setting": SERVER_EMBEDDER[v],
            "ready_s": medians(samples[v], "ready_s"),
            "url_s": medians(samples[v], "url_s"),
            "first_search_s": medians(samples[v], "first_search_s"),
            "first_search_after_ready_ms": medians(samples[v], "first_search_after_ready_ms"),
            "not_ready_answers": sum(int(s["not_ready_answers"]) for s in samples[v]),
            "samples": samples[v],
        }
    out["onnx_vs_torch_ready"] = ratio(
        out["onnx"]["ready_s"]["median"], out["torch"]["ready_s"]["median"]
    )
    out["onnx_vs_torch_first_search"] = ratio(
        out["onnx"]["first_search_s"]["median"], out["torch"]["first_search_s"]["median"]
    )
    floor = out["hashing"]["ready_s"]["median"]
    out["model_share_s"] = {v: round(out[v]["ready_s"]["median"] - floor, 3) for v in VARIANTS}
    return out


def build_demo_home(home: Path, cache: Path | None) -> float:
    """The demo catalog in ``home``, embedded by the model (ONNX from ``cache``), or by
    the hashing stand-in when ``cache`` is ``None``."""
    from indexes import HashingEmbedder
    from sidecar.demo import demo_tools

    started = time.perf_counter()
    embedder = model_embedder("onnx", cache) if cache is not None else HashingEmbedder()
    with open_sidecar(home, embedder) as sc:
        sc.add_tools(demo_tools())
    return time.perf_counter() - started


# ---- part 2: tools add ----------------------------------------------------------------
def catalog(dataset: Path, quick: bool, seed: int) -> tuple[list[Tool], str]:
    from benchmarks.datasets import seal_tools, toolbench

    tools = toolbench(dataset).tools
    if quick:
        rng = random.Random(f"serve-add:{seed}")
        keep = sorted(rng.sample(range(len(tools)), min(ISSUE_TOOLS, len(tools))))
        return [tools[i] for i in keep], f"ToolBench, {len(keep):,} sampled"
    merged = {t.tool_id: t for t in tools}
    for t in seal_tools(dataset, seed).tools:
        merged.setdefault(t.tool_id, t)
    return list(merged.values()), "ToolBench and Seal-Tools catalogs"


def add_part(cache: Path, tools: Sequence[Tool], parts: int, tmp: Path) -> dict[str, Any]:
    from sidecar.tools.records import embedding_text

    batches = chunks(tools, parts)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, float] = dict.fromkeys(VARIANTS, 0.0)
    out: dict[str, Any] = {"tools": len(tools), "chunks": len(batches)}
    tokens: list[int] = []
    with contextlib.ExitStack() as stack:
        homes = {}
        for v in VARIANTS:
            started = time.perf_counter()
            sc = stack.enter_context(open_sidecar(tmp / f"add-{v}", model_embedder(v, cache)))
            sc.warm_up()
            homes[v] = sc
            out[v] = {"model_load_s": round(time.perf_counter() - started, 2)}
        counter = getattr(homes["onnx"].embedder, "tokenizer_count", None)
        if counter is not None:
            tokens = [counter(embedding_text(t)) for t in tools]
        for i, batch in enumerate(batches):
            for v in rotated(VARIANTS, i):
                started, cpu_started = time.perf_counter(), time.process_time()
                added = homes[v].add_tools(batch)
                seconds[v].append(time.perf_counter() - started)
                cpu[v] += time.process_time() - cpu_started
                if len(added.added) != len(batch):
                    raise RuntimeError(f"{v}: {len(added.added)} of {len(batch)} tools added")
            progress(
                f"serve: add, chunk {i + 1}/{len(batches)}: "
                + ", ".join(f"{v} {seconds[v][-1]:.1f} s" for v in VARIANTS)
            )
        for v in VARIANTS:
            if homes[v].index.count() != len(tools):
                raise RuntimeError(f"{v}: the index holds {homes[v].index.count()} tools")
    for v in VARIANTS:
        total = sum(seconds[v])
        out[v] |= {
            "seconds": round(total, 2),
            "tools_per_s": round(len(tools) / total, 1),
            "chunk_tools_per_s": [
                round(len(b) / s, 1) for b, s in zip(batches, seconds[v], strict=True)
            ],
            "seconds_per_1500_tools": round(ISSUE_TOOLS * total / len(tools), 1),
            # CPU seconds of this process (every thread) per wall second: the cores used
            "cpu_s": round(cpu[v], 2),
            "cores_used": round(cpu[v] / total, 2),
        }
    out["document_tokens_mean"] = round(statistics.fmean(tokens), 1) if tokens else None
    out["onnx_vs_torch_tools_per_s"] = ratio(
        out["onnx"]["tools_per_s"], out["torch"]["tools_per_s"]
    )
    out["onnx_vs_torch_seconds"] = ratio(out["onnx"]["seconds"], out["torch"]["seconds"])
    # chunk by chunk, the two ran back to back: the median of their ratios shrugs off a
    # chunk that other work on the machine slowed
    out["onnx_vs_torch_tools_per_s_paired_median"] = round(
        statistics.median(t / o for o, t in zip(seconds["onnx"], seconds["torch"], strict=True)),
        3,
    )
    return out


# ---- part 3: HTTP lookup against the library -------------------------------------------
def build_lookup_home(home: Path, seed: int) -> float:
    from benchmarks.bench_startup import _stand_in
    from sidecar import Tool

    rng = random.Random(f"serve-lookup-home:{seed}")
    started = time.perf_counter()
    with open_sidecar(home, _stand_in()) as sc:
        sc.add_tools(
            [
                Tool(f"tool_{i}", " ".join(rng.choice(WORDS) for _ in range(12)))
                for i in range(LOOKUP_TOOLS)
            ]
        )
        sc.report_many(
            {
                "topology": [*PREFIX, f"tool_{2 + i}"],
                "outcome": "abandoned",
                "failure": {"signature": "HTTP 413", "kind": "deterministic"},
                "constraint": {"rule": f"r{i}"},
                "session_id": f"s{i}",
            }
            for i in range(CONSTRAINTS)
        )
        active = sum(not sc.check([*PREFIX, f"tool_{2 + i}"]).safe for i in range(CONSTRAINTS))
    if active != CONSTRAINTS:
        raise RuntimeError(f"{active} of {CONSTRAINTS} constraints are active")
    return time.perf_counter() - started


def _each(fn: Callable[[str], Any], items: Sequence[str]) -> Callable[[], Any]:
    it: Iterator[str] = iter(items)
    return lambda: fn(next(it))


def lookup_part(cache: Path, tmp: Path, repeat: int, seed: int) -> dict[str, Any]:
    """The round robin with the libraries' defaults; then again with numpy's BLAS held
    to one thread on both sides (a diagnostic, when ``threadpoolctl`` is there)."""
    lib_home, http_home = tmp / "lookup-library", tmp / "lookup-http"
    progress(f"serve: lookup, building a {LOOKUP_TOOLS:,}-tool home, {CONSTRAINTS} constraints")
    build_s = build_lookup_home(lib_home, seed)
    shutil.copytree(lib_home, http_home)
    count = WARMUP + repeat
    texts = distinct_queries(4 * count, random.Random(f"serve-queries:{seed}"), CHECK_QUERIES)
    progress(f"serve: lookup, {repeat} rounds of 5")
    out = lookup_round(cache, lib_home, http_home, texts[: 2 * count], repeat, None)
    out["home_build_s"] = round(build_s, 1)
    try:
        import threadpoolctl  # noqa: F401  (scikit-learn's, via sentence-transformers)
    except ImportError:
        out["blas_one_thread"] = None
        return out
    progress(f"serve: lookup, {repeat} rounds of 5, BLAS on one thread")
    out["blas_one_thread"] = lookup_round(cache, lib_home, http_home, texts[2 * count :], repeat, 1)
    return out


def lookup_round(
    cache: Path,
    lib_home: Path,
    http_home: Path,
    texts: Sequence[str],
    repeat: int,
    blas_threads: int | None,
) -> dict[str, Any]:
    """One round robin: library and HTTP, new and repeated texts, and ``/livez``.
    ``blas_threads``: numpy's BLAS threads in both processes (``None``: its default,
    one per core)."""
    import httpx

    count = WARMUP + repeat
    lib_texts, http_texts = texts[:count], texts[count : 2 * count]
    log = http_home.parent / f"lookup-server-{blas_threads or 'default'}.log"
    with contextlib.ExitStack() as stack:
        if blas_threads is not None:
            from threadpoolctl import threadpool_limits

            stack.enter_context(threadpool_limits(limits=blas_threads, user_api="blas"))
        sc, lib_warm_s = _warm_library(stack, lib_home, cache)
        env = server_env(http_home, SERVER_EMBEDDER["onnx"], cache)
        if blas_threads is not None:
            env["OPENBLAS_NUM_THREADS"] = str(blas_threads)
        server = stack.enter_context(ServerProcess(http_home, env, log))
        server.wait_url()
        server_ready_s, _ = server.wait_ready()
        client = stack.enter_context(
            httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
        )
        paths = _LookupPaths(sc, client)
        agree = [paths.in_process(q) == paths.over_http(q) for q in CHECK_QUERIES]
        withheld = len(sc.search(REPEATED, k=K, after=PREFIX).withheld)
        blocked = {f"tool_{2 + i}" for i in range(CONSTRAINTS)}
        leaked = sum(len(blocked & set(paths.in_process(q))) for q in CHECK_QUERIES)
        samples, cache_counts = _time_paths(paths, sc.embedder, lib_texts, http_texts, repeat)
    # the server has stopped: its log is complete.  The first WARMUP rounds are untimed.
    logged = server_times(log.read_text(errors="replace"), paths.calls)
    server_app = (
        {kind: summary(ms[WARMUP:]) for kind, ms in logged.items()} if logged is not None else None
    )
    stats = {name: summary(v) for name, v in samples.items()}
    out: dict[str, Any] = {
        "tools": LOOKUP_TOOLS,
        "constraints": CONSTRAINTS,
        "k": K,
        "after": list(PREFIX),
        "rounds": repeat,
        "blas_threads": blas_threads or "default",
        "library_warm_up_s": round(lib_warm_s, 2),
        "server_ready_s": round(server_ready_s, 2),
        "library_and_http_agree": all(agree),
        "withheld_per_lookup": withheld,
        "blocked_tools_in_hits": leaked,
        "library_query_cache_during_timing": cache_counts,
        "server_app": server_app,
        **stats,
    }
    return out | {kind: _budget(kind, stats, server_app) for kind in ("new", "repeated")}


def _time_paths(
    paths: _LookupPaths,
    embedder: Any,
    lib_texts: Sequence[str],
    http_texts: Sequence[str],
    repeat: int,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The round robin's samples, and the library's query cache hits and misses during
    it."""
    before = (getattr(embedder, "hits", 0), getattr(embedder, "misses", 0))
    samples = interleaved(
        {
            "library_new": _each(paths.in_process, lib_texts),
            "http_new": _each(paths.http_new, http_texts),
            "library_repeated": lambda: paths.in_process(REPEATED),
            "http_repeated": paths.http_repeated,
            "livez": paths.livez,
        },
        repeat,
        warmup=WARMUP,
    )
    cache_counts = {
        "hits": getattr(embedder, "hits", 0) - before[0],
        "misses": getattr(embedder, "misses", 0) - before[1],
    }
    return samples, cache_counts


def _warm_library(stack: contextlib.ExitStack, home: Path, cache: Path) -> tuple[Any, float]:
    """The library as the server runs it (settings without SIDECAR_* variables, the
    embedder from make_embedder: ONNX, int8 queries, the query cache), warmed up; and
    the seconds its warm-up took."""
    from sidecar import Sidecar
    from sidecar.settings import Settings

    sc = stack.enter_context(Sidecar(Settings.load(env={}, home=home, model_cache=cache)))
    started = time.perf_counter()
    sc.warm_up()
    return sc, time.perf_counter() - started


class _LookupPaths:
    """The lookups the round robin times, in the library and over HTTP; ``calls``: the
    HTTP requests made, in order, to line up with the server's request log."""

    def __init__(self, sc: Any, client: Any) -> None:
        self.sc = sc
        self.client = client
        self.calls: list[str] = []

    def over_http(self, query: str) -> list[str]:
        answer = self.client.post(
            "/v1/search", json={"query": query, "k": K, "after": list(PREFIX)}
        )
        answer.raise_for_status()
        return [h["tool_id"] for h in answer.json()["hits"]]

    def in_process(self, query: str) -> list[str]:
        return [h.tool_id for h in self.sc.search(query, k=K, after=PREFIX).hits]

    def http_new(self, query: str) -> list[str]:
        self.calls.append("new")
        return self.over_http(query)

    def http_repeated(self) -> list[str]:
        self.calls.append("repeated")
        return self.over_http(REPEATED)

    def livez(self) -> None:
        self.calls.append("livez")
        self.client.get("/livez").raise_for_status()


def _budget(
    kind: str, stats: dict[str, dict[str, float]], server_app: dict[str, Any] | None
) -> dict[str, Any]:
    livez_p50 = stats["livez"]["p50_ms"]
    lib, http = stats[f"library_{kind}"]["p50_ms"], stats[f"http_{kind}"]["p50_ms"]
    budget = http_budget(lib, livez_p50)
    return {
        "library_p50_ms": lib,
        "http_p50_ms": http,
        "budget_ms": round(budget, 4),
        "http_minus_library_ms": round(http - lib, 4),
        "http_minus_library_in_livez": ratio(http - lib, livez_p50, 2),
        "http_vs_library_p50": ratio(http, lib),
        "server_app_p50_ms": server_app[kind]["p50_ms"] if server_app else None,
        "met": http <= budget,
    }


# ---- the run --------------------------------------------------------------------------
def _build_cache(cache: Path) -> float:
    """Both ONNX files, from the packaged weights (a machine's first use)."""
    started = time.perf_counter()
    warm = getattr(model_embedder("onnx", cache), "warm", None)
    if callable(warm):
        warm()
    return time.perf_counter() - started


def run(quick: bool, seed: int = 7, dataset: Path = DEFAULT_DATASETS) -> dict[str, Any]:
    started = time.perf_counter()
    runs = 3 if quick else 7
    repeat = 150 if quick else 400
    tools, source = catalog(dataset, quick, seed)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp_name:
        tmp = Path(tmp_name)
        cache, log = tmp / "model-cache", tmp / "servers.log"
        progress("serve: building the ONNX files into a fresh model cache")
        cache_s = _build_cache(cache)
        demo_s = build_demo_home(tmp / "demo", cache)
        build_demo_home(tmp / "demo-hashing", None)
        homes = {"onnx": tmp / "demo", "torch": tmp / "demo", "hashing": tmp / "demo-hashing"}
        progress(f"serve: ready time, {runs} starts of each, in turn")
        ready = ready_part(cache, homes, runs, log)
        lookup = lookup_part(cache, tmp, repeat, seed)
        # last: torch loads into this process here, and its worker threads must not
        # share the CPU with the lookups above
        progress(f"serve: tools add of {len(tools):,} tools, onnx and torch alternating")
        add = add_part(cache, tools, 5 if quick else 10, tmp)
    return {
        "benchmark": "serve",
        "question": "server ready time, tools add throughput and HTTP lookup cost over the "
        "library, with the default model path (ONNX) against the torch reference",
        "machine": machine(),
        "params": {
            "seed": seed,
            "dataset": str(dataset),
            "ready_runs": runs,
            "lookup_rounds": repeat,
            "lookup_tools": LOOKUP_TOOLS,
            "constraints": CONSTRAINTS,
            "k": K,
            "add_tools": len(tools),
            "add_catalog": source,
        },
        "setup_s": {"onnx_files_built": round(cache_s, 2), "demo_home": round(demo_s, 2)},
        "ready": ready,
        "add": add,
        "lookup": lookup,
        "targets": _targets(ready, add, lookup, runs),
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def _targets(
    ready: dict[str, Any], add: dict[str, Any], lookup: dict[str, Any], runs: int
) -> list[dict[str, Any]]:
    onnx_ready = ready["onnx"]["ready_s"]["median"]
    return [
        target(
            "serve: ready time of the default path (onnx), median",
            f"<= {READY_TARGET_S:g} s",
            onnx_ready,
            onnx_ready <= READY_TARGET_S,
            f"start to first /readyz 200, demo home, warm disk, median of {runs}",
        ),
        target(
            "serve: ready time, onnx / torch (medians)",
            "reported",
            ready["onnx_vs_torch_ready"],
            None,
            f"torch {ready['torch']['ready_s']['median']} s",
        ),
        target(
            "serve: tools add throughput, onnx / torch",
            "reported",
            add["onnx_vs_torch_tools_per_s"],
            None,
            f"chunk by chunk {add['onnx_vs_torch_tools_per_s_paired_median']}; "
            f"{add['onnx']['tools_per_s']} vs {add['torch']['tools_per_s']} tools/s over "
            f"{add['tools']:,} tools; 1,500 tools: {add['onnx']['seconds_per_1500_tools']} s "
            f"vs {add['torch']['seconds_per_1500_tools']} s (the issue: ~90 s)",
        ),
        *(
            target(
                f"serve: HTTP lookup p50, {kind} text",
                "<= library p50 + 2 x livez p50",
                lookup[kind]["http_p50_ms"],
                lookup[kind]["met"],
                f"budget {lookup[kind]['budget_ms']:.3g} ms (library "
                f"{lookup[kind]['library_p50_ms']:.3g} + 2 x {lookup['livez']['p50_ms']:.3g})",
            )
            for kind in ("new", "repeated")
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import dataset_main

    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
