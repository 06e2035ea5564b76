"""The retrieval benchmark's protocols and the sizes of its usage protocol: what
:mod:`benchmarks.bench_retrieval` runs and :mod:`benchmarks.retrieval_usage` runs alone."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from benchmarks.retrieval_data import Protocol

USAGE_PROTOCOLS = ("apibench_torchhub", "seal_tools", "stabletoolbench", "apibench_tensorflow")


@dataclass(frozen=True)
class UsagePlan:
    """The sizes of the usage protocol."""

    protocols: tuple[str, ...]
    queries: int | None
    """Test queries per protocol (``None``: all)."""
    points: tuple[int | None, ...]
    sizes: tuple[int, int]
    """Sessions behind the usage of the cost's two lookups."""
    repeat: int
    cost_on: str = "stabletoolbench"


PLANS = {
    "quick": UsagePlan(USAGE_PROTOCOLS[:2], 150, (0, 100, 300, None), (1_000, 10_000), 40),
    "full": UsagePlan(USAGE_PROTOCOLS, None, (0, 100, 300, 1000, None), (1_000, 100_000), 200),
}
SHORT_QUERIES = (
    "what's the weather in Lisbon",
    "convert 100 euros to yen",
    "send an email to my landlord",
    "book a table for two tonight",
    "find cheap flights to Rome",
    "summarize this pdf report",
    "translate hello into German",
    "latest stock price of Tesla",
)


def loaders() -> dict[str, Callable[[Path], Protocol]]:
    from benchmarks import retrieval_data as data

    out: dict[str, Callable[[Path], Protocol]] = {
        "stabletoolbench": data.stabletoolbench,
        "seal_tools": data.seal_tools,
        "toolbench_completed": data.toolbench_completed,
    }
    for hub in data.APIBENCH_HUBS:
        out[f"apibench_{hub}"] = partial(data.apibench, hub=hub)
    return out
