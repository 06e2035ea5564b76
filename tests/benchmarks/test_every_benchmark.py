"""Every benchmark of ``python -m benchmarks.run`` runs to its end, page and plot
included, at its smallest size: what ``make bench`` runs, so that no benchmark's own
check (an assertion on what the library answers) can stop it unseen.

Each benchmark runs in this process through :func:`benchmarks.run.run_one`, in quick
mode, with its sizes made smaller where it reads them from one place (the parts' own
functions wrapped with smaller arguments): the code path is the quick one, only the
counts differ.  Nothing here asserts a figure or a timing; a benchmark that raises, or
writes no JSON or page, fails.  The benchmarks that need the real model, servers in
other processes or the shared datasets carry the suite's ``model`` / ``integration``
markers (``make test-fast`` leaves them out)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import pytest

from benchmarks.common import DEFAULT_DATASETS
from benchmarks.run import MODULES, build_parser, run_one

Patch = Callable[[pytest.MonkeyPatch, Path], list[str]]
"""Makes a benchmark small; returns the extra command-line words it runs with."""


def smaller(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, **fixed: Any) -> None:
    """Wrap ``module.name`` so that the keyword arguments in ``fixed`` (by position in
    its signature, as the benchmark passes them) are replaced."""
    import inspect

    original = getattr(module, name)
    params = list(inspect.signature(original).parameters)

    @wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(params, args, strict=False)) | kwargs
        return original(**(bound | fixed))

    monkeypatch.setattr(module, name, call)


def startup(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_startup as m

    mp.setattr(m, "INDEX_TOOLS", 200)
    smaller(mp, m, "startup", repeat=2)
    return []


def check(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_check as m

    mp.setattr(m, "QUICK_SIZES", (1_000, 2_000))
    smaller(mp, m, "measure", reps=3)
    return []


def state(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_state as m

    smaller(mp, m, "_median_tx_ms", repeat=5)
    smaller(mp, m, "_concurrent", rounds=3)
    # the check must block what it learned, as in the quick size: its reports are kept
    smaller(mp, m, "_library", checks=5)
    return []


def failures(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from tests.support.datasets import tau2_file

    tau2_file(tmp)
    return ["--dataset", str(tmp), "--domains", "retail"]


def store(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_store as m

    smaller(mp, m, "measure", chains=2_000, batch=500, lookups=10)
    return []


def delta(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_delta as m

    smaller(mp, m, "measure", chains=1_000, batch=500, steps=[500, 1_000], lookups=5,
            maintain_every=2)  # fmt: skip
    return []


def lookup(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_lookup as m

    mp.setattr(m, "QUICK_SIZES", (300,))
    smaller(mp, m, "constrained_part", repeat=3)
    smaller(mp, m, "model_part", repeat=3)
    return []


def evict(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_evict as m

    mp.setattr(m, "QUICK", (100, (100, 200)))
    return []


def first_of(load: Callable[..., Any], tools: int, tasks: int) -> Callable[..., Any]:
    """``load`` with its corpus cut to its first ``tools`` tools and ``tasks`` tasks."""

    @wraps(load)
    def cut(*args: Any, **kwargs: Any) -> Any:
        from dataclasses import replace

        corpus = load(*args, **kwargs)
        return replace(corpus, tools=corpus.tools[:tools], tasks=corpus.tasks[:tasks])

    return cut


def embed(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_embed as m
    from benchmarks import datasets

    # the quality part embeds whole catalogs three ways (torch too): a slice of each
    for name in ("toolbench", "seal_tools"):
        mp.setattr(datasets, name, first_of(getattr(datasets, name), 400, 120))
    mp.setattr(m, "LOOKUP_TOOLS", 500)
    mp.setattr(m, "QUICK_SIZES", (500,))
    smaller(mp, m, "startup_part", runs=1)
    # the timed parts keep their repeats: each times one query per call of a sample
    # drawn for the quick size
    return ["--dataset", str(DEFAULT_DATASETS)]


def serve(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_serve as m

    mp.setattr(m, "LOOKUP_TOOLS", 500)
    smaller(mp, m, "add_part", parts=2)
    smaller(mp, m, "lookup_part", repeat=3)
    smaller(mp, m, "ready_part", runs=1)  # one start of each server, not three
    mp.setattr(m, "ISSUE_TOOLS", 200)  # tools add of a sample, by ONNX and by torch
    return ["--dataset", str(DEFAULT_DATASETS)]


def gateway(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_gateway as m

    smaller(mp, m, "overhead", calls=10)
    smaller(mp, m, "schema_tokens", queries=2)
    smaller(mp, m, "isolation", calls=80, phases=2)
    smaller(mp, m, "otlp_throughput", bodies=1, traces_per_body=5)
    return ["--dataset", str(DEFAULT_DATASETS)]


def shrunk(load: Callable[..., Any], queries: int = 40, others: int = 150) -> Callable[..., Any]:
    """A retrieval protocol's loader cut to its first ``queries`` queries (and as many
    training requests), the tools they need and ``others`` more."""

    @wraps(load)
    def cut(*args: Any, **kwargs: Any) -> Any:
        from dataclasses import replace

        p = load(*args, **kwargs)
        kept_queries, train = p.queries[:queries], p.train[:queries]
        needed = {t for q in [*kept_queries, *train] for t in q.relevant}
        rows = [i for i, rid in enumerate(p.ids) if rid in needed or i < others]
        return replace(
            p,
            ids=[p.ids[i] for i in rows],
            texts=[p.texts[i] for i in rows],
            queries=kept_queries,
            train=train,
            tools=[p.tools[i] for i in rows] if p.tools else [],
            lexical=[p.lexical[i] for i in rows] if p.lexical else [],
        )

    return cut


def retrieval(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_retrieval as m
    from benchmarks.retrieval_plans import USAGE_PROTOCOLS, UsagePlan

    # catalogs of a few hundred tools: what costs minutes is embedding whole catalogs
    original = m.loaders
    mp.setattr(m, "loaders", lambda: {n: shrunk(f) for n, f in original().items()})

    mp.setattr(m, "QUICK_QUERIES", 10)
    mp.setattr(m, "LATENCY_QUICK", 3)
    # the usage protocol at a tiny size: one catalog, two points, small usage for the cost
    tiny = UsagePlan(USAGE_PROTOCOLS[:1], 10, (0, None), (100, 300), 3, "apibench_torchhub")
    mp.setattr(m, "PLANS", {"quick": tiny})
    return ["--dataset", str(DEFAULT_DATASETS)]


def otlp(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_otlp as m

    mp.setattr(m, "QUICK", (10, 1))
    return []


def bounds(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_bounds as m

    mp.setattr(m, "QUICK", m.Sizes(2, 20, 100, 100, 3, 4096))
    return []


def console(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_console as m

    mp.setattr(m, "BASELINE", m.Sizes(3, 20, 20, 0))
    mp.setattr(m, "QUICK", m.Sizes(120, 300, 300, 1))
    return []


def stated(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import stated_cost as m

    mp.setattr(m, "QUICK", m.Sizes((10, 40), 10, 2, 1, (4, 6), 1, 6))
    return []


def pollution(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_pollution as m

    mp.setattr(m, "QUICK_SEAL", {"max_tasks": 60, "max_tools": 200})
    return ["--dataset", str(DEFAULT_DATASETS)]


def soak(mp: pytest.MonkeyPatch, tmp: Path) -> list[str]:
    from benchmarks import bench_soak as m

    mp.setattr(m, "plan", lambda quick, minutes: m.Plan(0.75, 0.25, 5.0))
    return []


model = pytest.mark.model
servers = pytest.mark.integration
slow = pytest.mark.slow
data = pytest.mark.skipif(
    not DEFAULT_DATASETS.is_dir(), reason=f"the shared datasets are not at {DEFAULT_DATASETS}"
)
CASES: dict[str, tuple[Patch, tuple[Any, ...]]] = {
    "startup": (startup, (servers,)),
    "check": (check, (slow,)),
    "state": (state, (servers,)),
    "failures": (failures, (slow,)),
    "store": (store, (slow,)),
    "delta": (delta, (slow,)),
    "lookup": (lookup, (model,)),
    "evict": (evict, (slow,)),
    "embed": (embed, (model, data)),
    "serve": (serve, (model, servers, data)),
    "gateway": (gateway, (model, servers, data)),
    "retrieval": (retrieval, (model, data)),
    "otlp": (otlp, (servers,)),
    "bounds": (bounds, (servers,)),
    "console": (console, ()),
    "stated": (stated, ()),
    "pollution": (pollution, (model, data)),
    "soak": (soak, (model, servers)),
}
COVERED_ELSEWHERE = {
    "shared": ("tests.benchmarks.test_shared_bench", "test_a_tiny_run_has_every_row"),
    "fleet": ("tests.benchmarks.test_fleet_bench", "test_a_tiny_fleet_loses_nothing"),
}
"""Benchmarks whose whole run another test makes at a tiny size: ``shared``'s and
``fleet``'s ``run`` is ``measure`` at the quick sizes, and those tests run ``measure``,
the page and the plot (several servers start: minutes on a busy machine, not to be paid
twice)."""


def test_every_benchmark_has_a_case() -> None:
    import importlib

    assert set(CASES) | set(COVERED_ELSEWHERE) == set(MODULES)
    assert not set(CASES) & set(COVERED_ELSEWHERE)
    for module, test in COVERED_ELSEWHERE.values():
        assert callable(getattr(importlib.import_module(module), test))


@pytest.mark.parametrize("name", [pytest.param(n, marks=marks) for n, (_, marks) in CASES.items()])
def test_the_benchmark_runs_to_its_end(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results"
    words = [name, "--quick", "--out-dir", str(out), *CASES[name][0](monkeypatch, tmp_path)]
    args = build_parser().parse_args(words)
    result = run_one(name, args, words)
    written = json.loads((out / f"{name}.json").read_text())
    assert written["mode"] == "quick" and written["command"] == result["command"]
    assert (out / f"{name}.md").read_text().startswith(f"# Benchmark: {name}")
    assert {t["met"] for t in result.get("targets", [])} <= {True, False, None}
