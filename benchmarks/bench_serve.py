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
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from benchmarks.common import DEFAULT_DATASETS, REPO_ROOT, model_embedder, open_sidecar
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.services import read_server_url, sidecar_argv
from benchmarks.harness.timing import interleaved, ratio, summary

if TYPE_CHECKING:
    from sidecar import Tool

T = TypeVar("T")

VARIANTS = ("onnx", "torch")
READY_VARIANTS = (*VARIANTS, "hashing")
SERVER_EMBEDDER = {"onnx": "minilm", "torch": "minilm-torch", "hashing": "hashing"}
"""``SIDECAR_EMBEDDER`` of each variant: the default path, the torch reference, and the
hashing stand-in (no model at all: the floor of a server's start)."""
K = 10
PREFIX = ("tool_0", "tool_1")
LOOKUP_TOOLS = 10_000
CONSTRAINTS = 100
READY_TARGET_S = 3.0
ISSUE_TOOLS = 1_500
ISSUE_SECONDS = 90.0
"""The issue: today's ``tools add`` of 1,500 tools takes about 90 s."""
WARMUP = 5
"""Untimed rounds of the lookup round robin (the first loads the exact tier)."""
POLL_S = 0.01
START_TIMEOUT_S = 180.0
FIRST_QUERY = "extract prices from the page text"
REPEATED = "find the weather forecast for a city"
CHECK_QUERIES = (REPEATED, "convert currency amounts", "send an invoice email")
"""Asked of both sides before the timing: the library and the server must agree."""
WORDS = tuple(
    "search parse extract weather stock email calendar file image audio translate "  # noqa: SIM905
    "summarize convert route map price currency database query chart code review news "
    "flight hotel recipe product invoice payment ticket user account report".split()
)


# ---- pure helpers ---------------------------------------------------------------------
def rotated(names: Sequence[str], round_no: int) -> list[str]:
    """``names`` starting at ``round_no`` modulo their count: each goes first as often."""
    shift = round_no % len(names)
    return [*names[shift:], *names[:shift]]


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


HTTP_PATHS = {"new": "/v1/search", "repeated": "/v1/search", "livez": "/livez"}


def server_times(log_text: str, calls: Sequence[str]) -> dict[str, list[float]] | None:
    """The server's own time (its request log's ``ms``: from the request reaching the
    app to the response leaving it) of each of ``calls`` (``new``, ``repeated`` or
    ``livez``, in the order they were made, and the last requests the server logged),
    by kind; ``None`` when the log does not line up with the calls (a dropped line)."""
    import json

    logged: list[tuple[str, float]] = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "request":
            logged.append((str(entry.get("path")), float(entry["ms"])))
    if len(logged) < len(calls):
        return None
    out: dict[str, list[float]] = {kind: [] for kind in HTTP_PATHS}
    for kind, (path, ms) in zip(calls, logged[len(logged) - len(calls) :], strict=True):
        if path != HTTP_PATHS[kind]:
            return None
        out[kind].append(ms)
    return out


def medians(samples: Sequence[Mapping[str, float]], key: str) -> dict[str, float]:
    values = [s[key] for s in samples]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


# ---- a server process -----------------------------------------------------------------
def server_env(home: Path, embedder: str, cache: Path) -> dict[str, str]:
    """This environment without any ``SIDECAR_*`` variable, the repository first on the
    path, then the home, the embedder and the model cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {
        "PYTHONPATH": str(REPO_ROOT),
        "SIDECAR_HOME": str(home),
        "SIDECAR_EMBEDDER": embedder,
        "SIDECAR_MODEL_CACHE": str(cache),
    }
    return env


class ServerProcess:
    """``sidecar serve --port 0`` on ``home``; times are seconds from its start."""

    def __init__(self, home: Path, env: Mapping[str, str], log: Path) -> None:
        (home / "server.json").unlink(missing_ok=True)
        self.home = home
        self.log = log
        # a file, not a pipe: nobody reads a pipe while the server runs
        self._log = log.open("ab")
        self.url = ""
        self.headers: dict[str, str] = {}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [*sidecar_argv(), "serve", "--port", "0"],
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"sidecar serve exited with {code}:\n{tail}")
        if self.elapsed() > START_TIMEOUT_S:
            raise TimeoutError(f"sidecar serve not ready after {START_TIMEOUT_S} s")

    def wait_url(self) -> float:
        """Until the server names its URL in ``server.json`` (after its warm-up)."""
        while True:
            url = read_server_url(self.home, self.proc.pid)
            if url is not None:
                break
            self._alive()
            time.sleep(POLL_S)
        at = self.elapsed()
        self.url = url
        token = (self.home / "token").read_text().strip()
        self.headers = {"Authorization": f"Bearer {token}"}
        return at

    def wait_ready(self) -> tuple[float, int]:
        """Until ``GET /readyz`` answers 200; with how many answers said not ready."""
        import httpx

        not_ready = 0
        while True:
            try:
                answer = httpx.get(f"{self.url}/readyz", headers=self.headers, timeout=30)
                if answer.status_code == 200:
                    return self.elapsed(), not_ready
                not_ready += 1
            except httpx.HTTPError:
                pass
            self._alive()
            time.sleep(POLL_S)

    def first_search(self) -> tuple[float, int]:
        """One ``POST /v1/search``; when it answered, and how many hits."""
        import httpx

        answer = httpx.post(
            f"{self.url}/v1/search",
            json={"query": FIRST_QUERY, "k": 5},
            headers=self.headers,
            timeout=120,
        )
        answer.raise_for_status()
        return self.elapsed(), len(answer.json()["hits"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


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

    from sidecar import Sidecar
    from sidecar.settings import Settings

    count = WARMUP + repeat
    lib_texts, http_texts = texts[:count], texts[count : 2 * count]
    body = {"k": K, "after": list(PREFIX)}
    with contextlib.ExitStack() as stack:
        if blas_threads is not None:
            from threadpoolctl import threadpool_limits

            stack.enter_context(threadpool_limits(limits=blas_threads, user_api="blas"))
        # the library as the server runs it: settings without SIDECAR_* variables, the
        # embedder from make_embedder (ONNX, int8 queries, the query cache)
        sc = stack.enter_context(Sidecar(Settings.load(env={}, home=lib_home, model_cache=cache)))
        started = time.perf_counter()
        sc.warm_up()
        lib_warm_s = time.perf_counter() - started
        log = http_home.parent / f"lookup-server-{blas_threads or 'default'}.log"
        env = server_env(http_home, SERVER_EMBEDDER["onnx"], cache)
        if blas_threads is not None:
            env["OPENBLAS_NUM_THREADS"] = str(blas_threads)
        server = stack.enter_context(ServerProcess(http_home, env, log))
        server.wait_url()
        server_ready_s, _ = server.wait_ready()
        client = stack.enter_context(
            httpx.Client(base_url=server.url, headers=server.headers, timeout=60)
        )
        calls: list[str] = []  # the HTTP requests of the round robin, in order

        def over_http(query: str) -> list[str]:
            answer = client.post("/v1/search", json={"query": query, **body})
            answer.raise_for_status()
            return [h["tool_id"] for h in answer.json()["hits"]]

        def in_process(query: str) -> list[str]:
            return [h.tool_id for h in sc.search(query, k=K, after=PREFIX).hits]

        def http_new(query: str) -> list[str]:
            calls.append("new")
            return over_http(query)

        def http_repeated() -> list[str]:
            calls.append("repeated")
            return over_http(REPEATED)

        def livez() -> None:
            calls.append("livez")
            client.get("/livez").raise_for_status()

        agree = [in_process(q) == over_http(q) for q in CHECK_QUERIES]
        withheld = len(sc.search(REPEATED, k=K, after=PREFIX).withheld)
        blocked = {f"tool_{2 + i}" for i in range(CONSTRAINTS)}
        leaked = sum(len(blocked & set(in_process(q))) for q in CHECK_QUERIES)
        embedder = sc.embedder
        before = (getattr(embedder, "hits", 0), getattr(embedder, "misses", 0))
        samples = interleaved(
            {
                "library_new": _each(in_process, lib_texts),
                "http_new": _each(http_new, http_texts),
                "library_repeated": lambda: in_process(REPEATED),
                "http_repeated": http_repeated,
                "livez": livez,
            },
            repeat,
            warmup=WARMUP,
        )
        cache_counts = {
            "hits": getattr(embedder, "hits", 0) - before[0],
            "misses": getattr(embedder, "misses", 0) - before[1],
        }
    # the server has stopped: its log is complete.  The first WARMUP rounds are untimed.
    logged = server_times(log.read_text(errors="replace"), calls)
    server_app = (
        {kind: summary(ms[WARMUP:]) for kind, ms in logged.items()} if logged is not None else None
    )
    stats = {name: summary(v) for name, v in samples.items()}
    livez_p50 = stats["livez"]["p50_ms"]
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
    for kind in ("new", "repeated"):
        lib, http = stats[f"library_{kind}"]["p50_ms"], stats[f"http_{kind}"]["p50_ms"]
        budget = http_budget(lib, livez_p50)
        out[kind] = {
            "library_p50_ms": lib,
            "http_p50_ms": http,
            "budget_ms": round(budget, 4),
            "http_minus_library_ms": round(http - lib, 4),
            "http_minus_library_in_livez": ratio(http - lib, livez_p50, 2),
            "http_vs_library_p50": ratio(http, lib),
            "server_app_p50_ms": server_app[kind]["p50_ms"] if server_app else None,
            "met": http <= budget,
        }
    return out


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
    onnx_ready = ready["onnx"]["ready_s"]["median"]
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
        "targets": [
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
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def markdown(result: dict[str, Any]) -> str:
    r, a, lk = result["ready"], result["add"], result["lookup"]
    ready_rows = [
        [
            f"{v} (`SIDECAR_EMBEDDER={r[v]['embedder_setting']}`)",
            r[v]["ready_s"]["median"],
            r[v]["ready_s"]["min"],
            r[v]["ready_s"]["max"],
            r[v]["url_s"]["median"],
            r[v]["first_search_s"]["median"],
            r[v]["first_search_after_ready_ms"]["median"],
            r[v]["not_ready_answers"],
        ]
        for v in READY_VARIANTS
    ]
    add_rows = [
        [
            v,
            a[v]["model_load_s"],
            a[v]["seconds"],
            a[v]["tools_per_s"],
            a[v]["seconds_per_1500_tools"],
            a[v]["cores_used"],
            ", ".join(f"{x:g}" for x in a[v]["chunk_tools_per_s"]),
        ]
        for v in VARIANTS
    ]
    names = ("library_new", "http_new", "library_repeated", "http_repeated", "livez")
    lookup_rows = [[n, lk[n]["p50_ms"], lk[n]["p99_ms"], lk[n]["mean_ms"]] for n in names]
    budget_rows = [
        [
            kind,
            lk[kind]["library_p50_ms"],
            lk[kind]["http_p50_ms"],
            lk[kind]["server_app_p50_ms"] if lk[kind]["server_app_p50_ms"] is not None else "-",
            lk[kind]["http_minus_library_ms"],
            lk[kind]["http_minus_library_in_livez"],
            lk[kind]["budget_ms"],
            "met" if lk[kind]["met"] else "**missed**",
        ]
        for kind in ("new", "repeated")
    ]
    s = result["setup_s"]
    return "\n".join(
        [
            "## Serving with the default model path against torch",
            "",
            f"ONNX files built into a fresh cache in {s['onnx_files_built']} s; demo home "
            f"(62 tools) in {s['demo_home']} s.",
            "",
            f"### Ready time: `sidecar serve --port 0` to the first `/readyz` 200 (s, "
            f"{r['runs']} starts each, alternating)",
            "",
            md_table(
                [
                    "embedder",
                    "ready median",
                    "min",
                    "max",
                    "URL announced",
                    "first search answered",
                    "first search after ready, ms",
                    "/readyz not-ready answers",
                ],
                ready_rows,
            ),
            "",
            f"onnx / torch: ready {r['onnx_vs_torch_ready']}, first search "
            f"{r['onnx_vs_torch_first_search']}.  Over the hashing floor (no model): onnx "
            f"+{r['model_share_s']['onnx']} s, torch +{r['model_share_s']['torch']} s.",
            "",
            f"### tools add: {a['tools']:,} tools ({result['params']['add_catalog']}), "
            f"{a['chunks']} chunks, alternating",
            "",
            md_table(
                [
                    "embedder",
                    "model load s",
                    "add s",
                    "tools/s",
                    "s per 1,500 tools",
                    "cores used",
                    "tools/s per chunk",
                ],
                add_rows,
            ),
            "",
            f"onnx / torch: tools/s {a['onnx_vs_torch_tools_per_s']} (chunk by chunk, median "
            f"{a['onnx_vs_torch_tools_per_s_paired_median']}), time "
            f"{a['onnx_vs_torch_seconds']}; {a['document_tokens_mean']} tokens per document "
            "on average.  Cores used: CPU seconds of this process, every thread, per second.",
            "",
            f"### Lookup at {lk['tools']:,} tools, {lk['constraints']} active constraints, "
            f"k = {lk['k']} (ms, {lk['rounds']} rounds)",
            "",
            md_table(["path", "p50", "p99", "mean"], lookup_rows),
            "",
            md_table(
                [
                    "query text",
                    "library p50",
                    "HTTP p50",
                    "server app p50",
                    "HTTP - library",
                    "in livez p50s",
                    "budget",
                    "verdict",
                ],
                budget_rows,
            ),
            "",
            (
                f"`/livez` inside the server's app: p50 {lk['server_app']['livez']['p50_ms']} ms "
                "(server app: the server's request log, from the request reaching the app to "
                "its response leaving it)."
                if lk["server_app"]
                else "The server's request log did not line up with the requests."
            ),
            "",
            *_blas_lines(lk),
            f"Library and server agree on the hits: {lk['library_and_http_agree']}; "
            f"{lk['withheld_per_lookup']} withheld per lookup, {lk['blocked_tools_in_hits']} "
            f"blocked tools among hits; the library's query cache during the timing: "
            f"{lk['library_query_cache_during_timing']['hits']} hits, "
            f"{lk['library_query_cache_during_timing']['misses']} misses.",
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def _blas_lines(lk: Mapping[str, Any]) -> list[str]:
    one = lk.get("blas_one_thread")
    if not one:
        return []
    rows = [
        [
            kind,
            lk[kind]["library_p50_ms"],
            one[kind]["library_p50_ms"],
            lk[kind]["http_p50_ms"],
            one[kind]["http_p50_ms"],
            lk[kind]["server_app_p50_ms"] if lk[kind]["server_app_p50_ms"] is not None else "-",
            one[kind]["server_app_p50_ms"] if one[kind]["server_app_p50_ms"] is not None else "-",
            "met" if one[kind]["met"] else "**missed**",
        ]
        for kind in ("new", "repeated")
    ]
    rows.append(["livez", "", "", lk["livez"]["p50_ms"], one["livez"]["p50_ms"], "", "", ""])
    return [
        "Diagnostic, run after the main round robin: numpy's BLAS on one thread in both "
        "processes (`threadpoolctl` here, `OPENBLAS_NUM_THREADS=1` for the server), new "
        "texts, a new server; p50 ms:",
        "",
        md_table(
            [
                "query text",
                "library, default",
                "library, BLAS 1",
                "HTTP, default",
                "HTTP, BLAS 1",
                "server app, default",
                "server app, BLAS 1",
                "budget, BLAS 1",
            ],
            rows,
        ),
        "",
    ]


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    r, a, lk = result["ready"], result["add"], result["lookup"]
    ax = axes[0]
    ax.bar(list(READY_VARIANTS), [r[v]["ready_s"]["median"] for v in READY_VARIANTS])
    ax.axhline(READY_TARGET_S, color="grey", linestyle="--", label="target (onnx)")
    ax.set_ylabel("s, start to /readyz 200 (median)")
    ax.set_title("Server ready")
    ax.legend(loc="upper left")
    ax = axes[1]
    ax.bar(list(VARIANTS), [a[v]["tools_per_s"] for v in VARIANTS])
    ax.set_ylabel("tools / s")
    ax.set_title(f"tools add ({a['tools']:,} tools)")
    ax = axes[2]
    names = ("library_new", "http_new", "library_repeated", "http_repeated", "livez")
    ax.bar(
        [n.replace("_", "\n") for n in names],
        [lk[n]["p50_ms"] for n in names],
    )
    ax.set_ylabel("p50 ms")
    ax.set_title(f"Lookup, {lk['tools']:,} tools")
    ax.tick_params(axis="x", labelsize=8)
    return [save_figure(plt, fig, out_dir / "serve.png")]


def main(argv: list[str] | None = None) -> None:
    from benchmarks.common import dataset_main

    dataset_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
