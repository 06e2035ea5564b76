"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Wall times in milliseconds of ``repeat`` calls."""
    out: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(ordered), 4),
        "p99_ms": round(pct(0.99), 4),
        "mean_ms": round(statistics.fmean(ordered), 4),
    }


def machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "system": platform.system(),
    }


def emit(result: dict[str, Any], out: Path | None) -> None:
    text = json.dumps(result, indent=2)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    print(text)
