"""Timing: wall times, alternatives in round robin, percentiles and ratios.

Every speed figure the suite reports is a ratio against a baseline measured in the same
run, on the same inputs: absolute times on a shared machine move by tens of percent
between runs, a ratio of interleaved samples by a few hundredths.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


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


def percentile(ordered: Sequence[float], p: float) -> float:
    """The sample at fraction ``p`` of the sorted ``ordered`` (nearest rank, no
    interpolation: a reported p99 is a time that was measured)."""
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def summary(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(ordered), 4),
        "p99_ms": round(percentile(ordered, 0.99), 4),
        "mean_ms": round(statistics.fmean(ordered), 4),
    }


def ratio(numerator: float, denominator: float, digits: int = 3) -> float:
    return round(numerator / denominator, digits) if denominator else float("inf")
