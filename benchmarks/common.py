"""Helpers shared by the benchmarks: timing, ratios, paths, a sandboxed Sidecar, output.

Nothing heavy is imported here at module level (no numpy, chromadb, torch, matplotlib):
``benchmarks.run`` imports this module to parse its arguments and must stay instant.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from indexes import Embedder
    from sidecar import Sidecar

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = REPO_ROOT.parent / "shared" / "datasets"
DEFAULT_OUT_DIR = REPO_ROOT / "benchmarks" / "results"


def quick_main(
    run: Callable[..., dict[str, Any]], doc: str | None, argv: list[str] | None, seeded: bool = True
) -> None:
    """``python -m benchmarks.bench_NAME [--quick] [--seed S] [--out FILE]`` for a benchmark
    whose ``run`` takes ``(quick, seed)`` (or ``(quick)`` when not ``seeded``)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true")
    if seeded:
        parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.quick, args.seed) if seeded else run(args.quick), args.out)


def dataset_main(
    run: Callable[..., dict[str, Any]], doc: str | None, argv: list[str] | None
) -> None:
    """``python -m benchmarks.bench_NAME [--full] [--seed S] [--dataset DIR] [--out FILE]``
    for a benchmark whose ``run`` takes ``(quick, seed, dataset)``; quick by default."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--full", action="store_true", help="the full sizes (quick by default)")
    parser.add_argument("--quick", action="store_true", help="the quick sizes (the default)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(not args.full, args.seed, args.dataset.resolve()), args.out)


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Wall times in milliseconds of ``repeat`` calls."""
    out: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def interleaved(
    fns: Mapping[str, Callable[[], Any]], repeat: int, warmup: int = 3
) -> dict[str, list[float]]:
    """Wall times (ms) of each function, called in round robin with a rotating start so
    that drift on a noisy machine (thermal, other processes, caches) hits every
    function alike; ``warmup`` untimed rounds first."""
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(warmup + repeat):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            fns[name]()
            elapsed = (time.perf_counter() - start) * 1000.0
            if round_no >= warmup:
                samples[name].append(elapsed)
    return samples


def summary(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(ordered), 4),
        "p99_ms": round(pct(0.99), 4),
        "mean_ms": round(statistics.fmean(ordered), 4),
    }


def ratio(numerator: float, denominator: float, digits: int = 3) -> float:
    return round(numerator / denominator, digits) if denominator else float("inf")


def machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "system": platform.system(),
        "machine": platform.machine(),
        **cpu_model(),
    }


def cpu_model() -> dict[str, Any]:
    """The CPU's name and the vector extensions that decide onnxruntime's int8 kernels
    (two machines with the same CPU name may differ in them)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = set(next((v for k, v in fields.items() if k.strip() == "flags"), "").split())
    name = next((v.strip() for k, v in fields.items() if k.strip() == "model name"), "")
    wanted = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni")
    return {"cpu": name, "cpu_flags": [f for f in wanted if f in flags]}


def revision() -> str | None:
    """The commit the library was measured at (``+dirty`` when its packages have
    uncommitted changes), or ``None`` outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", "sidecar", "indexes", "cold_store")
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{head}+dirty" if dirty else head


def progress(message: str) -> None:
    """One line on stderr (stdout is kept for results)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def open_sidecar(home: Path, embedder: Embedder) -> Sidecar:
    """A Sidecar on ``home`` with default settings, whatever ``SIDECAR_*`` variables the
    caller's environment holds (a benchmark must not inherit, say, evict-on-report)."""
    from sidecar import Sidecar
    from sidecar.settings import Settings

    return Sidecar(Settings.load(env={}, home=home), embedder)


def model_embedder(name: str = "onnx", cache: Path | None = None) -> Embedder:
    """The real model as the sidecar runs it: ``onnx``, its default (onnxruntime, fp32
    documents, int8 queries, the ONNX build cached in ``cache``, else where
    ``SIDECAR_MODEL_CACHE`` or the user's cache says), or ``torch``, the reference.  No
    query cache: a benchmark times or counts every query."""
    from indexes import MiniLMEmbedder, OnnxMiniLMEmbedder
    from sidecar.settings import Settings

    if name == "torch":
        return MiniLMEmbedder()
    if name != "onnx":
        raise ValueError(f"embedder must be 'onnx' or 'torch', got {name!r}")
    return OnnxMiniLMEmbedder(cache if cache is not None else Settings.load().model_cache_path)


def target(name: str, goal: str, measured: Any, met: bool | None, note: str = "") -> dict[str, Any]:
    """One target line: ``met`` is ``None`` when the target does not apply to this run."""
    out: dict[str, Any] = {"target": name, "goal": goal, "measured": measured, "met": met}
    if note:
        out["note"] = note
    return out


# ---- output ----------------------------------------------------------------------------
def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
        if isinstance(value, int) and not isinstance(value, bool):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def md_targets(targets: Sequence[Mapping[str, Any]]) -> str:
    def verdict(met: bool | None) -> str:
        return "n/a" if met is None else ("met" if met else "**missed**")

    rows = [
        (t["target"], t["goal"], _short(t["measured"]), verdict(t["met"]), t.get("note", ""))
        for t in targets
    ]
    return md_table(["target", "goal", "measured", "verdict", "note"], rows)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_short(v)}" for k, v in value.items())
    return str(value)


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_json(result: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def emit(result: dict[str, Any], out: Path | None) -> None:
    """The standalone modules' output: JSON on stdout, and in ``out`` when given."""
    text = json.dumps(result, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)


def save_figure(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write and close one matplotlib figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
