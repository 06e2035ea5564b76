"""Question: how long does ``sidecar --help`` take to start, and how much memory does a
process hold once it serves lookups over a 10k-tool index, both against a bare
``python -c pass``?

Start-up: ``sidecar --help`` and ``python -c pass`` run as subprocesses, interleaved,
median of several.  Memory: a 10k-tool index is built once in a temporary home (hashing
vectors stored under the model's name, so that the real model can open it; the values
of the vectors do not change the memory), then fresh processes report their resident
set (``VmRSS``, and the peak ``VmHWM``) from ``/proc/self/status``: a bare interpreter,
one that imported the CLI, one that opened the home and answered a lookup with the
stand-in embedder (index only), and one that answered it with all-MiniLM-L6-v2 on the
default onnxruntime path (what a deployment holds).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import open_sidecar, quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import (
    REPO_ROOT,
    machine,
    md_table,
    md_targets,
    pyplot,
    save_figure,
    target,
)
from benchmarks.harness.timing import ratio

INDEX_TOOLS = 10_000
QUERY = "what's the weather in Lisbon"
MODES = ("bare_python", "cli_import", "index_lookup", "index_lookup_with_model")


def _stand_in() -> Any:
    """Hashing vectors under the model's name and dimension."""
    from indexes import HashingEmbedder
    from indexes.embedder import MINILM_DIM, MINILM_NAME

    class StandIn(HashingEmbedder):
        @property
        def name(self) -> str:
            return MINILM_NAME

    return StandIn(MINILM_DIM)


def _status() -> dict[str, float]:
    fields: dict[str, float] = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024.0  # kB -> MiB
    return {"rss_mib": round(fields["VmRSS"], 1), "peak_mib": round(fields["VmHWM"], 1)}


def child(mode: str, home: str) -> None:
    """Runs in the measured process; prints one JSON line."""
    hits = 0
    if mode == "cli_import":
        import sidecar.shells.cli  # noqa: F401
    elif mode in ("index_lookup", "index_lookup_with_model"):
        if mode == "index_lookup":
            embedder = _stand_in()
        else:
            from benchmarks.common import model_embedder

            embedder = model_embedder("onnx")  # the sidecar's default model path
        with open_sidecar(Path(home), embedder) as sc:
            hits = len(sc.search(QUERY, k=5).hits)
            print(json.dumps({**_status(), "hits": hits, "tools": sc.index.count()}))
            return
    print(json.dumps({**_status(), "hits": hits}))


def _python() -> str:
    return sys.executable


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def measure_process(mode: str, home: Path) -> dict[str, Any]:
    if mode == "bare_python":
        code = (
            "from pathlib import Path; import json; s={l.split(':')[0]: int(l.split()[1])/1024 "
            "for l in Path('/proc/self/status').read_text().splitlines() "
            "if l.startswith(('VmRSS', 'VmHWM'))}; "
            "print(json.dumps({'rss_mib': round(s['VmRSS'], 1), "
            "'peak_mib': round(s['VmHWM'], 1), 'hits': 0}))"
        )
        argv = [_python(), "-c", code]
    else:
        code = "import sys; from benchmarks.bench_startup import child; child(*sys.argv[1:])"
        argv = [_python(), "-c", code, mode, str(home)]
    t0 = time.perf_counter()
    out = subprocess.run(
        argv, capture_output=True, text=True, check=True, env=_env(), cwd=str(REPO_ROOT)
    )
    wall = time.perf_counter() - t0
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(wall, 2)
    return result


def sidecar_argv() -> list[str]:
    script = Path(sys.executable).parent / "sidecar"
    return [str(script), "--help"] if script.exists() else [_python(), "-m", "sidecar.shells.cli"]


def startup(repeat: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"sidecar_help": [], "python_pass": []}
    commands = {"sidecar_help": sidecar_argv(), "python_pass": [_python(), "-c", "pass"]}
    for _ in range(2):  # warm the page cache for both
        for argv in commands.values():
            subprocess.run(argv, capture_output=True, check=True, env=_env())
    for i in range(repeat):
        order = list(commands) if i % 2 == 0 else list(reversed(commands))
        for name in order:
            t0 = time.perf_counter()
            subprocess.run(commands[name], capture_output=True, check=True, env=_env())
            runs[name].append((time.perf_counter() - t0) * 1000.0)
    med = {name: round(statistics.median(v), 1) for name, v in runs.items()}
    return {
        "command": " ".join(
            Path(a).name if i == 0 else a for i, a in enumerate(commands["sidecar_help"])
        ),
        "runs": repeat,
        "median_ms": med,
        "min_ms": {name: round(min(v), 1) for name, v in runs.items()},
        "ratio_vs_python_pass": ratio(med["sidecar_help"], med["python_pass"], 2),
    }


def build_index(home: Path) -> float:
    from sidecar import Tool

    tools = [
        Tool(f"tool_{i}", f"synthetic tool {i}: fetch, parse and report item {i % 97}")
        for i in range(INDEX_TOOLS)
    ]
    t0 = time.perf_counter()
    with open_sidecar(home, _stand_in()) as sc:
        sc.add_tools(tools)
    return time.perf_counter() - t0


def run(quick: bool, seed: int = 7) -> dict[str, Any]:
    del seed  # nothing random here
    started = time.perf_counter()
    progress("startup: sidecar --help vs python -c pass")
    start = startup(7 if quick else 15)
    memory: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        home = Path(tmp)
        progress(f"startup: building a {INDEX_TOOLS:,}-tool index")
        build_s = build_index(home)
        for mode in MODES:
            progress(f"startup: resident memory, {mode}")
            samples = [measure_process(mode, home) for _ in range(1 if quick else 3)]
            best = sorted(samples, key=lambda s: s["rss_mib"])[len(samples) // 2]
            memory[mode] = best
    base = memory["bare_python"]["rss_mib"]
    for mode in MODES:
        memory[mode]["rss_ratio_vs_bare_python"] = ratio(memory[mode]["rss_mib"], base, 2)
    return {
        "benchmark": "startup",
        "question": "sidecar --help start-up time and lookup-process memory vs bare Python",
        "machine": machine(),
        "params": {"index_tools": INDEX_TOOLS, "index_build_s": round(build_s, 1)},
        "startup": start,
        "memory": memory,
        "targets": [
            target(
                "startup: sidecar --help median / python -c pass median",
                "reported (no target is set for it)",
                start["ratio_vs_python_pass"],
                None,
            )
        ],
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def markdown(result: dict[str, Any]) -> str:
    s = result["startup"]
    rows = [
        [
            mode,
            m["rss_mib"],
            m["peak_mib"],
            m["rss_ratio_vs_bare_python"],
            m["wall_s"],
        ]
        for mode, m in result["memory"].items()
    ]
    return "\n".join(
        [
            "## Start-up and memory",
            "",
            md_table(
                ["command", "median ms", "min ms"],
                [
                    ["sidecar --help", s["median_ms"]["sidecar_help"], s["min_ms"]["sidecar_help"]],
                    ["python -c pass", s["median_ms"]["python_pass"], s["min_ms"]["python_pass"]],
                ],
            ),
            "",
            f"`sidecar --help` takes {s['ratio_vs_python_pass']}x a bare interpreter "
            f"(median of {s['runs']}).",
            "",
            md_table(["process", "RSS MiB", "peak MiB", "RSS / bare python", "wall s"], rows),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    modes = list(result["memory"])
    ax.bar(modes, [result["memory"][m]["rss_mib"] for m in modes], label="RSS")
    ax.bar(modes, [result["memory"][m]["peak_mib"] for m in modes], fill=False, label="peak")
    ax.set_ylabel("MiB")
    ax.set_title(f"Resident memory ({result['params']['index_tools']:,}-tool index)")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend()
    return [save_figure(plt, fig, out_dir / "startup.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv, seeded=False)


if __name__ == "__main__":
    main()
