"""The benchmarks' own logic, on synthetic data (the datasets live outside the
repository): the split, the reference matcher of fatal sequences, and the eviction
counts of ``benchmarks.eviction_evidence`` against the library's decision."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.datasets import Corpus, Task, collapse_repeats
from benchmarks.eviction_evidence import THRESHOLDS, evicted_by_threshold
from benchmarks.pollution_world import FatalSequences, report_line, split
from indexes import HashingEmbedder
from sidecar import Sidecar, Tool

SIGNATURES = (
    "HTTP 422 Unprocessable Entity",  # deterministic by the table
    "schema mismatch in the reply",  # unknown: reported as deterministic
    "HTTP 503 Service Unavailable",  # transient: never archived
)


def synthetic(seed: int, tools: int = 60, risky: int = 12, tasks: int = 400) -> Corpus:
    """Tasks over ``tools`` tools; completed chains never use the first ``risky`` ones,
    so those are driven by abandoned chains only, some once and some many times."""
    rng = random.Random(seed)
    catalog = [Tool(f"t{i}", f"tool number {i}") for i in range(tools)]
    out: list[Task] = []
    dead_ends: list[tuple[str, ...]] = []
    for i in range(tasks):
        abandoned = rng.random() < 0.5
        low = 0 if abandoned else risky
        chain = collapse_repeats(
            [f"t{rng.randrange(low, tools)}" for _ in range(rng.randint(1, 4))]
        )
        if abandoned:
            if dead_ends and rng.random() < 0.3:
                # the same chain failing again, with another signature or reason: a
                # distinct report, so a distinct archived chain
                chain = rng.choice(dead_ends)
            dead_ends.append(chain)
            reason = rng.choice(["gave up", "ran out of steps"])
            signature = rng.choice(SIGNATURES)
            task = Task(f"q{i // 2}", f"task {i}", chain, "abandoned", reason, signature)
        else:
            task = Task(f"q{i // 2}", f"task {i}", chain, "completed")
        out.append(task)
    return Corpus("synthetic", catalog, out)


def test_collapse_repeats() -> None:
    assert collapse_repeats(["a", "a", "b", "a", "a"]) == ("a", "b", "a")
    assert collapse_repeats([]) == ()


def test_split_is_deterministic_and_keeps_a_task_id_on_one_side() -> None:
    corpus = synthetic(1)
    history, successors = split(corpus.tasks, 7)
    assert (history, successors) == split(corpus.tasks, 7)
    assert split(corpus.tasks, 8) != (history, successors)
    assert len(history) + len(successors) == len(corpus.tasks)
    assert {t.task_id for t in history}.isdisjoint({t.task_id for t in successors})
    assert len({t.task_id for t in history}) == len({t.task_id for t in corpus.tasks}) // 2


chains = st.lists(st.sampled_from("abcd"), min_size=2, max_size=4).map(tuple)


@given(
    sequences=st.lists(chains, min_size=1, max_size=6),
    plan=st.lists(st.sampled_from("abcd"), max_size=8),
)
def test_fatal_sequences_match_a_brute_force(
    sequences: list[tuple[str, ...]], plan: list[str]
) -> None:
    fatal = FatalSequences(sequences)

    def ends_with(run: list[str]) -> set[tuple[str, ...]]:
        return {s for s in set(sequences) if len(run) >= len(s) and tuple(run[-len(s) :]) == s}

    for end in range(len(plan)):
        found = fatal.completes(plan[:end], plan[end])
        expected = ends_with(plan[: end + 1])
        assert (found in expected) if expected else found is None
    first = next((end for end in range(len(plan)) if ends_with(plan[: end + 1])), None)
    got = fatal.first_in(plan)
    assert (got is None) if first is None else got in ends_with(plan[: first + 1])


@pytest.mark.parametrize("seed", [1, 3, 7])
def test_eviction_evidence_applies_the_librarys_rule(tmp_path: Path, seed: int) -> None:
    corpus = synthetic(seed)
    expected, _viable = evicted_by_threshold(corpus, seed)
    history, _ = split(corpus.tasks, seed)
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        sc.add_tools(corpus.tools)
        sc.report_many([report_line(t, corpus.name) for t in history])
        for n in THRESHOLDS:
            decided = {d.tool_id for d in sc.eviction.decide(n) if d.action == "evict"}
            assert decided == expected[n], n
    # the data tells the thresholds apart
    assert expected[1] > expected[2] > expected[3] != set()


def test_missing_datasets_stop_the_run_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.datasets import SEAL_DIR, SEAL_SPLITS, TOOLBENCH_DIR, missing_files
    from benchmarks.run import main

    assert main(["all", "--dataset", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"the datasets are not under {tmp_path}" in err and "pass --dataset DIR" in err
    assert len(missing_files(tmp_path)) == 1 + 1 + len(SEAL_SPLITS)
    (tmp_path / TOOLBENCH_DIR).mkdir(parents=True)
    (tmp_path / TOOLBENCH_DIR / "G1_instruction.json").write_text("[]")
    (tmp_path / SEAL_DIR).mkdir()
    for name in ("tool.jsonl", *SEAL_SPLITS):
        (tmp_path / SEAL_DIR / name).write_text("")
    assert missing_files(tmp_path) == []


def test_a_missing_bfcl_eval_is_named_with_its_install_command(tmp_path: Path) -> None:
    """The bfcl domain reads its scenarios from the ``bfcl-eval`` package: when it is not
    installed the failures benchmark says so and how to install it, not that the
    datasets are missing."""
    import subprocess
    import sys

    probe = (
        "import sys\nsys.modules['bfcl_eval'] = None\n"
        "from benchmarks.run import main\n"
        f"sys.exit(main(['failures', '--domains', 'bfcl', '--dataset', {str(tmp_path)!r}]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert "the datasets are not under" not in proc.stderr
    assert "bfcl-eval==2026.3.23 is not installed" in proc.stderr
    assert f"{sys.executable} -m pip install --no-deps bfcl-eval==2026.3.23 mpmath" in proc.stderr


def test_embed_benchmark_helpers() -> None:
    import numpy as np

    from benchmarks.bench_embed import _agreement, _top, clustered_vectors, crossover_size

    vectors = clustered_vectors(500, seed=3)
    np.testing.assert_array_equal(vectors, clustered_vectors(500, seed=3))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    queries = clustered_vectors(20, seed=4)
    top = _top(vectors, queries, 5)
    assert all(len(row) == 5 for row in top)
    assert top[0] == set(np.argsort(-(vectors @ queries[0]))[:5].tolist())
    assert _agreement(top, top) == 1.0
    shifted = [{i + 1000 for i in row} for row in top]
    assert _agreement(shifted, top) == 0.0
    speed = {"1000": {"exact_vs_chroma_p50": 0.2}, "10000": {"exact_vs_chroma_p50": 0.6}}
    assert crossover_size(speed) == 10000
    speed["50000"] = {"exact_vs_chroma_p50": 1.4}
    assert crossover_size(speed) == 10000
    assert crossover_size({"1000": {"exact_vs_chroma_p50": 1.1}}) is None


def test_embed_is_a_registered_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.run import ALL_ORDER, MODULES, build_parser, main

    assert "embed" in MODULES and "embed" in ALL_ORDER
    args = build_parser().parse_args(["embed", "--full", "--dataset", str(tmp_path)])
    assert (args.name, args.quick, args.dataset) == ("embed", False, tmp_path)
    assert main(["embed", "--dataset", str(tmp_path)]) == 2  # needs the datasets
    assert "pass --dataset DIR" in capsys.readouterr().err


def test_serve_benchmark_helpers(tmp_path: Path) -> None:
    import json

    from benchmarks.bench_serve import chunks, distinct_queries, http_budget
    from benchmarks.harness.services import read_server_url
    from benchmarks.serve_process import rotated
    from indexes.query_cache import query_key

    # each variant goes first equally often, and every round runs each once
    rounds = [rotated(("a", "b", "c"), i) for i in range(6)]
    assert [r[0] for r in rounds] == ["a", "b", "c", "a", "b", "c"]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)
    # chunks cover the items once, in order, with sizes within one of each other
    for n, count in ((10, 3), (1_500, 5), (7, 10), (1, 1)):
        parts = chunks(list(range(n)), count)
        assert [x for p in parts for x in p] == list(range(n))
        assert all(parts) and max(map(len, parts)) - min(map(len, parts)) <= 1
    # new query texts never share a cache key with each other or with what is taken
    taken = ("Search Weather", "stock  price")
    texts = distinct_queries(500, random.Random(3), taken)
    keys = [query_key(q) for q in texts]
    assert len(set(keys)) == 500 and not set(keys) & {query_key(q) for q in taken}
    assert texts == distinct_queries(500, random.Random(3), taken)
    assert http_budget(4.0, 0.5) == 5.0
    # server.json counts only when the process it names is the one started
    assert read_server_url(tmp_path, 123) is None
    (tmp_path / "server.json").write_text(json.dumps({"url": "http://x:1", "pid": 123}))
    assert read_server_url(tmp_path, 123) == "http://x:1"
    assert read_server_url(tmp_path, 456) is None
    (tmp_path / "server.json").write_text("{torn")
    assert read_server_url(tmp_path, 123) is None


def test_serve_is_a_registered_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.run import ALL_ORDER, MODULES, build_parser, main

    assert "serve" in MODULES and ALL_ORDER.index("serve") == ALL_ORDER.index("embed") + 1
    args = build_parser().parse_args(["serve", "--full", "--dataset", str(tmp_path)])
    assert (args.name, args.quick, args.dataset) == ("serve", False, tmp_path)
    assert main(["serve", "--dataset", str(tmp_path)]) == 2  # needs the datasets
    assert "pass --dataset DIR" in capsys.readouterr().err


def test_serve_reads_the_servers_request_log() -> None:
    import json

    from benchmarks.serve_process import server_times

    def line(path: str, ms: float) -> str:
        return json.dumps({"event": "request", "method": "GET", "path": path, "ms": ms})

    log = "\n".join(
        [
            "opening the sidecar home /tmp/h",
            line("/readyz", 9.0),  # before the calls: ignored
            line("/v1/search", 4.0),
            line("/livez", 0.3),
            line("/v1/search", 1.0),
            "not json",
        ]
    )
    assert server_times(log, ["new", "livez", "repeated"]) == {
        "new": [4.0],
        "repeated": [1.0],
        "livez": [0.3],
    }
    assert server_times(log, ["livez", "new", "repeated"]) is None  # out of line
    assert server_times(log, ["new"] * 5) is None  # a line is missing


def test_gateway_is_a_registered_benchmark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.bench_gateway import markdown
    from benchmarks.run import ALL_ORDER, MODULES, build_parser, main

    assert "gateway" in MODULES and "gateway" in ALL_ORDER
    args = build_parser().parse_args(["gateway", "--full", "--dataset", str(tmp_path)])
    assert (args.name, args.quick, args.dataset) == ("gateway", False, tmp_path)
    assert main(["gateway", "--dataset", str(tmp_path)]) == 2  # the catalogs are needed
    assert "pass --dataset DIR" in capsys.readouterr().err

    def latency(p50: float) -> dict[str, float]:
        return {"n": 3, "p50_ms": p50, "p99_ms": p50 * 2, "mean_ms": p50}

    overhead = {
        t: {"latency": {"direct": latency(6.0), "gateway": latency(7.5)}} for t in ("http", "stdio")
    }
    otlp = {
        k: {
            "spans_per_s": 1000,
            "share": {"decode": 0.5, "assemble": 0.3, "report": 0.2},
            "baseline_parse": "json.loads",
            "baseline_parse_spans_per_s": 9000,
        }
        for k in ("protobuf", "json")
    }
    page = markdown(
        {
            "targets": [
                {"target": "gateway (http)", "goal": "<= 1.3x", "measured": 1.25, "met": True}
            ],
            "overhead": overhead,
            "otlp": {"spans": 100, **otlp},
        }
    )
    assert "| gateway | 7.5 | 15 | 7.5 | 1.25 |" in page
    assert "| gateway (http) | <= 1.3x | 1.25 | met |" in page


def test_every_library_name_a_benchmark_imports_exists() -> None:
    # benchmarks import the library inside functions (to keep `benchmarks.run` light),
    # so a renamed or moved name would only fail minutes into a run
    import ast
    import importlib

    root = Path(__file__).resolve().parents[2] / "benchmarks"
    missing = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            if node.module.split(".")[0] not in ("sidecar", "indexes", "cold_store"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
    assert not missing


@pytest.mark.integration
def test_the_delta_benchmark_measures_every_store_at_every_step() -> None:
    from benchmarks.bench_delta import STORES, markdown, measure
    from benchmarks.run import ALL_ORDER, MODULES

    assert "delta" in MODULES and "delta" in ALL_ORDER
    result = measure(2_000, 250, [1_000, 2_000], 5, 4, seed=3)

    assert [p["chains"] for p in result["points"]] == [1_000, 2_000]
    end = result["points"][-1]
    # maintained every 4 appends: one merged file; never maintained: one per append
    assert end["files"]["delta"] == end["files"]["s3"] == 1
    assert end["files"]["delta_unmaintained"] == 8
    assert [m["chains"] for m in result["maintenance"]["delta"]] == [1_000, 2_000]
    assert all(end["resolve"][name]["n"] == 5 for name in STORES)
    result["targets"] = []
    assert "## Delta cold store" in markdown(result)
